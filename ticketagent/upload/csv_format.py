"""Read a CSV ticket batch: delimiter, header, records, and the csv module's errors in plain words.

Entry point: :func:`parse_csv`. The header row is checked first (a bad
header stops the parse); every data row then goes to the shared
:class:`~ticketagent.upload.validate.RowValidator`.
"""

from __future__ import annotations

import csv
import re
import threading

from ticketagent.upload.rows import (
    ALL_COLUMNS,
    REQUIRED_COLUMNS,
    ErrorCollector,
    RowError,
    StopParsing,
    TicketRow,
    plural,
    show_value,
    suggest_column,
    too_many_rows_error,
)
from ticketagent.upload.validate import RowValidator

_DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab"}


def _csv_delimiter(text: str) -> str:
    """Comma, unless the header line uses only semicolons or only tabs.

    (Excel in many European locales saves "CSV" with semicolons.)
    """
    for line in _lines(text):
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


def parse_csv(text: str, errors: ErrorCollector, max_rows: int, file_errors: list[RowError]) -> list[TicketRow]:
    """The rows of a CSV batch; problems go to ``errors`` and ``file_errors``.

    Raises :class:`StopParsing` when the file cannot be read any further.
    """
    _allow_fields_up_to(len(text) + 1)
    return _CsvParser(text, errors, max_rows).parse(file_errors)


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _lines(text: str):
    """The text's lines with their endings, as `io.StringIO(text, newline="")` reads them,
    without its copy of the whole text (four bytes a character)."""
    return (m.group() for m in _LINE.finditer(text))


class _CsvParser:
    """One pass over a CSV text: the header, then one data row at a time."""

    def __init__(self, text: str, errors: ErrorCollector, max_rows: int):
        self.delimiter = _csv_delimiter(text)
        self.reader = csv.reader(
            _lines(text),
            delimiter=self.delimiter,
            quotechar='"',
            doublequote=True,
            skipinitialspace=True,
            strict=True,
        )
        self.errors = errors
        self.max_rows = max_rows
        self.validator = RowValidator(errors)
        self.header: list[str] | None = None
        self.index: dict[str, int] = {}
        self.record_no = 0
        self.data_rows = 0
        self.last_line = 0

    def parse(self, file_errors: list[RowError]) -> list[TicketRow]:
        for record, csv_error, start_line in self._records():
            if csv_error is not None:
                more = self._unreadable_record(csv_error, start_line)
            else:
                more = self._record(record)
            if not more:
                break
        return self._finish(file_errors)

    def _records(self):
        """Yield ``(record, csv_error, start_line)``; exactly one of the first two is ``None``."""
        while True:
            start_line = self.last_line + 1
            try:
                record = next(self.reader)
                csv_error = None
            except StopIteration:
                return
            except csv.Error as exc:
                record = None
                csv_error = exc
            self.record_no += 1
            self.last_line = self.reader.line_num
            yield record, csv_error, start_line

    def _unreadable_record(self, csv_error: csv.Error, start_line: int) -> bool:
        """Report a record the csv module could not read; False once past the row cap."""
        message = _csv_error_message(csv_error, self.delimiter, start_line, self.last_line)
        fatal = "field larger than field limit" in str(csv_error)
        if self.header is None:
            self.errors.add(self.record_no, None, f"could not read the header row: {message}")
            raise StopParsing
        self.data_rows += 1
        if self.data_rows > self.max_rows:
            return False
        self.errors.add(self.record_no, None, message)
        if fatal:
            raise StopParsing
        return True

    def _record(self, record: list[str]) -> bool:
        """Take the header or validate a data row; False once past the row cap."""
        if not any(cell.strip() for cell in record):
            return True  # blank line (or a row of empty cells)

        if self.header is None:
            self.header = [cell.strip().lower() for cell in record]
            _check_header(self.header, self.record_no, self.errors)
            self.index = {name: i for i, name in enumerate(self.header)}
            return True

        self.data_rows += 1
        if self.data_rows > self.max_rows:
            return False
        if len(record) != len(self.header):
            self.errors.add(
                self.record_no,
                None,
                f"row has {plural(len(record), 'field')} but the header has "
                f"{plural(len(self.header), 'column')}",
            )
            return True
        index = self.index
        values = {name: record[i] for name, i in index.items() if name != "metadata"}
        metadata = record[index["metadata"]] if "metadata" in index else None
        self.validator.validate(self.record_no, values, metadata)
        return True

    def _finish(self, file_errors: list[RowError]) -> list[TicketRow]:
        if self.header is None:
            # Cannot happen for a non-blank file, but be safe.
            file_errors.append(RowError(None, None, "file has no header row"))
            return []
        if self.data_rows > self.max_rows:
            _count_rest_csv(self.reader, self.data_rows, self.max_rows, file_errors)
            return []
        if self.data_rows == 0:
            file_errors.append(
                RowError(None, None, "file has a header row but no data rows")
            )
            return []
        return self.validator.rows


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
    file_errors.append(too_many_rows_error(data_rows, max_rows))


def _check_header(header: list[str], row: int, errors: ErrorCollector) -> None:
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

    if _check_unknown_columns(named, row, errors):
        failed = True

    if failed:
        raise StopParsing


def _check_unknown_columns(named: list[str], row: int, errors: ErrorCollector) -> bool:
    """Report header names that are not columns; True if there were any."""
    unknown = []
    for name in named:
        if name not in ALL_COLUMNS and name not in unknown:
            unknown.append(name)
    if not unknown:
        return False
    parts = ", ".join(f"{show_value(name)}{suggest_column(name)}" for name in unknown)
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
    return True
