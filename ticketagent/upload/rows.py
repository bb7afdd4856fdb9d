"""The upload's vocabulary: columns, limits, rows, errors, and the text and JSON helpers both formats share.

Pure Python, no Django. :class:`ErrorCollector` gathers the
:class:`RowError` s of one upload; :class:`StopParsing` ends a parse whose
error has already been recorded.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field

REQUIRED_COLUMNS = ("ticket_id", "customer_email", "subject", "body")
OPTIONAL_COLUMNS = ("customer_name", "priority", "language", "metadata")
# what a rehearsal compares its decisions with (docs/upload-format.md, "Expected labels")
EXPECTED_COLUMNS = ("expected_category", "expected_priority", "expected_actions", "expected_status")
ALL_COLUMNS = REQUIRED_COLUMNS + OPTIONAL_COLUMNS + EXPECTED_COLUMNS
PRIORITIES = ("low", "normal", "high", "urgent")
FIELD_LIMITS = {
    "ticket_id": 64,
    "customer_email": 254,
    "customer_name": 200,
    "subject": 300,
    "body": 20000,
    "language": 16,
}
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_ROWS = 50_000
# The longest file name most file systems allow, and the length a task stores.
MAX_FILENAME_CHARS = 255


def human_size(n: int) -> str:
    """A byte count the way every message shows it (binary units: 1 MB = 1,048,576 bytes)."""
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MB"
    if n >= 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n} bytes"


def long_filename_message(length: int) -> str:
    return (f"file name is {length:,} characters long; the limit is {MAX_FILENAME_CHARS} - rename the file "
            "and upload it again")


# --------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RowError:
    """One problem found in the upload.

    ``row`` is the 1-based row as a person counts it (CSV: the header is row
    1, so the first data row is row 2; JSONL: the line number), or ``None``
    for file-level errors. ``column`` is the column/field name, or ``None``
    when the error concerns the whole row or file.
    """

    row: int | None
    column: str | None
    message: str

    def __str__(self) -> str:
        if self.row is None:
            where = "file" if self.column is None else f"column {self.column}"
        elif self.column is None:
            where = f"row {self.row}"
        else:
            where = f"row {self.row}, column {self.column}"
        return f"{where}: {self.message}"


@dataclass(frozen=True, slots=True)  # slots: 50,000 of them in one upload
class TicketRow:
    row: int
    ticket_id: str
    customer_email: str
    subject: str
    body: str
    customer_name: str = ""
    priority: str = "normal"
    language: str = ""
    metadata: dict = field(default_factory=dict)
    expected: dict = field(default_factory=dict)  # {"category", "priority", "actions"} given by the file


@dataclass
class ParseResult:
    rows: list[TicketRow]
    errors: list[RowError]
    format: str  # "csv" or "jsonl" ("" only if the file type is not supported)

    @property
    def ok(self) -> bool:
        return not self.errors and bool(self.rows)


# --------------------------------------------------------------------------
# Collecting errors
# --------------------------------------------------------------------------


class StopParsing(Exception):
    """Abort parsing (the error has already been recorded)."""


class ErrorCollector:
    """Collects errors; keeps the first ``limit`` and counts the rest."""

    def __init__(self, limit: int):
        self.limit = max(1, limit)
        self.items: list[RowError] = []
        self.total = 0

    def add(self, row: int | None, column: str | None, message: str) -> None:
        self.total += 1
        if len(self.items) < self.limit:
            self.items.append(RowError(row, column, message))

    def __bool__(self) -> bool:
        return self.total > 0

    def result(self, file_errors: list[RowError]) -> list[RowError]:
        items = list(file_errors) + self.items
        total = len(file_errors) + self.total
        if total > self.limit:
            items = items[: self.limit]
            more = total - self.limit
            items.append(
                RowError(None, None, f"… and {more} more error{'s' if more != 1 else ''}")
            )
        return items


def too_many_rows_error(data_rows: int, max_rows: int) -> RowError:
    return RowError(
        None,
        None,
        f"file has {plural(data_rows, 'data row')}; the limit is {max_rows:,} "
        "- split it into smaller batches",
    )


# --------------------------------------------------------------------------
# Text for error messages
# --------------------------------------------------------------------------


def show_value(value: str, limit: int = 60) -> str:
    """Quote a user value for an error message, shortened if long."""
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return repr(value)


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def suggest_column(name: str) -> str:
    match = difflib.get_close_matches(name, ALL_COLUMNS, n=1, cutoff=0.7)
    return f" (did you mean {match[0]!r}?)" if match else ""


# --------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------


def json_type_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _reject_constant(name: str):
    # json accepts NaN/Infinity by default; they are not JSON and break
    # databases downstream.
    raise ValueError(f"{name} is not allowed in JSON")


def _pairs_hook(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {show_value(key)}")
        obj[key] = value
    return obj


def strict_json_loads(text: str):
    """json.loads that rejects NaN/Infinity and duplicate keys.

    Raises ValueError (incl. JSONDecodeError) or RecursionError.
    """
    return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_pairs_hook)


def json_error_message(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (character {exc.pos + 1})"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)
