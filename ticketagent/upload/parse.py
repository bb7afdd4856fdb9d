"""Parse an uploaded batch of support tickets (CSV or JSON Lines).

Pure Python: no Django models, no settings. The only Django import is
``EmailValidator`` (which works without configured settings).

Entry point: :func:`parse_batch`. It never raises for any ``bytes`` input;
every problem is reported as a :class:`RowError`. If there is any error, the
result carries no rows at all (nothing partial gets imported).

The format is documented in ``docs/upload-format.md``.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import re
import threading
from dataclasses import dataclass, field

from django.core.validators import EmailValidator

__all__ = [
    "REQUIRED_COLUMNS",
    "OPTIONAL_COLUMNS",
    "ALL_COLUMNS",
    "PRIORITIES",
    "FIELD_LIMITS",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "RowError",
    "TicketRow",
    "ParseResult",
    "parse_batch",
]

REQUIRED_COLUMNS = ("ticket_id", "customer_email", "subject", "body")
OPTIONAL_COLUMNS = ("customer_name", "priority", "language", "metadata")
ALL_COLUMNS = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
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

CSV_EXTENSIONS = (".csv",)
JSONL_EXTENSIONS = (".jsonl", ".ndjson")

TICKET_ID_ALLOWED = "letters A-Z and a-z, digits 0-9 and . _ : / # -"
_TICKET_ID_RE = re.compile(r"[A-Za-z0-9._:/#-]+")

_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab"}

_email_validator = EmailValidator()


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


@dataclass(frozen=True)
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


@dataclass
class ParseResult:
    rows: list[TicketRow]
    errors: list[RowError]
    format: str  # "csv" or "jsonl" ("" only if the file type is not supported)

    @property
    def ok(self) -> bool:
        return not self.errors and bool(self.rows)


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


class _Stop(Exception):
    """Internal: abort parsing (the error has already been recorded)."""


class _Errors:
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


def _show(value: str, limit: int = 60) -> str:
    """Quote a user value for an error message, shortened if long."""
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return repr(value)


def _human_size(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MB"
    if n >= 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n} bytes"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _suggest(name: str) -> str:
    match = difflib.get_close_matches(name, ALL_COLUMNS, n=1, cutoff=0.7)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _json_type(value) -> str:
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
            raise ValueError(f"duplicate key {_show(key)}")
        obj[key] = value
    return obj


def _loads(text: str):
    """json.loads that rejects NaN/Infinity and duplicate keys.

    Raises ValueError (incl. JSONDecodeError) or RecursionError.
    """
    return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_pairs_hook)


def _json_error_message(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (character {exc.pos + 1})"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)


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


# --------------------------------------------------------------------------
# Row validation (shared by CSV and JSONL)
# --------------------------------------------------------------------------


class _Validator:
    def __init__(self, errors: _Errors):
        self.errors = errors
        self.seen_ids: dict[str, int] = {}
        self.email_ok: dict[str, bool] = {}
        self.rows: list[TicketRow] = []

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

    def validate(self, row: int, values: dict[str, str], metadata) -> None:
        """``values``: column -> raw string (missing columns absent).

        ``metadata``: ``None`` (absent), a ``str`` (CSV cell with JSON) or an
        already-parsed ``dict`` (JSONL).
        """
        err = self.errors
        before = err.total
        clean: dict[str, str] = {}

        for column in ALL_COLUMNS:
            if column == "metadata":
                continue
            raw = values.get(column, "")
            problem = _bad_text(raw)
            if problem:
                err.add(row, column, problem)
                continue
            value = raw.strip()
            if column in ("body", "subject"):
                value = _normalise_newlines(value)
            if not value:
                if column in REQUIRED_COLUMNS:
                    err.add(row, column, f"{column} is required but is empty")
                    continue
            limit = FIELD_LIMITS.get(column)
            if limit is not None and len(value) > limit:
                err.add(
                    row,
                    column,
                    f"{column} is {len(value):,} characters long; the limit is {limit:,}",
                )
                continue
            if column == "ticket_id":
                if not _TICKET_ID_RE.fullmatch(value):
                    err.add(
                        row,
                        column,
                        f"ticket_id {_show(value)} contains characters that are not allowed; "
                        f"use only {TICKET_ID_ALLOWED}",
                    )
                    continue
                first = self.seen_ids.get(value)
                if first is not None:
                    err.add(
                        row,
                        column,
                        f"duplicate ticket_id {_show(value)}; it is already used in row {first}",
                    )
                    continue
                self.seen_ids[value] = row
            elif column == "customer_email":
                if not self._email_valid(value):
                    err.add(row, column, f"{_show(value)} is not a valid email address")
                    continue
            elif column == "priority":
                if not value:
                    value = "normal"
                else:
                    lowered = value.lower()
                    if lowered not in PRIORITIES:
                        err.add(
                            row,
                            column,
                            f"priority {_show(value)} is not one of: {', '.join(PRIORITIES)}",
                        )
                        continue
                    value = lowered
            clean[column] = value

        meta = self._metadata(row, metadata)

        if err.total == before and meta is not None:
            self.rows.append(
                TicketRow(
                    row=row,
                    ticket_id=clean["ticket_id"],
                    customer_email=clean["customer_email"],
                    subject=clean["subject"],
                    body=clean["body"],
                    customer_name=clean.get("customer_name", ""),
                    priority=clean.get("priority", "normal"),
                    language=clean.get("language", ""),
                    metadata=meta,
                )
            )

    def _metadata(self, row: int, metadata) -> dict | None:
        err = self.errors
        if metadata is None:
            return {}
        if isinstance(metadata, str):
            problem = _bad_text(metadata)
            if problem:
                err.add(row, "metadata", problem)
                return None
            text = metadata.strip()
            if not text:
                return {}
            try:
                parsed = _loads(text)
            except (ValueError, RecursionError) as exc:
                err.add(
                    row,
                    "metadata",
                    f"metadata is not valid JSON: {_json_error_message(exc)}; "
                    'expected a JSON object such as {"plan": "pro"}',
                )
                return None
            if not isinstance(parsed, dict):
                err.add(
                    row,
                    "metadata",
                    f"metadata must be a JSON object such as {{\"plan\": \"pro\"}}, "
                    f"not {_json_type(parsed)}",
                )
                return None
            metadata = parsed
        problem = _bad_json_value(metadata)
        if problem:
            err.add(row, "metadata", f"metadata {problem}")
            return None
        return metadata


# --------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------


def _csv_delimiter(text: str) -> str:
    """Comma, unless the header line uses only semicolons or only tabs.

    (Excel in many European locales saves "CSV" with semicolons.)
    """
    for line in io.StringIO(text, newline=""):
        if not line.strip():
            continue
        if "," in line:
            return ","
        for delimiter in (";", "\t"):
            if delimiter in line:
                return delimiter
        return ","
    return ","


def _csv_error_message(exc: csv.Error, delimiter: str, start_line: int, end_line: int) -> str:
    text = str(exc)
    lines = f"line {start_line}" if start_line == end_line else f"lines {start_line}-{end_line}"
    if "expected after" in text:
        return (
            f"a closing quote must be followed by a {_DELIMITER_NAMES[delimiter]} or the end "
            f"of the line ({lines} of the file); check for a stray quote character - "
            'a quote inside a quoted field must be doubled ("")'
        )
    if "unexpected end of data" in text:
        return (
            f"a quoted field that starts in this row is never closed, so the rest of the file "
            f"({lines}) was read as one field; check for a stray or missing quote character"
        )
    if "field larger than field limit" in text:
        return (
            f"a field is longer than {csv.field_size_limit():,} characters ({lines} of the "
            "file); this is usually a quote character that is never closed"
        )
    return f"could not read this row as CSV ({lines} of the file): {text}"


_field_limit_lock = threading.Lock()


def _allow_fields_up_to(size: int) -> None:
    """Let the csv module read a field as long as the whole file.

    Its default limit (131,072 characters) would turn a long body into a CSV
    syntax error without a column; read in full, the field gets the clear
    "row 2, column body: body is 1,000,000 characters long" instead. The file
    itself is already capped by max_bytes. The limit is process-wide, so it
    only ever grows (under a lock, so two uploads cannot lower it for each other).
    """
    with _field_limit_lock:
        if csv.field_size_limit() < size:
            csv.field_size_limit(size)


def _parse_csv(text: str, errors: _Errors, max_rows: int, file_errors: list[RowError]) -> list[TicketRow]:
    _allow_fields_up_to(len(text) + 1)
    delimiter = _csv_delimiter(text)
    reader = csv.reader(
        io.StringIO(text, newline=""),
        delimiter=delimiter,
        quotechar='"',
        doublequote=True,
        skipinitialspace=True,
        strict=True,
    )
    validator = _Validator(errors)
    header: list[str] | None = None
    index: dict[str, int] = {}
    record_no = 0
    data_rows = 0
    last_line = 0

    while True:
        start_line = last_line + 1
        try:
            record = next(reader)
            csv_error = None
        except StopIteration:
            break
        except csv.Error as exc:
            record = None
            csv_error = exc
        record_no += 1
        end_line = reader.line_num
        last_line = end_line

        if csv_error is not None:
            message = _csv_error_message(csv_error, delimiter, start_line, end_line)
            fatal = "field larger than field limit" in str(csv_error)
            if header is None:
                errors.add(record_no, None, f"could not read the header row: {message}")
                raise _Stop
            data_rows += 1
            if data_rows > max_rows:
                break
            errors.add(record_no, None, message)
            if fatal:
                raise _Stop
            continue

        if not any(cell.strip() for cell in record):
            continue  # blank line (or a row of empty cells)

        if header is None:
            header = [cell.strip().lower() for cell in record]
            _check_header(header, record_no, errors)
            index = {name: i for i, name in enumerate(header)}
            continue

        data_rows += 1
        if data_rows > max_rows:
            break
        if len(record) != len(header):
            errors.add(
                record_no,
                None,
                f"row has {_plural(len(record), 'field')} but the header has "
                f"{_plural(len(header), 'column')}",
            )
            continue
        values = {name: record[i] for name, i in index.items() if name != "metadata"}
        metadata = record[index["metadata"]] if "metadata" in index else None
        validator.validate(record_no, values, metadata)

    if header is None:
        # Cannot happen for a non-blank file, but be safe.
        file_errors.append(RowError(None, None, "file has no header row"))
        return []
    if data_rows > max_rows:
        _count_rest_csv(reader, data_rows, max_rows, file_errors)
        return []
    if data_rows == 0:
        file_errors.append(
            RowError(None, None, "file has a header row but no data rows")
        )
        return []
    return validator.rows


def _count_rest_csv(reader, data_rows: int, max_rows: int, file_errors: list[RowError]) -> None:
    while True:
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            if "field larger than field limit" in str(exc):
                break
            data_rows += 1
            continue
        if any(cell.strip() for cell in record):
            data_rows += 1
    file_errors.append(_too_many_rows(data_rows, max_rows))


def _too_many_rows(data_rows: int, max_rows: int) -> RowError:
    return RowError(
        None,
        None,
        f"file has {_plural(data_rows, 'data row')}; the limit is {max_rows:,} "
        "- split it into smaller batches",
    )


def _check_header(header: list[str], row: int, errors: _Errors) -> None:
    failed = False
    blanks = [str(i + 1) for i, name in enumerate(header) if not name]
    if blanks:
        errors.add(
            row,
            None,
            f"header has an empty column name at position{'s' if len(blanks) > 1 else ''} "
            f"{', '.join(blanks)}; every column needs a name (remove empty columns)",
        )
        failed = True

    named = [name for name in header if name]
    duplicates = sorted({name for name in named if named.count(name) > 1}, key=named.index)
    if duplicates:
        errors.add(
            row,
            None,
            f"duplicate column{'s' if len(duplicates) > 1 else ''} in the header: "
            f"{', '.join(duplicates)}",
        )
        failed = True

    missing = [name for name in REQUIRED_COLUMNS if name not in named]
    if missing:
        errors.add(
            row,
            None,
            f"missing required column{'s' if len(missing) > 1 else ''}: {', '.join(missing)}",
        )
        failed = True

    unknown = []
    for name in named:
        if name not in ALL_COLUMNS and name not in unknown:
            unknown.append(name)
    if unknown:
        parts = ", ".join(f"{_show(name)}{_suggest(name)}" for name in unknown)
        message = (
            f"unknown column{'s' if len(unknown) > 1 else ''}: {parts}; allowed columns are "
            f"{', '.join(ALL_COLUMNS)}"
        )
        if not any(name in ALL_COLUMNS for name in named):
            message += (
                "; the first row must be a header row naming the columns "
                f"(required: {', '.join(REQUIRED_COLUMNS)})"
            )
        errors.add(row, None, message)
        failed = True

    if failed:
        raise _Stop


# --------------------------------------------------------------------------
# JSON Lines
# --------------------------------------------------------------------------


def _parse_jsonl(text: str, errors: _Errors, max_rows: int, file_errors: list[RowError]) -> list[TicketRow]:
    validator = _Validator(errors)
    lines = text.split("\n")
    data_rows = 0

    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        data_rows += 1
        if data_rows > max_rows:
            data_rows += sum(1 for rest in lines[line_no:] if rest.strip())
            file_errors.append(_too_many_rows(data_rows, max_rows))
            return []
        if "\x00" in line:
            errors.add(line_no, None, "line contains a NUL byte (\\x00), which is not allowed")
            continue
        try:
            obj = _loads(line)
        except (ValueError, RecursionError) as exc:
            errors.add(line_no, None, f"line is not valid JSON: {_json_error_message(exc)}")
            continue
        if not isinstance(obj, dict):
            message = f"each line must be a JSON object ({{...}}), not {_json_type(obj)}"
            if isinstance(obj, list):
                message += "; JSONL has one object per line, not a JSON array"
            errors.add(line_no, None, message)
            continue

        ok = True
        for key in obj:
            if key not in ALL_COLUMNS:
                errors.add(
                    line_no,
                    key,
                    f"unknown key {_show(key)}{_suggest(key)}; allowed keys are "
                    f"{', '.join(ALL_COLUMNS)}",
                )
                ok = False

        values: dict[str, str] = {}
        for key in ALL_COLUMNS:
            if key == "metadata":
                continue
            value = obj.get(key)
            if value is None:
                continue
            if isinstance(value, str):
                values[key] = value
            elif key == "ticket_id" and isinstance(value, int) and not isinstance(value, bool):
                values[key] = str(value)
            else:
                expected = "a string or an integer" if key == "ticket_id" else "a string"
                errors.add(line_no, key, f"{key} must be {expected}, not {_json_type(value)}")
                ok = False

        metadata = obj.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            errors.add(
                line_no,
                "metadata",
                f"metadata must be a JSON object, not {_json_type(metadata)}",
            )
            ok = False
        if not ok:
            continue
        validator.validate(line_no, values, metadata)

    if data_rows == 0:
        file_errors.append(RowError(None, None, "file has no data rows"))
        return []
    return validator.rows


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


def _format_from_filename(filename) -> tuple[str | None, str | None]:
    """Return (format, error). format None + error None means "sniff"."""
    if not isinstance(filename, str):
        return None, None
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    stem, dot, ext = base.rpartition(".")
    if not dot or not stem:
        return None, None
    ext = "." + ext.lower()
    if ext in CSV_EXTENSIONS:
        return "csv", None
    if ext in JSONL_EXTENSIONS:
        return "jsonl", None
    names = CSV_EXTENSIONS + JSONL_EXTENSIONS
    accepted = ", ".join(names[:-1]) + " or " + names[-1]
    message = f"unsupported file type {_show(ext)}; upload a {accepted} file"
    if ext in (".xlsx", ".xls", ".xlsm", ".ods", ".numbers"):
        message += ' (export the spreadsheet as "CSV UTF-8")'
    elif ext == ".json":
        message += " (for JSON Lines - one object per line - use the .jsonl extension)"
    return None, message


def _sniff(data: bytes) -> str:
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    stripped = data.lstrip()
    return "jsonl" if stripped[:1] == b"{" else "csv"


def _decode(data: bytes) -> tuple[str | None, str | None]:
    """Return (text, error)."""
    if data.startswith(_UTF16_BOMS) or data.startswith((b"\x00\x00\xfe\xff", b"\xff\xfe\x00\x00")):
        return None, "file is encoded as UTF-16 (or UTF-32), not UTF-8; save the file as UTF-8"
    head = data[:4096]
    if len(head) >= 16 and head.count(b"\x00") * 3 >= len(head):
        return None, (
            "file contains many NUL bytes and looks like UTF-16 text, not UTF-8; "
            "save the file as UTF-8"
        )
    offset = 0
    if data.startswith(_BOM):
        offset = len(_BOM)
    try:
        return data[offset:].decode("utf-8"), None
    except UnicodeDecodeError as exc:
        position = exc.start + offset
        line = data.count(b"\n", 0, position) + 1
        byte = data[position : position + 1].hex().upper() or "??"
        return None, (
            f"file is not valid UTF-8: byte 0x{byte} at byte offset {position:,} (line {line}) "
            "cannot be decoded (the file may be in Windows-1252/Latin-1 or another "
            "encoding); save the file as UTF-8"
        )


def parse_batch(
    data: bytes,
    filename: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_errors: int = 200,
) -> ParseResult:
    """Parse and validate an uploaded ticket batch.

    Never raises for bytes input. ``result.rows`` is empty whenever
    ``result.errors`` is not.
    """
    fmt = ""
    try:
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        elif isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        if not isinstance(data, bytes):
            return ParseResult(
                [], [RowError(None, None, f"expected file contents as bytes, got {type(data).__name__}")], fmt
            )

        fmt_from_name, name_error = _format_from_filename(filename)
        if name_error:
            return ParseResult([], [RowError(None, None, name_error)], fmt)
        fmt = fmt_from_name or _sniff(data)

        def fail(message: str) -> ParseResult:
            return ParseResult([], [RowError(None, None, message)], fmt)

        if len(data) > max_bytes:
            size, limit = _human_size(len(data)), _human_size(max_bytes)
            if size == limit:
                size, limit = f"{size} ({len(data):,} bytes)", f"{limit} ({max_bytes:,} bytes)"
            return fail(f"file is {size}; the limit is {limit}")

        body = data[len(_BOM):] if data.startswith(_BOM) else data
        if not body.strip():
            return fail("file is empty" if not body else "file is empty (it contains only whitespace)")

        text, decode_error = _decode(data)
        if decode_error:
            return fail(decode_error)
        if not text.strip():
            return fail("file is empty (it contains only whitespace)")

        errors = _Errors(max_errors)
        file_errors: list[RowError] = []
        rows: list[TicketRow] = []
        try:
            if fmt == "csv":
                rows = _parse_csv(text, errors, max_rows, file_errors)
            else:
                rows = _parse_jsonl(text, errors, max_rows, file_errors)
        except _Stop:
            rows = []

        all_errors = errors.result(file_errors)
        if all_errors:
            return ParseResult([], all_errors, fmt)
        if not rows:
            return fail("file has no data rows")
        return ParseResult(rows, [], fmt)
    except Exception as exc:  # pragma: no cover - last-resort safety net
        return ParseResult(
            [],
            [RowError(None, None, f"the file could not be parsed (internal error: {type(exc).__name__})")],
            fmt,
        )
