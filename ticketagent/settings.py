"""Settings for the ticket agents, read from the environment.

Every variable read here is in the table of docs/configuration.md (a test compares them) and in .env.example;
values with one right value are constants, each with its reason beside it.
Local defaults are safe for a laptop: the private PostgreSQL under var/, a local Redis,
the offline model and the sandbox helpdesk. With DEBUG off the process
refuses to start without SECRET_KEY and ALLOWED_HOSTS.
"""

from pathlib import Path
from urllib.parse import quote

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from ticketagent.env import (
    csp_policy,
    envbool,
    envchoice,
    envfloat,
    envint,
    envint_or_none,
    envlist,
    envmap,
    envprices,
    envstr,
    secret_key_weakness,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("TICKETAGENT_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = envbool("DEBUG", True)

_DEV_SECRET_KEY = "insecure-local-development-key-do-not-use-in-production"
SECRET_KEY = envstr("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DEBUG is off; generate one with "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'")
    SECRET_KEY = _DEV_SECRET_KEY
elif not DEBUG and (_weakness := secret_key_weakness(SECRET_KEY, development_key=_DEV_SECRET_KEY)):
    raise ImproperlyConfigured(
        f"SECRET_KEY is too weak for DEBUG off: {_weakness}. Use at least 50 random characters, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'")

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
if not DEBUG and not ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS must be set when DEBUG is off: the comma-separated host names the site answers to, "
        "e.g. ALLOWED_HOSTS=agents.example.com")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",  # its index wrappers: the trigram indexes (`OpClass`) of search
    "django_htmx",
    "template_partials",
    "django_rq",
    "csp",
    "django_ratelimit",
    "ledger",
    "ticketagent",
]

MIDDLEWARE = [
    # /healthz and /readyz, answered before the Host check and the HTTPS redirect (load balancers probe by address)
    "ticketagent.web.probes.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # static files (hashed names, cached for a year) answered before anything else runs
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # before anything reads the body (CSRF reads request.POST): 413 for an oversized request,
    # 400 for a body cut short or a form Django cannot parse
    "ticketagent.web.middleware.RequestSizeLimitMiddleware",
    "csp.middleware.CSPMiddleware",
    # DEBUG on (make run): the product's 404 and 500 pages instead of Django's debug pages; outside CommonMiddleware
    "ticketagent.web.error_pages.ProductErrorPages",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # after CSRF (a forged POST spends nobody's budget) and auth (limits are per user)
    "ticketagent.web.middleware.RateLimitMiddleware",
    "ticketagent.web.queue_guard.QueueChangesByOperatorsMiddleware",
    # a person's change shows at once in the counts every page reads (the health numbers' snapshot)
    "ticketagent.web.middleware.FreshCountsAfterChangesMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # the live views' one change cursor: a poll that would swap in what the page shows gets 204 (web/live.py)
    "ticketagent.web.live.LiveViews",
]

ROOT_URLCONF = "ticketagent.urls"
WSGI_APPLICATION = "ticketagent.wsgi.application"

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
                "ticketagent.web.context_processors.product",
                "ticketagent.web.context_processors.attention",
            ],
        },
    },
]

# --- database ---------------------------------------------------------------
# The default is the private PostgreSQL that `make run` starts under var/ (ops/pgserver.py), over its unix socket.
DATABASE_URL = envstr("DATABASE_URL") or f"postgres://postgres@{quote(str(VAR_DIR / 'postgres'), safe='')}/ticketagent"
# 0: a web request's connection closes with it (requests are short; a worker keeps its own: pipeline/run.py)
_db = dj_database_url.parse(DATABASE_URL, conn_max_age=0)
if _db["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured(
        f"DATABASE_URL: the ticket agents run on PostgreSQL only, not {DATABASE_URL.partition(':')[0]!r}; give "
        "postgres://user:password@host:5432/name, or leave it unset for the private server `make run` starts")
