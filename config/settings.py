"""Onefold settings, read from the environment (12-factor).

Every value an operator may change is named in docs/operations.md. The same module serves
the web processes, the django-q2 workers and the management commands.
"""

from __future__ import annotations

import ipaddress
import math
import sys
from datetime import timedelta
from pathlib import Path
from typing import TypedDict

from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from idempotency_core.platform.env import (
    database_from_url,
    database_url_default,
    env_bool,
    env_float,
    env_header_pair,
    env_int,
    env_list,
    env_origins,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
# The insecure default keeps `make run` zero-setup. With DEBUG off the system
# check onefold.W001 warns about it on loopback, and onefold.E008 refuses to
# start when ALLOWED_HOSTS names any other host. An empty SECRET_KEY is a
# forgotten one: it counts as absent.
INSECURE_SECRET_KEY = "onefold-insecure-development-key-change-me"
SECRET_KEY = env_str("SECRET_KEY", "") or INSECURE_SECRET_KEY
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])

# --- Production hardening (docs/operations.md, "Security") ----------------
# Read from variables named as Django's own settings. All off by default: the
# quick start serves plain HTTP on loopback, where secure cookies would never
# be sent back and a redirect to HTTPS would lead nowhere.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
# Load balancers probe over plain HTTP inside the network; /metrics is not
# exempt (its bearer token must not cross the network in clear).
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
CSRF_TRUSTED_ORIGINS = env_origins("CSRF_TRUSTED_ORIGINS")
# `HEADER,value`, e.g. X-Forwarded-Proto,https: only behind a proxy that always
# sets (and never passes through) that header.
SECURE_PROXY_SSL_HEADER = env_header_pair("SECURE_PROXY_SSL_HEADER")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "django_htmx",
    "axes",
    "csp",
    # The web layer's request metrics (its two middlewares below), on /metrics.
    "django_prometheus",
    "idempotency_core",
    # /healthz, /readyz, /metrics and the ids on JSON log lines (docs/operations.md).
    "idempotency_core.observability",
    "integrations",
    "review_console",
    # The sandbox, emulators, drill and benchmarks: commands only, off the production path.
    "lab",
]

MIDDLEWARE = [
    # First and (but for axes) last, as django-prometheus requires: together they
    # time and count every request, whatever the middlewares between them answer.
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Serves the console's static files (htmx) from web, gunicorn or runserver alike.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
    # Inside every other middleware but axes, so a lockout page is counted as answered.
    "django_prometheus.middleware.PrometheusAfterMiddleware",
    # Last, as django-axes requires: it turns a lockout raised during login into
    # the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

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
            ],
        },
    },
]

# Connections persist (docs/operations.md, "Database connections"): each web or worker process keeps
# one connection per thread for DATABASE_CONN_MAX_AGE seconds (0: a new connection per
# request or task, which would dominate ingest's time), and checks
# it with a round trip before each request or task reuses it (CONN_HEALTH_CHECKS), so
# a PostgreSQL restart or an idle timeout costs a reconnect, never a failed request.
# Not a psycopg pool: with gunicorn's sync workers and django-q2's forked workers each
# process runs one request or task at a time, so a pool adds a checkout per request and
# background threads, and one created before django-q2 forks would be shared with the
# children (docs/operations.md, "Database connections").
# Without DATABASE_URL, the quick start's embedded PostgreSQL server (`make run`), on the
# Unix socket in its data directory (`embedded_database_dir` in
# idempotency_core/platform/env.py). Any other engine is refused here, before anything runs.
DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", "") or database_url_default(BASE_DIR),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 600, minimum=0),
        conn_health_checks=env_bool("DATABASE_CONN_HEALTH_CHECKS", True),
    )
}
if env_bool("DATABASE_PREPARED_STATEMENTS", True):
    # Ingest's one statement (intake/ingest_statement.py) is prepared once per connection
    # and then only executed. psycopg prepares only what a cursor asks for by name when
    # the threshold is this high, and Django's own cursors bind on the client and never
    # prepare, so nothing else changes. Set DATABASE_PREPARED_STATEMENTS=0 behind a
    # pooler that cannot keep prepared statements (PgBouncer in transaction mode before
    # 1.21, or without max_prepared_statements); the statement is then parsed each time.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 2**31 - 1
