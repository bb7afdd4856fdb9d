"""Validate one ticket row's values, whichever format it came from, into a TicketRow.

Both the CSV and the JSON Lines reader hand each data row to a
:class:`RowValidator`: it checks every column, reports each problem with its
row and column, and keeps the rows that have none. The only Django import is
``EmailValidator`` (which works without configured settings).
"""

from __future__ import annotations

import re

from django.core.validators import EmailValidator

from ticketagent.llm.schemas import ALLOWED_ACTIONS, HelpdeskStatus
from ticketagent.upload.rows import (
    ALL_COLUMNS,
    EXPECTED_COLUMNS,
    FIELD_LIMITS,
    PRIORITIES,
    REQUIRED_COLUMNS,
    ErrorCollector,
    TicketRow,
    json_error_message,
    json_type_name,
    show_value,
    strict_json_loads,
)

TICKET_ID_ALLOWED = "letters A-Z and a-z, digits 0-9 and . _ : / # -"
_TICKET_ID_RE = re.compile(r"[A-Za-z0-9._:/#-]+")

_email_validator = EmailValidator()
_ACTION_SPLIT = re.compile(r"[\s,;]+")
_CATEGORY_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
# what `expected_status` may say: a helpdesk status, or none (set_status does not run: closed, or no answer)
EXPECTED_STATUSES = (*HelpdeskStatus.__args__, "none")  # type: ignore[attr-defined]


def _bad_text(value: str) -> str | None:
    """Characters a database can't store: NUL and lone surrogates."""
    if "\x00" in value:
        return "contains a NUL byte (\\x00), which is not allowed"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an invalid Unicode character (a lone surrogate such as \\ud800)"
    return None


