"""What ends a user's open websockets: logout, a new password, deactivation, other groups (a group
deleted included).

Sockets are closed after the change commits, so one that reconnects at once already
meets the new state.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import m2m_changed, post_save, pre_delete, pre_save
from django.dispatch import receiver

from accounts.websocket import CLOSE_ACCESS_CHANGED, CLOSE_UNAUTHENTICATED, user_sockets_close

User = get_user_model()


def _close_after_commit(user_ids: Any, code: int) -> None:
    for pk in user_ids:
        transaction.on_commit(partial(user_sockets_close, pk, code=code))


@receiver(user_logged_out)
def _logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is not None:
        _close_after_commit([user.pk], CLOSE_UNAUTHENTICATED)


@receiver(pre_save, sender=User)
def _remember_credentials(sender: Any, instance: Any, **kwargs: Any) -> None:
    if instance.pk:
        instance._kb_before = User.objects.filter(pk=instance.pk).values_list("password", "is_active").first()


@receiver(post_save, sender=User)
def _credentials_changed(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    before = getattr(instance, "_kb_before", None)
    if before is not None and before != (instance.password, instance.is_active):
        _close_after_commit([instance.pk], CLOSE_UNAUTHENTICATED)


@receiver(m2m_changed, sender=User.groups.through)
def _groups_changed(sender: Any, instance: Any, action: str, reverse: bool, pk_set: Any, **kwargs: Any) -> None:
    if not reverse:  # user.groups.add/remove/clear/set
        if action in ("post_add", "post_remove", "post_clear"):
            _close_after_commit([instance.pk], CLOSE_ACCESS_CHANGED)
    elif action in ("post_add", "post_remove"):  # group.user_set.add/remove
        _close_after_commit(pk_set or (), CLOSE_ACCESS_CHANGED)
    elif action == "pre_clear":  # group.user_set.clear: the members are known only before
        _close_after_commit(list(instance.user_set.values_list("pk", flat=True)), CLOSE_ACCESS_CHANGED)


@receiver(pre_delete, sender=Group)
def _group_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Deleting a group removes its memberships without m2m_changed. The members are known only now, and
    the deletion runs in a transaction (Django's collector), so their sockets close once it commits."""
    _close_after_commit(list(instance.user_set.values_list("pk", flat=True)), CLOSE_ACCESS_CHANGED)
