"""`make run`'s local operator: the `admin` superuser, created once, its password generated and kept, or taken from
DJANGO_SUPERUSER_PASSWORD (scripts/run.py)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

from ops.processes import describe_exit, say

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


ADMIN_CODE = r"""
import json, os
import django
django.setup()
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

password = os.environ["TA_ADMIN_PASSWORD"]
enforce = os.environ.get("TA_ADMIN_ENFORCE") == "1"
with transaction.atomic():
    operators, _ = Group.objects.get_or_create(name="operators")
    Group.objects.get_or_create(name="viewers")
    User = get_user_model()
    user = User.objects.filter(username="admin").first()
    if user is None:
        user = User.objects.create_superuser("admin", "admin@example.com", password)
        state = "created"
    elif user.check_password(password):
        state = "ok"
    elif enforce:
        user.set_password(password)
        user.save(update_fields=["password"])
        state = "reset"
    else:
        state = "mismatch"
    user.groups.add(operators)
print("@@admin@@" + json.dumps({"state": state}))
"""


def ensure_admin(env: dict, var: Path) -> str:
    """Create the ``admin`` superuser once; returns the text for the login line."""
    say("== admin user")
    pwfile = var / "admin-password.txt"
    from_env = os.environ.get("DJANGO_SUPERUSER_PASSWORD", "")
    stored = ""
    with contextlib.suppress(OSError):
        stored = pwfile.read_text().strip()
    if from_env:
        password, source, enforce = from_env, "DJANGO_SUPERUSER_PASSWORD", True
    elif stored:
        password, source, enforce = stored, str(pwfile), False
    else:
        password, source, enforce = secrets.token_urlsafe(12), "generated", False

    result = subprocess.run(
        [PY, "-c", ADMIN_CODE],
        cwd=str(ROOT),
        env={**env, "TA_ADMIN_PASSWORD": password, "TA_ADMIN_ENFORCE": "1" if enforce else "0"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    state = None
    for line in result.stdout.splitlines():
        if line.startswith("@@admin@@"):
            state = json.loads(line[len("@@admin@@"):])["state"]
    if result.returncode != 0 or state is None:
        raise SystemExit(f"could not create the admin user ({describe_exit(result.returncode)})")

    if state == "created" and source == "generated":
        var.mkdir(parents=True, exist_ok=True)
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(password + "\n")
        os.chmod(pwfile, 0o600)
        say(f"created superuser admin (operators group); its password is kept in {pwfile}")
    elif state == "created":
        say(f"created superuser admin (operators group) with the password from {source}")
    elif state == "reset":
        say("admin's password was reset to DJANGO_SUPERUSER_PASSWORD")
    if state == "mismatch":
        hint = f"{pwfile} is out of date; " if source != "generated" else ""
        return (f"admin / (unknown: {hint}set DJANGO_SUPERUSER_PASSWORD or run "
                f".venv/bin/python manage.py changepassword admin)")
    return f"admin / {password}"