def _bad_json_value(value) -> str | None:
    """Check every string (keys included) inside a parsed JSON value."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            problem = _bad_text(item)
            if problem:
                return problem
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _normalise_newlines(value: str) -> str:
    if "\r" in value:
        value = value.replace("\r\n", "\n").replace("\r", "\n")
    return value


def _expected(clean: dict[str, str]) -> dict:
    """The expected labels a row gives (a rehearsal's agreement), by their short names."""
    out = {}
    for column in EXPECTED_COLUMNS:
        value = clean.get(column, "")
        if value:
            name = column.removeprefix("expected_")
            out[name] = sorted(set(_ACTION_SPLIT.split(value)) - {""}) if name == "actions" else value
    return out


def _ticket_row(row: int, clean: dict[str, str], metadata: dict) -> TicketRow:
    return TicketRow(
        expected=_expected(clean),
        row=row,
        ticket_id=clean["ticket_id"],
        customer_email=clean["customer_email"],
        subject=clean["subject"],
        body=clean["body"],
        customer_name=clean.get("customer_name", ""),
        priority=clean.get("priority", "normal"),
        language=clean.get("language", ""),
        metadata=metadata,
    )


class RowValidator:
    """Validates the rows of one upload; the good ones collect in ``rows``."""

    def __init__(self, errors: ErrorCollector):
        self.errors = errors
        self.seen_ids: dict[str, int] = {}
        self.email_ok: dict[str, bool] = {}
        self.rows: list[TicketRow] = []

    def validate(self, row: int, values: dict[str, str], metadata) -> None:
        """``values``: column -> raw string (missing columns absent).

        ``metadata``: ``None`` (absent), a ``str`` (CSV cell with JSON) or an
        already-parsed ``dict`` (JSONL).
        """
        before = self.errors.total
        clean: dict[str, str] = {}
        for column in ALL_COLUMNS:
            if column == "metadata":
                continue
            value = self._column(row, column, values.get(column, ""))
            if value is not None:
                clean[column] = value

        meta = self._metadata(row, metadata)

        if self.errors.total == before and meta is not None:
            self.rows.append(_ticket_row(row, clean, meta))

    def _column(self, row: int, column: str, raw: str) -> str | None:
        """The clean value of one column, or ``None`` after reporting its problem."""
        err = self.errors
        problem = _bad_text(raw)
        if problem:
            err.add(row, column, problem)
            return None
        value = raw.strip()
        if column in ("body", "subject"):
            value = _normalise_newlines(value)
        if not value and column in REQUIRED_COLUMNS:
            err.add(row, column, f"{column} is required but is empty")
            return None
        limit = FIELD_LIMITS.get(column)
        if limit is not None and len(value) > limit:
            err.add(
                row,
                column,
                f"{column} is {len(value):,} characters long; the limit is {limit:,}",
            )
            return None
        if column == "ticket_id":
            return self._ticket_id(row, value)
        if column == "customer_email":
            return self._email(row, value)
        if column in ("priority", "expected_priority"):
            return self._priority(row, value, column)
        if column == "expected_category" and value and not _CATEGORY_RE.fullmatch(value.lower()):
            self.errors.add(row, column, f"{show_value(value)} is not a category name (lower-case letters, "
                                         f"digits, - and _)")
            return None
        if column == "expected_status" and value and value.lower() not in EXPECTED_STATUSES:
            self.errors.add(row, column, f"{show_value(value)} is not a status; statuses are "
                                         f"{', '.join(EXPECTED_STATUSES)} (none: no status is set)")
            return None
        if column == "expected_actions":
            unknown = sorted(set(_ACTION_SPLIT.split(value)) - set(ALLOWED_ACTIONS) - {""})
            if unknown:
                self.errors.add(row, column, f"unknown action {show_value(unknown[0])}; actions are "
                                             f"{', '.join(ALLOWED_ACTIONS)}")
                return None
        return value.lower() if column in ("expected_category", "expected_status") else value

    def _ticket_id(self, row: int, value: str) -> str | None:
        if not _TICKET_ID_RE.fullmatch(value):
            self.errors.add(
                row,
                "ticket_id",
                f"ticket_id {show_value(value)} contains characters that are not allowed; "
                f"use only {TICKET_ID_ALLOWED}",
            )
            return None
        first = self.seen_ids.get(value)
        if first is not None:
            self.errors.add(
                row,
                "ticket_id",
                f"duplicate ticket_id {show_value(value)}; it is already used in row {first}",
            )
            return None
        self.seen_ids[value] = row
        return value

    def _email(self, row: int, value: str) -> str | None:
        if not self._email_valid(value):
            self.errors.add(row, "customer_email", f"{show_value(value)} is not a valid email address")
            return None
        return value

    def _email_valid(self, email: str) -> bool:
        cached = self.email_ok.get(email)
        if cached is None:
            try:
                _email_validator(email)
                cached = True
            except Exception:  # ValidationError, or anything odd: invalid
                cached = False
            self.email_ok[email] = cached
        return cached

    def _priority(self, row: int, value: str, column: str = "priority") -> str | None:
        if not value:
            return "normal" if column == "priority" else ""
        lowered = value.lower()
        if lowered not in PRIORITIES:
            self.errors.add(
                row,
                column,
                f"{column} {show_value(value)} is not one of: {', '.join(PRIORITIES)}",
            )
            return None
        return lowered

    def _metadata(self, row: int, metadata) -> dict | None:
        """The row's metadata as a dict, or ``None`` after reporting its problem."""
        if metadata is None:
            return {}
        if isinstance(metadata, str):
            metadata = self._metadata_from_text(row, metadata)
            if metadata is None:
                return None
        problem = _bad_json_value(metadata)
        if problem:
            self.errors.add(row, "metadata", f"metadata {problem}")
            return None
        return metadata

    def _metadata_from_text(self, row: int, metadata: str) -> dict | None:
        """A CSV metadata cell parsed as a JSON object (``{}`` when blank)."""
        err = self.errors
        problem = _bad_text(metadata)
        if problem:
            err.add(row, "metadata", problem)
            return None
        text = metadata.strip()
        if not text:
            return {}
        try:
            parsed = strict_json_loads(text)
        except (ValueError, RecursionError) as exc:
            err.add(
                row,
                "metadata",
                f"metadata is not valid JSON: {json_error_message(exc)}; "
                'expected a JSON object such as {"plan": "pro"}',
            )
            return None
        if not isinstance(parsed, dict):
            err.add(
                row,
                "metadata",
                f"metadata must be a JSON object such as {{\"plan\": \"pro\"}}, "
                f"not {json_type_name(parsed)}",
            )
            return None
        return parsed
