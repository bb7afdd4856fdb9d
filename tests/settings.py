"""Settings for the test suite: the real settings with test-friendly defaults.

Worker processes started by tests use this module too (DJANGO_SETTINGS_MODULE).
"""

import json
import os

os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("RQ_QUEUE", "ticketagent-test")
# Under pytest-xdist (`make test` runs two processes), each process has a Redis database of its own (the
# given one, the one below it, ...) and a queue of its own; the worker processes a test starts inherit both.
# (Each process also has a test database of its own: pytest-django names it after the process.)
_XDIST = os.environ.get("PYTEST_XDIST_WORKER", "")
if _XDIST.startswith("gw") and _XDIST[2:].isdigit() and "TICKETAGENT_XDIST_SET" not in os.environ:
    _base, _, _db = os.environ["REDIS_URL"].rpartition("/")
    if _db.isdigit():
        os.environ["REDIS_URL"] = f"{_base}/{int(_db) - int(_XDIST[2:])}"
    os.environ["RQ_QUEUE"] = f"{os.environ['RQ_QUEUE']}-{_XDIST}"
    os.environ["TICKETAGENT_XDIST_SET"] = "1"
# A worker calls out only while its lease covers the whole call (the
# channel's timeouts + LEASE_MARGIN_SECONDS): short timeouts, so a short lease
# (and a short REQUEUE_GRACE_SECONDS, half of it: a job missing from Redis is sent again after 2 s).
os.environ.setdefault("LEASE_SECONDS", "4")
os.environ.setdefault("HELPDESK_UPSTREAM_TIMEOUT", "0")
os.environ.setdefault("RECOVER_INTERVAL_SECONDS", "0.5")
os.environ.setdefault("HELPDESK_READ_TIMEOUT", "1.5")
os.environ.setdefault("HELPDESK_CONNECT_TIMEOUT", "0.5")
os.environ.setdefault("EMAIL_TIMEOUT", "1")
os.environ.setdefault("OPENAI_API_KEY", "")

from ticketagent.settings import *  # noqa: E402,F403

# No helpdesk unless a test starts one (the `sandbox` fixture) or names one: the product's default address is where
# `make run`'s sandbox listens, and a task created while one does would be bound to that helpdesk (and its items
# sent to that helpdesk's queue). Port 9 (discard) answers nothing. The environment is left as it is: a `make run`
# a test starts serves its own sandbox.
HELPDESK_URL = os.environ.get("HELPDESK_URL") or "http://127.0.0.1:9"

# Constants of the product (docs/configuration.md: not read from the environment), as the suite wants them:
HEALTH_CACHE_SECONDS = 0.0  # tests compare the numbers with the database at once
HELPDESK_CHECK_BEFORE_TASKS = False  # most tests create tasks without a helpdesk; the check has tests of its own
# ... and as one test wants them in the processes it starts: TEST_SETTINGS='{"CHANNEL_WAIT_SECONDS": 4}'
# (tests.conftest.child_settings() writes it).
for _name, _value in json.loads(os.environ.get("TEST_SETTINGS") or "{}").items():
    globals()[_name] = _value

INSTALLED_APPS = [*INSTALLED_APPS, "ops"]  # noqa: F405  (the kill test's and the bench's commands are tested)

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Pages are rendered without collectstatic: plain static names, found in the
# source folders. The production storage (hashed names from collectstatic's
# manifest) is exercised by tests/deploy/, which runs collectstatic.
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}  # noqa: F405
WHITENOISE_USE_FINDERS = True
