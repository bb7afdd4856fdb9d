"""Strict readers for settings taken from the environment.

Anything that is not clearly valid raises ImproperlyConfigured naming the
variable, so a typo in a deployment stops start-up instead of silently
falling back to a default.
"""

import json
import os
from decimal import Decimal

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def envstr(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envchoice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={raw!r} is not one of: {', '.join(choices)}")
    return value


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use true or false")


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    return _envnumber(name, default, minimum, int, "an integer")


def envfloat(name: str, default: float, *, minimum: float | None = None) -> float:
    return _envnumber(name, default, minimum, float, "a number")


def _envnumber(name, default, minimum, kind, word):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not {word}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum of {minimum}")
    return value


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [part.strip() for part in raw.split(",") if part.strip()]


def envint_or_none(name: str, default: int | None, *, minimum: int | None = None) -> int | None:
    """An integer, or None for `none` (the setting is off)."""
    raw = os.environ.get(name)
    if raw is not None and raw.strip().lower() == "none":
        return None
    if raw is None or raw.strip() == "":
        return default
    return envint(name, 0, minimum=minimum)


def envmap(name: str, default: dict[str, str], *, keys: tuple[str, ...]) -> dict[str, str]:
    """`a=x,b=y` over `default`: each named key must be one of `keys`, each value non-empty."""
    result = dict(default)
    raw = os.environ.get(name, "")
    for part in filter(None, (p.strip() for p in raw.split(","))):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not value:
            raise ImproperlyConfigured(f"{name}: {part!r} is not KEY=VALUE")
        if key not in keys:
            raise ImproperlyConfigured(f"{name}: {key!r} is not one of: {', '.join(keys)}")
        result[key] = value
    return result


PRICE_KEYS = ("input", "cached_input", "output")


def envprices(name: str) -> dict[str, dict[str, Decimal]]:
    """A JSON object of model name -> USD per 1M tokens, e.g. `{"my-model": {"input": 0.5, "cached_input": 0.25,
    "output": 1.5}}` (`cached_input` may be left out: cached tokens then cost as `input`). Numbers are read as
    decimals, exactly as written; anything else -- not JSON, a missing or unknown key, a negative or non-numeric
    price -- raises naming the variable and the model."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return {}
    try:
        table = json.loads(raw, parse_float=Decimal, parse_int=Decimal)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not JSON: {exc}") from None
    if not isinstance(table, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object of model name -> prices")
    prices = {}
    for model, price in table.items():
        where = f"{name}[{model!r}]"
        if not model.strip() or not isinstance(price, dict):
            raise ImproperlyConfigured(f"{where}: give {{\"input\": USD, \"output\": USD}} per 1M tokens")
        unknown = sorted(set(price) - set(PRICE_KEYS))
        if unknown:
            raise ImproperlyConfigured(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(PRICE_KEYS)})")
        for key in ("input", "output"):
            if key not in price:
                raise ImproperlyConfigured(f"{where}: {key!r} is missing (USD per 1M tokens)")
        for key, value in price.items():
            if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
                raise ImproperlyConfigured(f"{where}: {key}={value!r} is not a price (a number, 0 or more)")
        prices[model.strip().lower()] = {key: price.get(key, price["input"]) for key in PRICE_KEYS}
    return prices


def secret_key_weakness(key: str, *, development_key: str) -> str:
    """Why `key` is too weak for production (empty string: it is not).

    The rules are Django's own (`check --deploy`, security.W009): at least 50
    characters, at least 5 different ones, not a generated "django-insecure-" key.
    """
    if key == development_key:
        return "it is the built-in development key"
    if key.startswith("django-insecure-"):
        return "it starts with 'django-insecure-' (a key Django generated for development)"
    if len(key) < 50:
        return f"it is {len(key)} characters long (at least 50 are needed)"
    if len(set(key)) < 5:
        return f"it uses only {len(set(key))} different characters (at least 5 are needed)"
    return ""


def csp_policy(policy: str) -> dict:
    """A Content-Security-Policy header (``directive value ...; ...``) as django-csp's
    CONTENT_SECURITY_POLICY setting. A directive django-csp does not know stops start-up
    (it would be dropped silently)."""
    from csp.utils import DEFAULT_DIRECTIVES

    directives: dict[str, list[str] | bool] = {}
    for part in policy.split(";"):
        words = part.split()
        if not words:
            continue
        directive = words[0].lower()
        if directive not in DEFAULT_DIRECTIVES:
            raise ImproperlyConfigured(f"Content-Security-Policy: unknown directive {words[0]!r}")
        directives[directive] = words[1:] or True
    return {"DIRECTIVES": directives}
