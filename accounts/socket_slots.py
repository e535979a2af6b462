"""How many websockets one user holds open, across every Daphne process (KB_WS_MAX_PER_USER).

Each open socket holds a slot: a member of the user's sorted set in Redis, scored with the time its
lease ends. A socket renews its lease every LEASE_SECONDS / 3 while it is open and gives the slot back
when it closes; a Daphne that dies without closing its sockets leaves slots that lapse within
LEASE_SECONDS, so a crash never locks a user out for longer. Taking a slot is one Lua script (drop the
lapsed, count, add), so two sockets opening at once cannot both take the last one. Redis's own clock
scores the leases: the Daphnes' clocks need not agree.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import redis
from django.conf import settings

LEASE_SECONDS = 60

_TAKE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if tonumber(ARGV[3]) > 0 and redis.call('ZSCORE', KEYS[1], ARGV[1]) == false
        and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
    return 0
end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[2]), ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]) + 1)
return 1
"""


def _key(user_id: int) -> str:
    return f"kb:ws:user:{user_id}"


@cache
def _client(url: str) -> tuple[redis.Redis, Any]:
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    return client, client.register_script(_TAKE)


def socket_slot_take(user_id: int, socket: str, *, cap: int | None = None) -> bool:
    """Take (or renew) the slot of `socket` (its channel name); False when the user already holds `cap`
    other sockets (KB_WS_MAX_PER_USER unless given; 0: taken whatever the count)."""
    _, take = _client(settings.REDIS_URL)
    limit = settings.KB_WS_MAX_PER_USER if cap is None else cap
    return bool(take(keys=[_key(user_id)], args=[socket, LEASE_SECONDS, limit]))


def socket_slot_renew(user_id: int, socket: str) -> None:
    """Extend an open socket's lease: held once taken, even if the cap was lowered meanwhile."""
    socket_slot_take(user_id, socket, cap=0)


def socket_slot_release(user_id: int, socket: str) -> None:
    client, _ = _client(settings.REDIS_URL)
    client.zrem(_key(user_id), socket)


def socket_slots_held(user_id: int) -> int:
    """Slots the user holds now, lapsed ones included until the next take drops them."""
    client, _ = _client(settings.REDIS_URL)
    return int(client.zcard(_key(user_id)))
