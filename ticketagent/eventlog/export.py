"""Exports that are safe to open in a spreadsheet and still replay exactly.

A string a spreadsheet would take for a formula (leading =, +, -, @, tab or
CR) is exported behind a leading apostrophe. So that this is reversible, a
string that already starts with an apostrophe gets one more. `unescape()`
undoes it, so `manage.py replay --from events.jsonl` sees the original data.
"""

import datetime as dt

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def export_safe(value):
    if isinstance(value, str):
        return "'" + value if value.startswith(_FORMULA_START) else value
    if isinstance(value, dict):
        return {k: export_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [export_safe(v) for v in value]
    return value


def unescape(value):
    if isinstance(value, str):
        return value[1:] if value.startswith("'") else value
    if isinstance(value, dict):
        return {k: unescape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unescape(v) for v in value]
    return value


def iso_utc(value: dt.datetime) -> str:
    """ISO 8601 in UTC with a Z: how exports and logs write time."""
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def event_line(event) -> dict:
    return {"timestamp": iso_utc(event.timestamp), "type": event.type, "payload": export_safe(event.payload),
            "item": event.item_id, "actor": export_safe(event.actor)}


def transition_line(line: dict) -> dict:
    """An effect's transition (`merged.task_transitions`) as an export line."""
    return {"timestamp": iso_utc(line["timestamp"]), "type": line["type"], "payload": export_safe(line["payload"]),
            "item": line["item"], "actor": export_safe(line["actor"])}