# Django's backend with a health check that reads the socket instead of sending
# SELECT 1 (config/postgresql/base.py says why that is enough).
DATABASES["default"]["ENGINE"] = "config.postgresql"

# The cache holds only the per-source request counts (the API's 429). Local memory
# counts per process; CACHE_URL=redis://host:6379/0 shares them between every web
# process, so a source's rate holds however many gunicorn workers serve it.
CACHE_URL = env_str("CACHE_URL", "")
if CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": CACHE_URL,
            "KEY_PREFIX": env_str("CACHE_KEY_PREFIX", "onefold"),
        }
    }
elif CACHE_URL:
    raise ImproperlyConfigured(f"CACHE_URL must be a redis:// URL, not {CACHE_URL!r}.")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# The console has a handful of static files (htmx): WhiteNoise serves them straight from
# the apps, so no deployment can forget `collectstatic` and serve a console without them.
# STATIC_ROOT is only for a deployment that collects them for a CDN.
STATIC_ROOT = env_str("STATIC_ROOT", "") or None
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/console/"

# --- Sign-in throttling (django-axes) ----------------------------------------
# Every authenticate() with a request goes through axes first: the console's
# /accounts/login/ and the admin's login alike.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Five wrong passwords in a row lock the account; the next attempt is refused
# even with the right password until the cool-off has passed.
AXES_FAILURE_LIMIT = 5
AXES_RESET_ON_SUCCESS = True
AXES_COOLOFF_TIME = timedelta(minutes=env_int("ONEFOLD_LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
# By username alone. Attackers guessing one staff password spread their tries
# over many addresses, so a per-IP count would let them through; and behind a
# proxy (or in the tests, all from 127.0.0.1) every client shares one address,
# so counting by IP would lock every reviewer out at once. The price is that
# anyone can lock a known username for the cool-off; an administrator lifts it
# early with `manage.py axes_reset_username NAME`.
AXES_LOCKOUT_PARAMETERS = ["username"]
# axes.W006 asks for "ip_address" in the parameters above; the comment there says
# why it is left out on purpose.
SILENCED_SYSTEM_CHECKS = ["axes.W006"]
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Failed attempts (username, address, user agent) are kept only while they count
# towards a lockout; successful sign-ins are not logged a second time (the user's
# last_login already says when).
AXES_DISABLE_ACCESS_LOG = True
# Password reset mails staff a sign-in link: off unless an operator has set up
# mail for staff (docs/operations.md, "Security"). Off, its pages answer 404.
ONEFOLD_PASSWORD_RESET = env_bool("ONEFOLD_PASSWORD_RESET", False)

# --- Content-Security-Policy (django-csp 4) -----------------------------------
# Every HTML page is the project's own: scripts only from our static files (htmx,
# Swagger UI from drf-spectacular-sidecar), no inline script anywhere. Style
# sheets from our static files too; inline style *attributes* stay allowed
# (`style-src-attr`) because templates use them for one-off spacing and the
# progress bar's width: an attribute can neither run script nor, with img-src
# 'self', send anything anywhere. JSON answers (API, hooks) carry the header
# harmlessly.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "style-src-attr": [UNSAFE_INLINE],
        # Swagger UI's style sheet draws its icons as data: SVGs.
        "img-src": [SELF, "data:"],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    },
}

