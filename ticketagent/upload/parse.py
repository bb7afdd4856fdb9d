"""Parse an uploaded ticket batch: pick the format, decode the bytes, hand the text to its reader.

Entry point: :func:`parse_batch`. It never raises for any ``bytes`` input;
every problem is reported as a :class:`~ticketagent.upload.rows.RowError`.
If there is any error, the result carries no rows at all (nothing partial
gets imported).

The format is documented in ``docs/upload-format.md``.
"""

from __future__ import annotations

import io
import zipfile

from ticketagent.upload.csv_format import parse_csv
from ticketagent.upload.jsonl_format import parse_jsonl
from ticketagent.upload.rows import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    MAX_FILENAME_CHARS,
    ErrorCollector,
    ParseResult,
    RowError,
    StopParsing,
    TicketRow,
    human_size,
    long_filename_message,
    show_value,
)

CSV_EXTENSIONS = (".csv",)
JSONL_EXTENSIONS = (".jsonl", ".ndjson")

_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _format_from_filename(filename) -> tuple[str | None, str | None]:
    """Return (format, error). format None + error None means "sniff"."""
    if not isinstance(filename, str):
        return None, None
    if len(filename) > MAX_FILENAME_CHARS:
        return None, long_filename_message(len(filename))
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
    message = f"unsupported file type {show_value(ext)}; upload a {accepted} file"
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


_EXPORT_CSV = 'export it as CSV (File > Save As > "CSV UTF-8") and upload that file'
_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # old Excel (.xls) and other Office files


def _container(data: bytes) -> str | None:
    """What a spreadsheet or archive given to us as text is, in words; None for anything else.

    Only the ZIP's directory (and an OpenDocument file's tiny `mimetype` entry) is read."""
    if data.startswith(_OLE2_MAGIC):
        return f"this is an Excel file (.xls), not CSV text; {_EXPORT_CSV}"
    if not data.startswith(b"PK\x03\x04"):
        return None
    names, mimetype = set(), b""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            if "mimetype" in names and archive.getinfo("mimetype").file_size < 200:
                mimetype = archive.read("mimetype")
    except Exception:  # noqa: BLE001 - a damaged archive is still an archive, not CSV text
        names, mimetype = set(), b""
    if any(name.startswith("xl/") for name in names):
        return f"this is an Excel file (.xlsx), not CSV text; {_EXPORT_CSV}"
    if mimetype.endswith(b"opendocument.spreadsheet"):
        return f"this is an OpenDocument spreadsheet (.ods), not CSV text; {_EXPORT_CSV}"
    return "this is a ZIP archive, not CSV text; unpack it and upload the .csv or .jsonl file inside"


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


def _as_bytes(data):
    """``bytes`` for a bytearray, memoryview or str; anything else unchanged."""
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    return data


def _failed(message: str, fmt: str) -> ParseResult:
    return ParseResult([], [RowError(None, None, message)], fmt)


def _too_big(size: int, max_bytes: int) -> str:
    shown, limit = human_size(size), human_size(max_bytes)
    if shown == limit:
        shown, limit = f"{shown} ({size:,} bytes)", f"{limit} ({max_bytes:,} bytes)"
    return f"file is {shown}; the limit is {limit}"


def _text_of(data: bytes, max_bytes: int) -> tuple[str | None, str | None]:
    """Return (text, error): the decoded file, unless it is too big, empty or not UTF-8."""
    if len(data) > max_bytes:
        return None, _too_big(len(data), max_bytes)
    container = _container(data)
    if container:
        return None, container
    body = data[len(_BOM):] if data.startswith(_BOM) else data
    if not body.strip():
        return None, "file is empty" if not body else "file is empty (it contains only whitespace)"
    text, decode_error = _decode(data)
    if decode_error:
        return None, decode_error
    if not text.strip():
        return None, "file is empty (it contains only whitespace)"
    return text, None


def _parse_text(text: str, fmt: str, max_rows: int, max_errors: int) -> ParseResult:
    """Read the decoded text in its format; all its rows, or none and the errors."""
    errors = ErrorCollector(max_errors)
    file_errors: list[RowError] = []
    rows: list[TicketRow] = []
    parse = parse_csv if fmt == "csv" else parse_jsonl
    try:
        rows = parse(text, errors, max_rows, file_errors)
    except StopParsing:
        rows = []

    all_errors = errors.result(file_errors)
    if all_errors:
        return ParseResult([], all_errors, fmt)
    if not rows:
        return _failed("file has no data rows", fmt)
    return ParseResult(rows, [], fmt)


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
        data = _as_bytes(data)
        if not isinstance(data, bytes):
            return _failed(f"expected file contents as bytes, got {type(data).__name__}", fmt)

        fmt_from_name, name_error = _format_from_filename(filename)
        if name_error:
            return _failed(name_error, fmt)
        fmt = fmt_from_name or _sniff(data)

        text, problem = _text_of(data, max_bytes)
        if problem:
            return _failed(problem, fmt)
        return _parse_text(text, fmt, max_rows, max_errors)
    except Exception as exc:  # pragma: no cover - last-resort safety net
        return _failed(f"the file could not be parsed (internal error: {type(exc).__name__})", fmt)