# A dead link or host is noticed within seconds, not the kernel's hours:
# TCP keepalives, and tcp_user_timeout for data sent but never
# acknowledged (libpq options, ignored over a unix socket; docs/deploy.md).
# The workers' and the sweep's sessions set the same values on the server's
# side (ticketagent/scheduling/db_sessions.py): a vanished host's sessions end there too.
_db["OPTIONS"] = {
    "connect_timeout": 10,  # s: a server that has not answered a new connection in 10 s is down, not slow
    "keepalives": 1,
    "keepalives_idle": 10,  # s of silence before the first probe: a lost host is suspected within seconds
    "keepalives_interval": 3,  # s between probes
    "keepalives_count": 3,  # unanswered probes: the link is dead after idle + 3 x 3 s = 19 s
    "tcp_user_timeout": 20000,  # ms data sent may stay unacknowledged: just past the probes' 19 s
    **_db.get("OPTIONS", {}),
}
# Parameters bound by the server, and a statement a session has run 5 times kept prepared there (parsed once;
# planned once too, unless autovacuum is off: DB_PLAN_CACHE_MODE below): a worker runs the same few statements
# for every item, while a statement run once or twice is not worth a prepare. A pool in front runs in session
# mode, which keeps prepared statements (docs/deploy.md).
_db["OPTIONS"].update(server_side_binding=True, prepare_threshold=5)
_db["CONN_HEALTH_CHECKS"] = True
DATABASES = {"default": _db}
# Per-session limits of the workers' and the sweep's sessions (ticketagent/scheduling/db_sessions.py).
# Fixed values, not read from the environment (tests set them here, in-process):
DB_STATEMENT_TIMEOUT_SECONDS = 30.0  # a phase's statements take milliseconds: 30 s is a stalled server
DB_IDLE_IN_TRANSACTION_SECONDS = 5.0  # no phase keeps a transaction open across a network call
DB_SWEEP_LOCK_TIMEOUT_SECONDS = 2.0  # the sweep skips locked rows; a lock held longer is a worker's, left to it
# Workers' and the sweep's plan_cache_mode; empty: by the server's autovacuum
# (ticketagent/scheduling/db_sessions.py), the choice measured best either way
# (docs/benchmarks.md, "Plans kept from near-empty tables").
DB_PLAN_CACHE_MODE = ""
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- redis / rq ---------------------------------------------------------------
REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6379/0")
RQ_QUEUE = envstr("RQ_QUEUE", "ticketagent")
RQ_QUEUES = {
    # 900 s: rq's own bound on one item's job, far past any lease-checked call; the lease, not rq, fences work
    RQ_QUEUE: {"URL": REDIS_URL, "DEFAULT_TIMEOUT": 900},
}
# The cache holds rate-limit counters and the health counts: Redis, so every web process on every host shares
# them. Its key prefix is the queue's name: RQ_QUEUE is what already keeps two deployments sharing one Redis
# database apart, and rq's own keys all start with "rq:".
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": RQ_QUEUE,
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    },
}
# We enqueue from transaction.on_commit ourselves, so the queue itself
# enqueues immediately when asked.
RQ = {"COMMIT_MODE": "auto"}
# The dashboard's whole-database counts (health tiles, /metrics) are shared
# through the cache for this many seconds (0: counted for every request):
# the pages poll every 2 s and Prometheus every 15 s or more; counts 5 s old are current enough.
HEALTH_CACHE_SECONDS = 5.0
# How a worker runs its jobs: in its own process (the default; one database
# connection per worker, kept between jobs and health-checked before each,
# unless the previous one ended cleanly moments ago: pipeline/run.py) or,
# with WORKER_FORK, in a work-horse forked per job, rq's classic model.
WORKER_FORK = envbool("WORKER_FORK", False)
# Items one in-process worker runs at once, each in a thread of its own with its own database connection (a
# model call is waiting, not work): a process's slots. Each slot holds a connection: the workers' slots together
# must stay under PostgreSQL's max_connections. A forking worker (WORKER_FORK) runs one item at a time.
WORKER_THREADS = envint("WORKER_THREADS", 1, minimum=1)
# How often a worker checks that its command channel (rq's stop-job, shutdown,
# kill-horse) still delivers, by a probe through it; a deaf one is rebuilt
# (ticketagent/scheduling/rqworker.py). 0: never checked (rq's own behaviour). 30 s: a
# stop or shutdown is heard within half a minute for one PUBLISH a worker each time.
WORKER_COMMAND_CHECK_SECONDS = 30.0
RQ_SHOW_ADMIN_LINK = True