# Logging policy: log lines name ids (event, operation, delivery) and exception
# classes, never a payload or a contact. idempotency_core/platform/logfilters.py scrubs what other
# code writes; `configure` applies this dict, then puts that filter on every
# handler it did not create (gunicorn's error log in a worker, for one).
#
# LOG_FORMAT: `json` (one object a line: time, level, logger, message, and the
# event, operation and delivery ids when known; for log shippers) or `plain`.
# Unset: plain when DEBUG is on or stderr is a terminal (`make run` stays
# readable), json otherwise (a service manager, a container, a pipe).
LOG_FORMAT = env_str("LOG_FORMAT", "") or (
    "plain" if DEBUG or (sys.stderr is not None and sys.stderr.isatty()) else "json"
)
if LOG_FORMAT not in {"json", "plain"}:
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r} is neither json nor plain")
LOGGING_CONFIG = "idempotency_core.platform.logfilters.configure"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "django.server": {
            "()": "django.utils.log.ServerFormatter",
            "format": "[{server_time}] {message}",
            "style": "{",
        },
        "json": {"()": "idempotency_core.platform.logfilters.JsonFormatter"},
    },
    "filters": {
        "redact": {"()": "idempotency_core.platform.logfilters.RedactSecrets"},
        "quiet_task_lines": {"()": "idempotency_core.platform.logfilters.QuietTaskLines"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "plain",
            "filters": ["redact"],
        },
        "django.server": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "django.server",
            "filters": ["redact"],
        },
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # Django's defaults give these handlers of their own: a console without the
        # filter when DEBUG is on, and mail to ADMINS quoting the request and the
        # frames' local variables. Here Django writes through the filtered console only.
        "django": {"level": "INFO", "propagate": True},
        "django.server": {"handlers": ["django.server"], "level": "INFO", "propagate": False},
        # SQL is logged with its parameters (payloads, addresses): never, whatever
        # LOG_LEVEL says.
        "django.db.backends": {"level": "INFO"},
        # django-q2 adds an unfiltered handler of its own if it is imported before
        # logging is set up; named here, it writes through the root's. Its three lines
        # per task are dropped unless ONEFOLD_Q_TASK_LINES is set (QuietTaskLines).
        "django-q": {
            "propagate": True,
            "filters": [] if env_bool("ONEFOLD_Q_TASK_LINES", False) else ["quiet_task_lines"],
        },
        "httpx": {"level": "WARNING"},
        "mail.log": {"level": "WARNING"},
    },
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "EXCEPTION_HANDLER": "idempotency_core.intake.api.errors.exception_handler",
    # How many proxies in front append to X-Forwarded-For (DRF's rule for a client's
    # address, which the hooks' per-address limit reads too). 0: REMOTE_ADDR alone,
    # since a client can write any X-Forwarded-For it likes. DRF's own default (None)
    # would believe that header from anyone.
    "NUM_PROXIES": env_int("ONEFOLD_TRUSTED_PROXIES", 0, minimum=0),
}

