"""Template filters for the pages: look-ups in dicts, step names, words from identifiers, durations, times, amounts."""

import datetime as dt
import math
import re

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html

from ticketagent.eventlog.export import iso_utc
from ticketagent.failures import failure_label as _failure_label
from ticketagent.llm.prices import dollars
from ticketagent.plan import step_name as _step_name
from ticketagent.playbooks import reading
from ticketagent.services.budget import budget_reserved_label, budget_spent, task_reason
from ticketagent.words import event_words, state_words

register = template.Library()


@register.filter
def get_item(mapping, key):
    """A list from a dict of lists (effects by item); [] when missing."""
    return (mapping or {}).get(key, [])


@register.filter
def failure_label(kind):
    """Why an item failed, in people's words ("refused by the helpdesk")."""
    return _failure_label(kind or "")


@register.filter
def step_name(cursor):
    """The step a checkpoint cursor points at."""
    return _step_name(cursor)


@register.filter
def duration(seconds):
    """A short human duration: 45 s, 3 min 20 s, 2 h 5 min."""
    try:
        seconds = int(float(seconds))
    except (TypeError, ValueError):
        return ""
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@register.filter
def eta_range(value):
    """(soonest, latest) seconds -> "20 s – 35 s", rounded outwards (5 s, a minute, 10 minutes: no false
    precision), one figure when both read the same, "under 35 s" from zero; "—" when unknown."""
    if not value:
        return "—"

    def rounded(seconds, up):
        step = 5 if seconds < 60 else 60 if seconds < 3600 else 600
        return (math.ceil if up else math.floor)(seconds / step) * step

    low, high = rounded(value[0], False), rounded(value[1], True)
    if low == 0:
        return f"under {duration(high)}"
    return duration(low) if low == high else f"{duration(low)} – {duration(high)}"


@register.filter
def state(value):
    """A task's, item's or effect's state in people's words ("waiting_approval" -> "waiting for approval"): the
    one mapping, `ticketagent.words`."""
    return state_words(value)


@register.filter
def event(value):
    """An event type in people's words ("ITEM_WAITING" -> "waiting for a person"): `ticketagent.words`."""
    return event_words(value)


# a playbook read as a person reads it: `ticketagent.playbooks.reading`
register.filter("rule_conditions", reading.rule_conditions)
register.filter("rule_outputs", reading.rule_outputs)
register.filter("fact_source", reading.fact_source)
register.filter("fact_type", reading.fact_type)


@register.filter
def words(value):
    """needs_confirmation -> needs confirmation."""
    return str(value).replace("_", " ")


@register.filter
def when(value):
    """The one way a time is written: local time with its zone, the full
    timestamp (and its UTC form) on hover, ISO 8601 UTC for machines."""
    if not value:
        return "—"
    local = timezone.localtime(value)
    utc = value.astimezone(dt.UTC)
    shown = date_format(local, "Y-m-d H:i:s T")
    full = f"{date_format(local, 'l j F Y, H:i:s.u T')} (UTC{date_format(local, 'O')}) = {iso_utc(utc)}"
    return format_html('<time datetime="{}" title="{}">{}</time>', iso_utc(utc), full, shown)


_LEASE_TOKEN = re.compile(r"^[0-9a-f]{32}$")


@register.filter
def who(actor):
    """An event's actor as a person reads it: a worker's lease token (the ledger's actor) becomes "worker"."""
    return "worker" if _LEASE_TOKEN.match(actor or "") else actor


@register.filter
def usd(amount):
    """An amount of USD as the pages write it ("—" when unknown): `llm.prices.dollars`."""
    return dollars(amount)


@register.filter
def thousands(number):
    """1234567 -> 1,234,567."""
    try:
        return f"{int(number):,}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def spent_of_budget(task):
    """What a task with a budget spent of it: "$4.98 of $5.00", "1,530 of 1,500 tokens"."""
    return budget_spent(task) if task.has_budget else ""


@register.filter
def reserved_of_budget(task):
    """What the model calls in flight of a task with a budget hold of it ("$0.02"; "" for none): one query."""
    return budget_reserved_label(task) if task.has_budget else ""


@register.filter
def reason(task):
    """Why the task stands as it does; a budget's suspension with what it spent now, as the page says beside it."""
    return task_reason(task)