# --- auth ---------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "tasks"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
# The zone pages write local time in (with the zone shown); exports and logs are UTC whatever it is.
TIME_ZONE = envstr("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# Static files: `manage.py collectstatic` copies them to STATIC_ROOT with a
# content hash in each name (app.4f3c….css) and compressed copies; WhiteNoise
# serves them from every web process with a one-year Cache-Control. With
# DEBUG on they are served from the source folders, as edited (no collectstatic).
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"  # beside the product's other files (TICKETAGENT_VAR_DIR); WhiteNoise serves it
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

# --- security (docs/security.md) ---------------------------------------------------
# DEBUG on (make run, plain http on 127.0.0.1): no HTTPS redirect, no HSTS,
# cookies without the Secure flag. DEBUG off: all of them on; `manage.py check
# --deploy --fail-level WARNING` is clean (a test checks). PLAIN_HTTP=true
# (docs/deploy.md "Plain HTTP or TLS"): DEBUG off served over plain http with
# nothing in front, e.g. on a private network: the three are off and their
# deploy-check warnings silenced, because the operator chose so.
PLAIN_HTTP = envbool("PLAIN_HTTP", False)
_HTTPS = not DEBUG and not PLAIN_HTTP
SESSION_COOKIE_SECURE = _HTTPS
CSRF_COOKIE_SECURE = _HTTPS
SESSION_COOKIE_HTTPONLY = True
# htmx sends the token from <body hx-headers>; no script ever reads the cookie.
CSRF_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = 12 * 3600  # one working day: an operator signs in once a shift
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", _HTTPS)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 3600 if _HTTPS else 0, minimum=0)
# HSTS covers the site's own subdomains whenever it is sent: they are the deployment's own names (a sibling host
# under the parent domain is not covered), and preload requires it.
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
if PLAIN_HTTP and (SECURE_SSL_REDIRECT or SECURE_HSTS_SECONDS):
    raise ImproperlyConfigured(
        "PLAIN_HTTP=true serves plain http, but SECURE_SSL_REDIRECT=true or SECURE_HSTS_SECONDS > 0 asks browsers "
        "for https: unset one of them (docs/deploy.md, \"Plain HTTP or TLS\")")
# Preloading is a commitment to browsers' built-in HSTS lists, hard to undo:
# opt in explicitly. Until then Django's reminder (security.W021) is silenced.
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
# django-ratelimit names the cache backends it tested; Django's own RedisCache is
# not among them but does what it needs: add() is SET NX and incr() is INCRBY, atomic.
SILENCED_SYSTEM_CHECKS.append("django_ratelimit.W001")
if PLAIN_HTTP:
    # no HSTS (W004), no HTTPS redirect (W008), cookies without Secure (W012, W016): what PLAIN_HTTP means
    SILENCED_SYSTEM_CHECKS += ["security.W004", "security.W008", "security.W012", "security.W016"]
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto (otherwise the
# HTTPS redirect would loop). Only set it when the proxy strips the header from clients.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if envbool("TRUST_X_FORWARDED_PROTO", False) else None
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# The Content-Security-Policy header (django-csp): only our own scripts and
# styles; inline style attributes are allowed (progress bars), inline scripts
# and javascript: URLs are not. It is the one the product's own pages need, so
# not a setting. /admin/ is left alone: the Django admin and the RQ
# dashboard (staff only) use inline scripts.
CONTENT_SECURITY_POLICY = csp_policy(
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
)
CONTENT_SECURITY_POLICY["EXCLUDE_URL_PREFIXES"] = ["/admin/"]
# A request body larger than this is refused with 413 before it is read
# (files included: ticketagent.web.middleware.RequestSizeLimitMiddleware):
# the largest upload (UPLOAD_MAX_BYTES, below) and 2 MiB for the form around it.
UPLOAD_MAX_BYTES = envint("UPLOAD_MAX_BYTES", 10 * 1024 * 1024, minimum=1)
REQUEST_MAX_BYTES = UPLOAD_MAX_BYTES + 2 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = REQUEST_MAX_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = REQUEST_MAX_BYTES
# Budgets (ticketagent/web/ratelimit.py, counted by django-ratelimit in the
# default cache): over them, 429 with Retry-After. Failed logins are counted
# per user name and per client address; a browser that signed in before has
# its own budget, so others' failures never lock its owner out.
RATE_LIMIT_UPLOADS_PER_MINUTE = 10  # a person uploads a batch now and then; 10 a minute is a script
RATE_LIMIT_ACTIONS_PER_MINUTE = 120  # two clicks a second, sustained, is no person at work
RATE_LIMIT_LOGINS_PER_MINUTE = 10  # a typo or two, not a password guesser
RATE_LIMIT_LOGINS_PER_CLIENT_PER_MINUTE = 10  # the same, per address
# Behind a reverse proxy every request comes from the proxy's address: with this
# on, the client is the right-most X-Forwarded-For entry (the one the proxy
# appended). Only set it when such a proxy is always in front.
TRUST_X_FORWARDED_FOR = envbool("TRUST_X_FORWARDED_FOR", False)
# Settings whose values are secrets: redacted from channel errors, logs and
# error pages wherever they turn up (passwords inside the URLs too).
SECRET_SETTINGS = ("SECRET_KEY", "OPENAI_API_KEY", "HELPDESK_TOKEN", "HELPDESK_PASSWORD", "EMAIL_HOST_PASSWORD",
                   "METRICS_TOKEN", "DATABASE_URL", "REDIS_URL", "HELPDESK_URL", "OPENAI_BASE_URL")
DEFAULT_EXCEPTION_REPORTER = "ticketagent.web.middleware.RedactingExceptionReporter"
DEFAULT_EXCEPTION_REPORTER_FILTER = "ticketagent.web.middleware.RedactingExceptionReporterFilter"

# --- the product ----------------------------------------------------------------
UPLOAD_MAX_ROWS = envint("UPLOAD_MAX_ROWS", 50_000, minimum=1)

OPENAI_API_KEY = envstr("OPENAI_API_KEY")
OPENAI_BASE_URL = envstr("OPENAI_BASE_URL") or None
OPENAI_MODEL = envstr("OPENAI_MODEL", "gpt-4o-mini")
OPENAI_TIMEOUT = envfloat("OPENAI_TIMEOUT", 60.0, minimum=0.1)
OPENAI_CONNECT_TIMEOUT = 5.0  # s: opening a connection takes milliseconds; 5 s is an endpoint that is down
OPENAI_MAX_RETRIES = envint("OPENAI_MAX_RETRIES", 2, minimum=0)
AGENT_MAX_STEPS = 6  # a step's turns with tools: a decision needs two or three; six is a model going round
# USD per 1M tokens by model name, over the list prices in ticketagent/llm/prices.py (JSON; `.env.example`).
MODEL_PRICES = envprices("MODEL_PRICES")
# The model API's governor (ticketagent/governor.py), shared by every worker through Redis: requests and
# tokens per minute (empty: as the API's x-ratelimit-* headers say), calls in flight (empty: no cap); how long
# a call waits for its turn (a rate limit, an outage) before its item is handed back to the queue; the longest
# pause between two probes of an endpoint that is down.
OPENAI_RPM = envint_or_none("OPENAI_RPM", None, minimum=1)
OPENAI_TPM = envint_or_none("OPENAI_TPM", None, minimum=1)
OPENAI_MAX_CONCURRENCY = envint_or_none("OPENAI_MAX_CONCURRENCY", None, minimum=1)
MODEL_WAIT_SECONDS = 120.0  # two minutes: then the item goes back to the queue and nothing holds its slot
MODEL_PROBE_MAX_SECONDS = 8.0  # an endpoint back up is noticed within 8 s, for one request per 8 s at most

# Consecutive failed items that suspend a task (each task may override it): a broken model or helpdesk
# trips it at once, one bad ticket does not.
SUSPEND_AFTER_FAILURES = 3
# An item's lease: how long a worker may go silent before the sweep takes it
# over. A worker calls out only while its lease is known valid for the whole
# call (the channel's longest call + LEASE_MARGIN_SECONDS): the lease must be
# longer than that (checked at start: `manage.py check`).
LEASE_SECONDS = envfloat("LEASE_SECONDS", 30.0, minimum=1.0)
# Ten heartbeats a lease: a lease outlives nine lost rounds, and a round is one statement a process.
HEARTBEAT_SECONDS = LEASE_SECONDS / 10
# What the lease must still hold after a call's own bound: the time from the check to the send (a thread
# switch, a busy host) -- a second is hundreds of times that and a small part of any lease.
LEASE_MARGIN_SECONDS = 1.0
RECOVER_INTERVAL_SECONDS = envfloat("RECOVER_INTERVAL_SECONDS", 1.0, minimum=0.1)
# A queued item whose rq job has been missing from Redis this long is enqueued again (job ids dedupe: a push that
# lands late does no harm). Half a lease, at least 1 s: a job is pushed right after its commit, so one still
# missing means its process stalled or died, or Redis lost it -- and a lease is how long a silent process is
# trusted; after a loss of Redis the queued items go out again before the running ones' leases expire.
REQUEUE_GRACE_SECONDS = max(1.0, LEASE_SECONDS / 2)
# Jobs of one task waiting in Redis at a time (its window; the rest wait in
# the database and are sent as items end). 0: twice the live workers' item threads, at least 4 -- every
# thread has its next job at hand, and a flush of Redis loses little (ticketagent/scheduling/window.py).
QUEUE_WINDOW = 0

# What the ledger is told of its owner (it names no action and no system of its own):
# the action table and the function that returns a channel's adapter.
LEDGER_ACTIONS = "ticketagent.actions.ACTIONS"
LEDGER_CHANNELS = "ticketagent.channels.registry.get_channel"

# Channels: the helpdesk and SMTP email. HELPDESK_KIND picks the helpdesk's
# adapter: rest (the generic REST contract the sandbox speaks), rt (Request
# Tracker 5, REST2) or zendesk (Zendesk Support API); docs/channels.md.
# Defaults point at the sandbox helpdesk that `make run` starts.
HELPDESK_KIND = envchoice("HELPDESK_KIND", "rest", ("rest", "rt", "zendesk"))
HELPDESK_URL = envstr("HELPDESK_URL", "http://127.0.0.1:8025")
HELPDESK_TOKEN = envstr("HELPDESK_TOKEN")  # rest: bearer token; zendesk: API token
HELPDESK_USER = envstr("HELPDESK_USER")  # rt: user name; zendesk: the agent's email address
HELPDESK_PASSWORD = envstr("HELPDESK_PASSWORD")  # rt: password
# Check the helpdesk (and the mail server, for email tasks) before creating a
# task: wrong credentials are one clear error, not fifty failed items.
HELPDESK_CHECK_BEFORE_TASKS = True
HELPDESK_CONNECT_TIMEOUT = envfloat("HELPDESK_CONNECT_TIMEOUT", 2.0, minimum=0.1)
HELPDESK_READ_TIMEOUT = envfloat("HELPDESK_READ_TIMEOUT", 5.0, minimum=0.1)
# How long a gateway in front of the helpdesk (nginx, Apache) may still hand a
# request upstream after it answered 502/503/504 or the call timed out: its
# upstream timeout (nginx's proxy_read_timeout and Apache's ProxyTimeout
# default to 60 s). Reconcile trusts a "not found" only after it.
HELPDESK_UPSTREAM_TIMEOUT = envfloat("HELPDESK_UPSTREAM_TIMEOUT", 60.0, minimum=0.0)
# A helpdesk or mail server that is unavailable (no connection, no answer, a
# 5xx): its calls wait, one worker probes it (ticketagent/channels/waiting.py).
# How long a call waits before its item is handed back to the queue (not
# failed); the longest pause between two probes.
CHANNEL_WAIT_SECONDS = 120.0  # as MODEL_WAIT_SECONDS: then the item goes back to the queue
CHANNEL_PROBE_MAX_SECONDS = 8.0  # as MODEL_PROBE_MAX_SECONDS: back within 8 s, one probe per 8 s at most
# Zendesk only (HELPDESK_KIND=zendesk; docs/channels.md "Zendesk Support API"):
# the group and priority the escalate action sets (0 / "keep": leave as is),
# and the longest Retry-After a request waits out before its one retry.
ZENDESK_ESCALATION_GROUP_ID = envint("ZENDESK_ESCALATION_GROUP_ID", 0, minimum=0)
ZENDESK_ESCALATION_PRIORITY = envchoice("ZENDESK_ESCALATION_PRIORITY", "high",
                                        ("keep", "low", "normal", "high", "urgent"))
ZENDESK_RATE_LIMIT_MAX_WAIT = 5.0  # s: a longer Retry-After would hold the item's lease; it is retried later
# Request Tracker (HELPDESK_KIND=rt): HELPDESK_URL is RT's base URL (the adapter
# adds /REST/2.0), HELPDESK_USER and HELPDESK_PASSWORD an RT user's (basic auth).
# The transaction custom field that holds each write's idempotency key: the name `manage.py rt-setup` gives the
# field it creates (docs/channels.md), so every RT the agent works on names it alike.
RT_CUSTOM_FIELD = "IdempotencyKey"
# What `escalate` changes: the queue, the owner (an RT user name), the priority
# (none: left alone). At least one must be set.
RT_ESCALATION_QUEUE = envstr("RT_ESCALATION_QUEUE")
RT_ESCALATION_OWNER = envstr("RT_ESCALATION_OWNER")
RT_ESCALATION_PRIORITY = envint_or_none("RT_ESCALATION_PRIORITY", 100, minimum=0)
# The agent's statuses (ticketagent.vocabulary.HelpdeskStatus) as RT statuses.
RT_STATUSES = envmap("RT_STATUSES", {"open": "open", "pending": "stalled", "solved": "resolved",
                                     "escalated": "open", "on_hold": "stalled"},
                     keys=("open", "pending", "solved", "escalated", "on_hold"))
EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"  # the email channel speaks SMTP (tests use Django's own)
EMAIL_HOST = envstr("EMAIL_HOST", "127.0.0.1")
EMAIL_PORT = envint("EMAIL_PORT", 8026, minimum=1)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = envstr("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", 5, minimum=1)
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "support@example.com")
MESSAGE_ID_DOMAIN = envstr("MESSAGE_ID_DOMAIN", "ticketagent.local")

# /metrics: login, or this bearer token for a Prometheus scraper.
METRICS_TOKEN = envstr("METRICS_TOKEN")
# An unknown effect older than this is shown as overdue: reconcile settles one within minutes, so a quarter of
# an hour means it needs a person.
UNKNOWN_AGE_WARN_SECONDS = 900

LOG_LEVEL = envstr("LOG_LEVEL", "INFO")
_CHATTY = "DEBUG" if LOG_LEVEL.upper() == "DEBUG" else "WARNING"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # every handler carries the redaction filter (a test checks): secrets never reach a log
    "filters": {"redact_secrets": {"()": "ticketagent.web.middleware.RedactSecretsFilter"},
                "rq_job_ok_once": {"()": "ticketagent.scheduling.joblog.JobOkOnce"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact_secrets"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # httpx's line for every model call (3 an item) only when chasing a problem: the event log has each call
        "httpx": {"level": _CHATTY}, "httpx2": {"level": _CHATTY},
        # a job's start and end, a line each (ticketagent/scheduling/joblog.py)
        "rq.worker": {"filters": ["rq_job_ok_once"]},
    },
}
