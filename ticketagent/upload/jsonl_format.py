"""Read a JSON Lines ticket batch: one JSON object per line, keys named like the CSV columns.

Entry point: :func:`parse_jsonl`. Each line is parsed strictly (no NaN, no
duplicate keys), its keys and value types are checked, and the values go to
the shared :class:`~ticketagent.upload.validate.RowValidator`.
"""

from __future__ import annotations

from ticketagent.upload.rows import (
    ALL_COLUMNS,
    ErrorCollector,
    RowError,
    TicketRow,
    json_error_message,
    json_type_name,
    show_value,
    strict_json_loads,
    suggest_column,
    too_many_rows_error,
)
from ticketagent.upload.validate import RowValidator


def parse_jsonl(text: str, errors: ErrorCollector, max_rows: int, file_errors: list[RowError]) -> list[TicketRow]:
    """The rows of a JSON Lines batch; problems go to ``errors`` and ``file_errors``."""
    validator = RowValidator(errors)
    lines = text.split("\n")
    data_rows = 0

    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        data_rows += 1
        if data_rows > max_rows:
            data_rows += sum(1 for rest in lines[line_no:] if rest.strip())
            file_errors.append(too_many_rows_error(data_rows, max_rows))
            return []
        obj = _read_object(line_no, line, errors)
        if obj is None:
            continue
        fields = _fields(line_no, obj, errors)
        if fields is None:
            continue
        values, metadata = fields
        validator.validate(line_no, values, metadata)

    if data_rows == 0:
        file_errors.append(RowError(None, None, "file has no data rows"))
        return []
    return validator.rows


def _read_object(line_no: int, line: str, errors: ErrorCollector) -> dict | None:
    """The line's JSON object, or ``None`` after reporting why it is not one."""
    if "\x00" in line:
        errors.add(line_no, None, "line contains a NUL byte (\\x00), which is not allowed")
        return None
    try:
        obj = strict_json_loads(line)
    except (ValueError, RecursionError) as exc:
        errors.add(line_no, None, f"line is not valid JSON: {json_error_message(exc)}")
        return None
    if not isinstance(obj, dict):
        message = f"each line must be a JSON object ({{...}}), not {json_type_name(obj)}"
        if isinstance(obj, list):
            message += "; JSONL has one object per line, not a JSON array"
        errors.add(line_no, None, message)
        return None
    return obj


def _fields(line_no: int, obj: dict, errors: ErrorCollector) -> tuple[dict[str, str], dict | None] | None:
    """``(values, metadata)`` for the validator, or ``None`` if a key or a type is wrong."""
    ok = True
    for key in obj:
        if key not in ALL_COLUMNS:
            errors.add(
                line_no,
                key,
                f"unknown key {show_value(key)}{suggest_column(key)}; allowed keys are "
                f"{', '.join(ALL_COLUMNS)}",
            )
            ok = False

    values, types_ok = _text_values(line_no, obj, errors)
    ok = ok and types_ok

    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        errors.add(
            line_no,
            "metadata",
            f"metadata must be a JSON object, not {json_type_name(metadata)}",
        )
        ok = False
    return (values, metadata) if ok else None


def _text_values(line_no: int, obj: dict, errors: ErrorCollector) -> tuple[dict[str, str], bool]:
    """Every column but metadata as text (an integer ticket_id too); False if a type is wrong."""
    ok = True
    values: dict[str, str] = {}
    for key in ALL_COLUMNS:
        if key == "metadata":
            continue
        value = obj.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            values[key] = value
        elif key == "expected_actions" and isinstance(value, list) and all(isinstance(v, str) for v in value):
            values[key] = " ".join(value)
        elif key == "ticket_id" and isinstance(value, int) and not isinstance(value, bool):
            values[key] = str(value)
        else:
            expected = "a string or an integer" if key == "ticket_id" else "a string"
            errors.add(line_no, key, f"{key} must be {expected}, not {json_type_name(value)}")
            ok = False
    return values, ok