SPECTACULAR_SETTINGS = {
    # The case status appears in the staff API's list and detail: one enum name for it.
    "ENUM_NAME_OVERRIDES": {"CaseStatusEnum": "idempotency_core.models.CaseStatus"},
    "TITLE": "Onefold API",
    "DESCRIPTION": "Exactly one business effect per form submission, or a review case.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI from drf-spectacular-sidecar's files, served by WhiteNoise: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Destinations -----------------------------------------------------------

DESTINATION_URL = env_str("DESTINATION_URL", "http://127.0.0.1:8765")
EMAIL_HOST = env_str("EMAIL_HOST", "127.0.0.1")
EMAIL_PORT = env_int("EMAIL_PORT", 8025, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "enquiries@onefold.invalid")
# The adapters of the default destinations "crm" and "email" (a source may name
# its own destinations): sandbox | hubspot | salesforce | pipedrive | dataverse,
# and smtp | resend. Each vendor reads its own variables (docs/destinations.md).
ONEFOLD_CRM = env_str("ONEFOLD_CRM", "sandbox").strip().lower()
ONEFOLD_EMAIL = env_str("ONEFOLD_EMAIL", "smtp").strip().lower()
if ONEFOLD_CRM not in ("sandbox", "hubspot", "salesforce", "pipedrive", "dataverse"):
    raise ImproperlyConfigured(
        "ONEFOLD_CRM must be one of sandbox, hubspot, salesforce, pipedrive, dataverse"
    )
if ONEFOLD_EMAIL not in ("smtp", "resend"):
    raise ImproperlyConfigured("ONEFOLD_EMAIL must be smtp or resend")
# A worker checks a destination's declared capabilities before its first use,
# then again once this many seconds have passed since the last check.
ONEFOLD_VERIFY_TTL_SECONDS = env_float("ONEFOLD_VERIFY_TTL_SECONDS", 300, minimum=0)
# A refused destination is paused this long, then verified again (its work waits, no case).
ONEFOLD_VERIFY_RETRY_SECONDS = env_float("ONEFOLD_VERIFY_RETRY_SECONDS", 60, minimum=1)
# A request waits for its turn in the destination's budget up to this long; a later turn
# ends the attempt as "waited" and the operation is asked again then.
ONEFOLD_BUDGET_MAX_WAIT_SECONDS = env_float("ONEFOLD_BUDGET_MAX_WAIT_SECONDS", 5, minimum=0)
# Waits that long are not counted as attempts, but some bound is kept all the same.
ONEFOLD_MAX_WAIT_SECONDS = env_float("ONEFOLD_MAX_WAIT_SECONDS", 36 * 3600, minimum=1)

# --- Onefold ----------------------------------------------------------------

# Largest accepted submission body; larger ones are answered 413.
ONEFOLD_MAX_BODY_BYTES = env_int("ONEFOLD_MAX_BODY_BYTES", 64 * 1024, minimum=1024)
# How long a claimed operation may run before the sweeper calls it interrupted.
ONEFOLD_LEASE_SECONDS = env_float("ONEFOLD_LEASE_SECONDS", 120, minimum=1)
# Timeout of one destination call (connect + response). Must stay below the
# lease, or a slow call could outlive its claim.
ONEFOLD_HTTP_TIMEOUT_SECONDS = env_float("ONEFOLD_HTTP_TIMEOUT_SECONDS", 15, minimum=0.1)
# Retry policy: bounded exponential backoff with full jitter.
ONEFOLD_RETRY_BASE_SECONDS = env_float("ONEFOLD_RETRY_BASE_SECONDS", 5, minimum=0)
ONEFOLD_RETRY_MAX_SECONDS = env_float("ONEFOLD_RETRY_MAX_SECONDS", 900, minimum=0)
ONEFOLD_MAX_ATTEMPTS = env_int("ONEFOLD_MAX_ATTEMPTS", 6, minimum=1)
# Interval of `manage.py sweep --loop`; the django-q2 schedule is a 1-minute backstop.
ONEFOLD_SWEEP_SECONDS = env_float("ONEFOLD_SWEEP_SECONDS", 10, minimum=0.1)
# An operation not finished this long after its event arrived is "stuck".
ONEFOLD_STUCK_AFTER_SECONDS = env_int("ONEFOLD_STUCK_AFTER_SECONDS", 3600, minimum=1)
# Who receives a case (the configuration's `review` block, review/notifications.py):
# the console's address in the notifications' links, the length of a "minute" in the
# block's digest and escalation times (tests shorten it), and whether a webhook may
# reach a loopback or private address (tests only: a Settings admin must not reach the
# internal network through it).
ONEFOLD_CONSOLE_URL = env_str("ONEFOLD_CONSOLE_URL", "http://127.0.0.1:8000").rstrip("/")
ONEFOLD_REVIEW_MINUTE_SECONDS = env_float("ONEFOLD_REVIEW_MINUTE_SECONDS", 60, minimum=0.1)
ONEFOLD_WEBHOOK_ALLOW_PRIVATE = env_bool("ONEFOLD_WEBHOOK_ALLOW_PRIVATE", False)
# Same contact (contact digest), same form, same message once case and whitespace
# are set aside, new key, within this many seconds (default 600: ten minutes, a
# double click or a resubmission after a slow page, not a customer writing again
# days later): a suspected duplicate. A source's `duplicates` policy says what
# follows: `flag` writes both and opens a case that offers a merge; `hold` keeps
# the later one unwritten until a reviewer decides (intake/duplicate_hold.py).
ONEFOLD_DUPLICATE_WINDOW_SECONDS = env_int("ONEFOLD_DUPLICATE_WINDOW_SECONDS", 600, minimum=0)
# Confirmations allowed in any 24 hours to one address (normalised: case aside) and
# from one source (execution/confirmations.py). Beyond either, a confirmation is held
# for a person, not sent: a form that writes back to any address is a spam relay.
ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY = env_int(
    "ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY", 3, minimum=1
)
ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY = env_int(
    "ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY", 500, minimum=1
)
# The html profile's CAPTCHA check (intake/senders/captcha.py): every provider's
# siteverify call is sent here instead when set (a stand-in for tests and drills;
# empty: the provider's own documented URL), and waits this long for an answer.
ONEFOLD_CAPTCHA_VERIFY_URL = env_str("ONEFOLD_CAPTCHA_VERIFY_URL", "")
ONEFOLD_CAPTCHA_TIMEOUT_SECONDS = env_float("ONEFOLD_CAPTCHA_TIMEOUT_SECONDS", 5, minimum=0.1)
# When the verifier does not answer: "closed" refuses the submission (nothing kept; the
# visitor sends it again), "open" takes it and holds its confirmation for a person.
ONEFOLD_CAPTCHA_FAILURE = env_str("ONEFOLD_CAPTCHA_FAILURE", "closed").strip().lower()
if ONEFOLD_CAPTCHA_FAILURE not in ("open", "closed"):
    raise ImproperlyConfigured(
        f"ONEFOLD_CAPTCHA_FAILURE must be open or closed, not {ONEFOLD_CAPTCHA_FAILURE!r}"
    )
# The domains (and their subdomains) a confirmation's Reply-To may be in; empty: any.
# A Reply-To anywhere would let a configuration send customers' answers elsewhere.
ONEFOLD_REPLY_TO_DOMAINS = [
    domain.lower().strip(".") for domain in env_list("ONEFOLD_REPLY_TO_DOMAINS", []) if domain
]
# Default requests per minute per source (each source may override).
ONEFOLD_DEFAULT_RATE_PER_MINUTE = env_int("ONEFOLD_DEFAULT_RATE_PER_MINUTE", 6000, minimum=1)
# Hook posts per client address per minute, counted before anything is verified (429
# beyond): a flood of wrong credentials, or of posts to a public `html` hook, from one
# address is turned away before it costs a query. The address is REMOTE_ADDR, or with
# ONEFOLD_TRUSTED_PROXIES the one the nearest trusted proxy saw (IPv6 by /64).
ONEFOLD_HOOK_RATE_PER_ADDRESS_PER_MINUTE = env_int(
    "ONEFOLD_HOOK_RATE_PER_ADDRESS_PER_MINUTE", 600, minimum=1
)
# Retention (docs/operations.md, "Retention"). Payloads (contact details, message) are nulled
# this many days after the event arrived, once no operation is still in flight;
# key and fingerprint stay.
ONEFOLD_PAYLOAD_RETENTION_DAYS = env_int("ONEFOLD_PAYLOAD_RETENTION_DAYS", 30, minimum=1)
# After this many days a key has expired (event rows themselves are kept): a
# delivery for it is still answered from the stored event and never processed
# again, but first the destination is looked up by the operation key, and a
# record found there opens a late-replay review case.
ONEFOLD_KEY_RETENTION_DAYS = env_int("ONEFOLD_KEY_RETENTION_DAYS", 400, minimum=1)
if ONEFOLD_PAYLOAD_RETENTION_DAYS > ONEFOLD_KEY_RETENTION_DAYS:
    raise ImproperlyConfigured(
        "ONEFOLD_PAYLOAD_RETENTION_DAYS must not exceed ONEFOLD_KEY_RETENTION_DAYS"
    )
# Reconciliation: records per page of the destination listing (the sandbox
# allows 5000) and how long a run may go silent before another process may
# resume it.
ONEFOLD_RECONCILE_PAGE_SIZE = env_int("ONEFOLD_RECONCILE_PAGE_SIZE", 5000, minimum=1)
ONEFOLD_RECONCILE_LEASE_SECONDS = env_float("ONEFOLD_RECONCILE_LEASE_SECONDS", 120, minimum=1)

# --- Operations (docs/operations.md) ----------------------------------------


def _networks(name: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for item in env_list(name, []):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not an address or a network (10.0.0.0/8, ::1)"
            ) from None
    return networks


# /metrics: with a token set, only `Authorization: Bearer <token>` is served (401
# otherwise); with networks set, only clients whose address (REMOTE_ADDR, the
# proxy's when there is one) is in one of them (403 otherwise). Both set, both must
# hold. Neither: anyone (system check onefold.W002 warns beyond loopback).
ONEFOLD_METRICS_TOKEN = env_str("ONEFOLD_METRICS_TOKEN", "")
ONEFOLD_METRICS_ALLOW_IPS = _networks("ONEFOLD_METRICS_ALLOW_IPS")
# The span of the figures counted from the database on /metrics (submissions,
# attempts): the last this many seconds.
ONEFOLD_METRICS_WINDOW_SECONDS = env_int("ONEFOLD_METRICS_WINDOW_SECONDS", 300, minimum=1)
# /readyz answers 503 when the database or the task queue has not answered by then.
ONEFOLD_READY_TIMEOUT_SECONDS = env_float("ONEFOLD_READY_TIMEOUT_SECONDS", 2, minimum=0.1)

# --- django-q2 (docs/task-queue.md) ----------------------------------------

_Q_WORKERS = env_int("ONEFOLD_Q_WORKERS", 2, minimum=1)
_Q_TIMEOUT = env_int("ONEFOLD_Q_TIMEOUT", int(ONEFOLD_HTTP_TIMEOUT_SECONDS * 2) + 10, minimum=1)
# A prefetched task waits in the cluster's queue behind up to queue_limit+1
# others; `retry` must outlast that wait or the broker hands it out twice.
_Q_RETRY_FLOOR = _Q_TIMEOUT * (1 + math.ceil((_Q_WORKERS + 1) / _Q_WORKERS)) + 5


class QClusterOptions(TypedDict, total=False):
    """The django-q2 options Onefold sets, typed for the system checks that read them."""

    name: str
    orm: str
    workers: int
    timeout: int
    retry: int
    queue_limit: int
    bulk: int
    max_attempts: int
    ack_failures: bool
    catch_up: bool
    save_limit: int
    poll: float
    recycle: int
    guard_cycle: float
    label: str
    broker_class: str
    ALT_CLUSTERS: dict[str, QClusterOptions]


Q_CLUSTER: QClusterOptions = {
    "name": env_str("ONEFOLD_Q_NAME", "onefold"),
    "orm": "default",
    "workers": _Q_WORKERS,
    "timeout": _Q_TIMEOUT,
    "retry": env_int("ONEFOLD_Q_RETRY", _Q_RETRY_FLOOR, minimum=1),
    "queue_limit": _Q_WORKERS,
    "bulk": 1,
    # Onefold owns retries (attempts are counted on the operation); this is
    # only a backstop against a task that crashes its worker forever.
    "max_attempts": 3,
    "ack_failures": True,
    "catch_up": False,
    # Successful results are not saved (-1): Onefold's attempts record every outcome
    # and nothing reads django-q2's Task/Success rows (no hook, no chain, no
    # result() call). Saving them made the monitor decode up to this many pickled rows
    # for every task. A failed task (a crash) is still
    # saved, whatever the limit: the admin's "Failed tasks" keeps it.
    "save_limit": env_int("ONEFOLD_Q_SAVE_LIMIT", -1, minimum=-1),
    # Seconds the pusher sleeps when the queue is empty (it never sleeps while tasks
    # wait, and a submission's later steps run in its first task). Shorter answers an idle
    # queue sooner and costs more empty dequeues (docs/benchmarks.md, `--poll`).
    "poll": env_float("ONEFOLD_Q_POLL", 0.05, minimum=0.01),
    # Tasks a worker runs before django-q2 replaces it. A replacement is missing until
    # the sentinel's next guard cycle and its own start (the destinations' verification),
    # and the tasks behind it wait: django-q2's 500 put that wait in the latency's tail
    # under a steady rate (docs/operations.md, Workers).
    "recycle": env_int("ONEFOLD_Q_RECYCLE", 5000, minimum=1),
    # Seconds between the sentinel's checks of its workers (django-q2's default 0.5):
    # how long a recycled worker goes unreplaced.
    "guard_cycle": env_float("ONEFOLD_Q_GUARD_CYCLE", 0.2, minimum=0.05),
    "label": "Task queue",
    # django-q2's ORM broker, its dequeue one statement with SKIP LOCKED on PostgreSQL
    # (idempotency_core/broker.py): clusters never race for the same row.
    "broker_class": "idempotency_core.broker.SkipLockedORM",
    # Clusters started with Q_CLUSTER_NAME=<queue> serve that queue instead (the
    # drill's workers); they share the name above, which signs every task, and
    # leave the shared schedules to the main cluster.
    "ALT_CLUSTERS": {},
}
