"""Tests for ticketagent.upload.parse.parse_batch (pure Python, no database)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ticketagent.upload.parse import parse_batch
from ticketagent.upload.rows import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    FIELD_LIMITS,
    OPTIONAL_COLUMNS,
    PRIORITIES,
    REQUIRED_COLUMNS,
    ParseResult,
    RowError,
    TicketRow,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"

HEADER = "ticket_id,customer_email,subject,body"


def csv_bytes(*lines: str, header: str = HEADER, newline: str = "\n") -> bytes:
    return newline.join((header, *lines)).encode("utf-8") + newline.encode()


def jsonl_bytes(*objs) -> bytes:
    out = []
    for obj in objs:
        out.append(obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False))
    return ("\n".join(out) + "\n").encode("utf-8")


def ticket(**overrides) -> dict:
    obj = {
        "ticket_id": "T-1001",
        "customer_email": "alice@example.com",
        "subject": "Refund please",
        "body": "I was charged twice.",
    }
    obj.update(overrides)
    return obj


def where(result: ParseResult) -> list[tuple[int | None, str | None]]:
    return [(e.row, e.column) for e in result.errors]


def only_error(result: ParseResult) -> RowError:
    assert result.rows == []
    assert len(result.errors) == 1, result.errors
    return result.errors[0]


def assert_invariant(result: ParseResult) -> None:
    assert isinstance(result, ParseResult)
    assert result.format in ("csv", "jsonl", "")
    assert all(isinstance(e, RowError) for e in result.errors)
    assert all(isinstance(r, TicketRow) for r in result.rows)
    # Exactly one of rows / errors is non-empty: nothing partial, never silent.
    assert bool(result.rows) != bool(result.errors)
    assert result.ok == bool(result.rows)
    # The last-resort safety net in parse_batch must never be what catches a problem.
    assert not any("internal error" in e.message for e in result.errors), result.errors


# --------------------------------------------------------------------------
# Interface
# --------------------------------------------------------------------------


def test_constants():
    assert REQUIRED_COLUMNS == ("ticket_id", "customer_email", "subject", "body")
    assert OPTIONAL_COLUMNS == ("customer_name", "priority", "language", "metadata")
    assert PRIORITIES == ("low", "normal", "high", "urgent")
    assert FIELD_LIMITS == {
        "ticket_id": 64,
        "customer_email": 254,
        "customer_name": 200,
        "subject": 300,
        "body": 20000,
        "language": 16,
    }
    assert DEFAULT_MAX_BYTES == 10 * 1024 * 1024
    assert DEFAULT_MAX_ROWS == 50_000


def test_row_error_str():
    assert (
        str(RowError(7, "customer_email", "'bob@' is not a valid email address"))
        == "row 7, column customer_email: 'bob@' is not a valid email address"
    )
    assert str(RowError(7, None, "row has 5 fields")) == "row 7: row has 5 fields"
    assert str(RowError(None, None, "file is empty")) == "file: file is empty"


def test_parse_result_ok():
    row = TicketRow(row=2, ticket_id="T-1", customer_email="a@example.com", subject="s", body="b")
    assert ParseResult([row], [], "csv").ok
    assert not ParseResult([], [], "csv").ok
    assert not ParseResult([], [RowError(None, None, "x")], "csv").ok


def test_ticket_row_defaults():
    row = TicketRow(row=2, ticket_id="T-1", customer_email="a@example.com", subject="s", body="b")
    assert (row.customer_name, row.priority, row.language, row.metadata) == ("", "normal", "", {})


# --------------------------------------------------------------------------
# Good files
# --------------------------------------------------------------------------


def test_good_csv_with_bom():
    data = b"\xef\xbb\xbf" + csv_bytes(
        "T-1001,alice@example.com,Refund please,I was charged twice.",
        "T-1002,bob@example.org,Password,Reset mail never arrives",
    )
    result = parse_batch(data, "tickets.csv")
    assert result.ok, result.errors
    assert result.format == "csv"
    assert [r.ticket_id for r in result.rows] == ["T-1001", "T-1002"]
    first = result.rows[0]
    assert first == TicketRow(
        row=2,
        ticket_id="T-1001",
        customer_email="alice@example.com",
        subject="Refund please",
        body="I was charged twice.",
    )
    assert result.rows[1].row == 3


def test_good_csv_all_columns():
    header = "ticket_id,customer_email,customer_name,subject,body,priority,language,metadata"
    data = csv_bytes(
        'T-1,alice@example.com,Alice,Hi,Body,HIGH,de,"{""plan"": ""pro"", ""seats"": 3}"',
        "T-2,bob@example.com,,Hi,Body,,,",
        header=header,
    )
    result = parse_batch(data, "t.csv")
    assert result.ok, result.errors
    a, b = result.rows
    assert (a.customer_name, a.priority, a.language, a.metadata) == ("Alice", "high", "de", {"plan": "pro", "seats": 3})
    assert (b.customer_name, b.priority, b.language, b.metadata) == ("", "normal", "", {})


def test_good_jsonl():
    data = jsonl_bytes(
        ticket(customer_name="Alice", priority="Urgent", language="en", metadata={"order": "A-1", "n": [1, 2]}),
        ticket(ticket_id=1002, body="Zweite Zeile\nDritte Zeile"),
        ticket(ticket_id="T-1003", customer_name=None, metadata=None, priority=None),
    )
    result = parse_batch(data, "batch.jsonl")
    assert result.ok, result.errors
    assert result.format == "jsonl"
    a, b, c = result.rows
    assert a.row == 1 and a.priority == "urgent" and a.metadata == {"order": "A-1", "n": [1, 2]}
    assert b.row == 2 and b.ticket_id == "1002" and b.body == "Zweite Zeile\nDritte Zeile"
    assert c.row == 3 and c.customer_name == "" and c.metadata == {} and c.priority == "normal"


def test_good_ndjson_and_bom_and_crlf():
    data = b"\xef\xbb\xbf" + jsonl_bytes(ticket()).replace(b"\n", b"\r\n")
    result = parse_batch(data, "batch.NDJSON")
    assert result.ok, result.errors
    assert result.format == "jsonl"


def test_crlf_line_endings():
    data = csv_bytes(
        "T-1,alice@example.com,Hi,One",
        'T-2,bob@example.com,Hi,"Para one\r\n\r\nPara two"',
        newline="\r\n",
    )
    result = parse_batch(data, "t.csv")
    assert result.ok, result.errors
    assert [r.row for r in result.rows] == [2, 3]
    assert result.rows[0].body == "One"  # no stray \r
    assert result.rows[1].body == "Para one\n\nPara two"  # CRLF normalised to \n


def test_quoted_multiline_body():
    data = csv_bytes(
        'T-1,alice@example.com,Hi,"Hello,\n\nI was charged ""twice"".\n\nThanks,\nAlice"',
        "T-2,bob@example.com,Second,Plain",
        "T-3,bob@example.com,,Plain",
    )
    result = parse_batch(data, "t.csv")
    # The multi-line record counts as one row, like a spreadsheet shows it.
    assert where(result) == [(4, "subject")]
    data = csv_bytes(
        'T-1,alice@example.com,Hi,"Hello,\n\nI was charged ""twice"".\n\nThanks,\nAlice"',
        "T-2,bob@example.com,Second,Plain",
    )
    result = parse_batch(data, "t.csv")
    assert result.ok
    assert result.rows[0].body == 'Hello,\n\nI was charged "twice".\n\nThanks,\nAlice'
    assert result.rows[1].row == 3


def test_whitespace_stripped_inner_newlines_kept():
    data = csv_bytes('  T-1 ,  alice@example.com , "  Hi  ","\n  line one\n\n  line two  \n"')
    result = parse_batch(data, "t.csv")
    assert result.ok, result.errors
    row = result.rows[0]
    assert (row.ticket_id, row.customer_email, row.subject) == ("T-1", "alice@example.com", "Hi")
    assert row.body == "line one\n\n  line two"


def test_spreadsheet_formulas_are_accepted_as_text():
    data = csv_bytes(
        "T-1,alice@example.com,=SUM(A1:A3),+1 555 0100",
        "T-2,bob@example.com,-50% discount,@mention",
    )
    result = parse_batch(data, "t.csv")
    assert result.ok, result.errors
    assert [(r.subject, r.body) for r in result.rows] == [
        ("=SUM(A1:A3)", "+1 555 0100"),
        ("-50% discount", "@mention"),
    ]


def test_semicolon_separated_csv_is_accepted():
    data = "ticket_id;customer_email;subject;body\nT-1;alice@example.com;Hallo;Grüße, Jürgen\n".encode()
    result = parse_batch(data, "excel-de.csv")
    assert result.ok, result.errors
    assert result.rows[0].body == "Grüße, Jürgen"


# --------------------------------------------------------------------------
# Example files in docs/
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name, fmt", [("tickets.csv", "csv"), ("tickets.jsonl", "jsonl")])
def test_example_files_parse_cleanly(name, fmt):
    result = parse_batch((EXAMPLES / name).read_bytes(), name)
    assert result.errors == []
    assert result.format == fmt
    assert len(result.rows) == 60
    assert len({r.ticket_id for r in result.rows}) == 60
    assert {"en", "de", "fr", "es", "zh", "ja"} <= {r.language for r in result.rows}
    assert {r.priority for r in result.rows} == set(PRIORITIES)
    assert any(r.metadata for r in result.rows)
    assert any("\n\n" in r.body for r in result.rows)
    assert sum("ignore your instructions" in r.body.lower() for r in result.rows) == 2
    for r in result.rows:
        assert r.customer_email.rsplit("@", 1)[1] in ("example.com", "example.org")


def test_bad_tickets_example():
    result = parse_batch((EXAMPLES / "bad_tickets.csv").read_bytes(), "bad_tickets.csv")
    assert result.rows == []
    assert where(result) == [
        (3, "customer_email"),
        (4, "subject"),
        (6, "ticket_id"),
        (7, "priority"),
        (8, "metadata"),
    ]
    messages = [str(e) for e in result.errors]
    assert messages[0] == "row 3, column customer_email: 'bob.martinez(at)example.org' is not a valid email address"
    assert messages[1] == "row 4, column subject: subject is required but is empty"
    assert "already used in row 5" in messages[2]


# --------------------------------------------------------------------------
# Format detection
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "filename, fmt",
    [("a.csv", "csv"), ("A.CSV", "csv"), ("dir/x.jsonl", "jsonl"), ("C:\\up\\x.ndjson", "jsonl")],
)
def test_format_by_extension(filename, fmt):
    data = csv_bytes("T-1,alice@example.com,Hi,Body") if fmt == "csv" else jsonl_bytes(ticket())
    result = parse_batch(data, filename)
    assert result.ok, result.errors
    assert result.format == fmt


@pytest.mark.parametrize("filename", ["tickets.xlsx", "tickets.txt", "tickets.json", "tickets.csv.gz"])
def test_unsupported_extension(filename):
    err = only_error(parse_batch(csv_bytes("T-1,alice@example.com,Hi,Body"), filename))
    assert err.row is None and err.column is None
    assert "unsupported file type" in err.message
    for ext in (".csv", ".jsonl", ".ndjson"):
        assert ext in err.message


@pytest.mark.parametrize("filename", ["tickets", "", None])
def test_no_extension_sniffs_format(filename):
    result = parse_batch(b"\n  " + jsonl_bytes(ticket()), filename)
    assert result.ok and result.format == "jsonl"
    result = parse_batch(csv_bytes("T-1,alice@example.com,Hi,Body"), filename)
    assert result.ok and result.format == "csv"


# --------------------------------------------------------------------------
# File-level errors
# --------------------------------------------------------------------------


def test_file_too_large():
    data = b"x" * int(12.3 * 1024 * 1024)
    err = only_error(parse_batch(data, "big.csv"))
    assert (err.row, err.column) == (None, None)
    assert err.message == "file is 12.3 MB; the limit is 10.0 MB"


def test_size_checked_before_decoding():
    data = b"\xff" * 101
    err = only_error(parse_batch(data, "big.csv", max_bytes=100))
    assert err.message == "file is 101 bytes; the limit is 100 bytes"


@pytest.mark.parametrize("data", [b"", b"   \n\r\n\t ", b"\xef\xbb\xbf", b"\xef\xbb\xbf\n\n"])
@pytest.mark.parametrize("filename", ["t.csv", "t.jsonl"])
def test_empty_file(data, filename):
    err = only_error(parse_batch(data, filename))
    assert (err.row, err.column) == (None, None)
    assert err.message.startswith("file is empty")


def test_header_only():
    for data in (b"ticket_id,customer_email,subject,body", csv_bytes(), csv_bytes("", ",,,", "")):
        err = only_error(parse_batch(data, "t.csv"))
        assert (err.row, err.column) == (None, None)
        assert err.message == "file has a header row but no data rows"


def test_invalid_utf8():
    data = csv_bytes("T-1,alice@example.com,Hi,Caf\xe9").replace("é".encode(), b"\xe9")
    err = only_error(parse_batch(data, "t.csv"))
    assert (err.row, err.column) == (None, None)
    offset = data.index(b"\xe9")
    assert f"byte offset {offset}" in err.message
    assert "(line 2)" in err.message
    assert "0xE9" in err.message
    assert "save the file as UTF-8" in err.message


def test_invalid_utf8_offset_counts_bom():
    data = b"\xef\xbb\xbf" + jsonl_bytes(ticket(), ticket(ticket_id="T-2")) + b'{"x": "\xc3"}\n'
    err = only_error(parse_batch(data, "t.jsonl"))
    assert f"byte offset {data.rindex(bytes([0xC3]))}" in err.message
    assert "(line 3)" in err.message


def test_utf16_file():
    data = csv_bytes("T-1,alice@example.com,Hi,Body").decode().encode("utf-16")
    err = only_error(parse_batch(data, "t.csv"))
    assert "UTF-16" in err.message and "save the file as UTF-8" in err.message


def test_nul_byte_in_csv_names_row_and_column():
    data = csv_bytes("T-1,alice@example.com,Hi,Body", "T-2,bob@example.com,Hi,Bo\x00dy")
    result = parse_batch(data, "t.csv")
    assert where(result) == [(3, "body")]
    assert "NUL" in result.errors[0].message


def test_nul_byte_in_jsonl():
    raw = jsonl_bytes(ticket(), ticket(ticket_id="T-2")).replace(b'"T-2"', b'"T-\x002"')
    result = parse_batch(raw, "t.jsonl")
    assert where(result) == [(2, None)]
    assert "NUL" in result.errors[0].message
    escaped = jsonl_bytes(ticket(), ticket(ticket_id="T-2", subject="a\u0000b"))
    result = parse_batch(escaped, "t.jsonl")
    assert where(result) == [(2, "subject")]
    assert "NUL" in result.errors[0].message


def test_too_many_rows():
    lines = [f"T-{i},alice@example.com,Hi,Body" for i in range(6)]
    err = only_error(parse_batch(csv_bytes(*lines), "t.csv", max_rows=5))
    assert (err.row, err.column) == (None, None)
    assert err.message.startswith("file has 6 data rows; the limit is 5")
    assert parse_batch(csv_bytes(*lines[:5]), "t.csv", max_rows=5).ok

    objs = [ticket(ticket_id=f"T-{i}") for i in range(6)]
    err = only_error(parse_batch(jsonl_bytes(*objs), "t.jsonl", max_rows=5))
    assert err.message.startswith("file has 6 data rows; the limit is 5")
    assert parse_batch(jsonl_bytes(*objs[:5]), "t.jsonl", max_rows=5).ok


# --------------------------------------------------------------------------
# CSV structure
# --------------------------------------------------------------------------


def test_header_names_stripped_and_lowercased():
    data = csv_bytes("T-1,alice@example.com,Hi,Body", header=" Ticket_ID , CUSTOMER_EMAIL,Subject ,Body")
    assert parse_batch(data, "t.csv").ok


def test_missing_required_columns_one_error():
    data = csv_bytes("T-1,Body", header="ticket_id,body")
    err = only_error(parse_batch(data, "t.csv"))
    assert (err.row, err.column) == (1, None)
    assert err.message == "missing required columns: customer_email, subject"


def test_duplicate_columns():
    data = csv_bytes("T-1,alice@example.com,Hi,Body,Body2", header=HEADER + ",Body")
    err = only_error(parse_batch(data, "t.csv"))
    assert (err.row, err.column) == (1, None)
    assert err.message == "duplicate column in the header: body"


def test_unknown_columns():
    data = csv_bytes(
        "T-1,alice@example.com,Hi,Body,x,y",
        header="ticket_id,customer_email,subject,body,custmer_name,notes",
    )
    err = only_error(parse_batch(data, "t.csv"))
    assert (err.row, err.column) == (1, None)
    assert "unknown columns: 'custmer_name' (did you mean 'customer_name'?), 'notes'" in err.message


def test_typo_in_required_column_reports_missing_and_unknown():
    data = csv_bytes("T-1,alice@example.com,Hi,Body", header="ticket_id,custmer_email,subject,body")
    result = parse_batch(data, "t.csv")
    assert where(result) == [(1, None), (1, None)]
    assert "missing required column: customer_email" == result.errors[0].message
    assert "'custmer_email' (did you mean 'customer_email'?)" in result.errors[1].message


def test_header_row_number_after_leading_blank_lines():
    data = b"\n\n" + csv_bytes("T-1,alice@example.com,Hi,Body", "T-2,bob@,Hi,Body")
    result = parse_batch(data, "t.csv")
    assert where(result) == [(5, "customer_email")]


def test_ragged_rows():
    data = csv_bytes(
        "T-1,alice@example.com,Hi,Body,extra",
        "T-2,alice@example.com,Hi",
        "T-3,alice@example.com,Hi,Body",
    )
    result = parse_batch(data, "t.csv")
    assert where(result) == [(2, None), (3, None)]
    assert result.errors[0].message == "row has 5 fields but the header has 4 columns"
    assert result.errors[1].message == "row has 3 fields but the header has 4 columns"


def test_stray_quote():
    data = csv_bytes(
        "T-1,alice@example.com,Hi,Body",
        'T-2,alice@example.com,"Hi" there,Body',
        "T-3,bob@,Hi,Body",
    )
    result = parse_batch(data, "t.csv")
    assert where(result) == [(3, None), (4, "customer_email")]
    assert "stray quote" in result.errors[0].message


def test_unclosed_quote():
    data = csv_bytes("T-1,alice@example.com,Hi,Body", 'T-2,alice@example.com,"Hi,Body', "T-3,a@example.com,Hi,Body")
    result = parse_batch(data, "t.csv")
    assert where(result) == [(3, None)]
    assert "never closed" in result.errors[0].message


def test_blank_lines_skipped_but_counted():
    data = csv_bytes("T-1,alice@example.com,Hi,Body", "", "   ", ",,,", "T-2,bob@,Hi,Body")
    result = parse_batch(data, "t.csv")
    assert where(result) == [(6, "customer_email")]
    data = csv_bytes("T-1,alice@example.com,Hi,Body", "", "T-2,bob@example.com,Hi,Body", "")
    assert [r.row for r in parse_batch(data, "t.csv").rows] == [2, 4]


# --------------------------------------------------------------------------
# JSONL structure
# --------------------------------------------------------------------------


def test_jsonl_invalid_json():
    data = jsonl_bytes(ticket(), '{"ticket_id": "T-2", "subject": }', ticket(ticket_id="T-3"))
    result = parse_batch(data, "t.jsonl")
    assert where(result) == [(2, None)]
    assert result.errors[0].message.startswith("line is not valid JSON: Expecting value")


def test_jsonl_blank_lines_counted():
    data = b"\n" + jsonl_bytes(ticket(), "", "   ", ticket(ticket_id="T-2", customer_email="x"))
    result = parse_batch(data, "t.jsonl")
    assert where(result) == [(5, "customer_email")]


@pytest.mark.parametrize("line", ['["T-1"]', '"T-1"', "42", "null", "true"])
def test_jsonl_non_object(line):
    result = parse_batch(jsonl_bytes(ticket(), line), "t.jsonl")
    assert where(result) == [(2, None)]
    assert "must be a JSON object" in result.errors[0].message


def test_jsonl_unknown_key():
    result = parse_batch(jsonl_bytes(ticket(custmer_name="Al", notes="x")), "t.jsonl")
    assert where(result) == [(1, "custmer_name"), (1, "notes")]
    assert "did you mean 'customer_name'?" in result.errors[0].message


@pytest.mark.parametrize(
    "key, value",
    [("subject", 5), ("body", ["a"]), ("customer_email", {"a": 1}), ("priority", True), ("ticket_id", 1.5), ("ticket_id", True)],
)
def test_jsonl_values_must_be_strings(key, value):
    result = parse_batch(jsonl_bytes(ticket(**{key: value})), "t.jsonl")
    assert where(result) == [(1, key)]
    assert "must be a string" in result.errors[0].message


@pytest.mark.parametrize("value", ["{}", ["a"], 3])
def test_jsonl_metadata_must_be_object(value):
    result = parse_batch(jsonl_bytes(ticket(metadata=value)), "t.jsonl")
    assert where(result) == [(1, "metadata")]
    assert "must be a JSON object" in result.errors[0].message


def test_jsonl_missing_required_keys():
    result = parse_batch(jsonl_bytes({"ticket_id": "T-1", "subject": "s"}), "t.jsonl")
    assert where(result) == [(1, "customer_email"), (1, "body")]


def test_jsonl_duplicate_key_and_nan_rejected():
    result = parse_batch(jsonl_bytes('{"ticket_id": "T-1", "ticket_id": "T-2"}'), "t.jsonl")
    assert where(result) == [(1, None)]
    assert "duplicate key 'ticket_id'" in result.errors[0].message
    line = json.dumps(ticket())[:-1] + ', "metadata": {"score": NaN}}'
    result = parse_batch(jsonl_bytes(line), "t.jsonl")
    assert where(result) == [(1, None)]
    assert "NaN" in result.errors[0].message


def test_jsonl_deep_nesting_does_not_raise():
    line = '{"metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"
    result = parse_batch(jsonl_bytes(line), "t.jsonl")
    assert where(result) == [(1, None)]


def test_jsonl_lone_surrogate_rejected():
    line = json.dumps(ticket(subject="\ud800"))
    result = parse_batch(jsonl_bytes(line), "t.jsonl")
    assert where(result) == [(1, "subject")]


# --------------------------------------------------------------------------
# Field rules
# --------------------------------------------------------------------------


@pytest.mark.parametrize("column", REQUIRED_COLUMNS)
def test_required_fields_non_empty_after_strip(column):
    obj = ticket(**{column: "   "})
    result = parse_batch(jsonl_bytes(obj), "t.jsonl")
    assert where(result) == [(1, column)]
    assert result.errors[0].message == f"{column} is required but is empty"
    values = [obj[c] for c in REQUIRED_COLUMNS]
    result = parse_batch(csv_bytes("T-0,a@example.com,s,b", ",".join(values)), "t.csv")
    assert where(result) == [(3, column)]


def _value_of_length(column: str, n: int) -> str:
    if column == "customer_email":
        return "a" * 64 + "@" + ".".join(["b" * 60] * 10)[: n - 65 - 4] + ".com"
    return "T" * n if column == "ticket_id" else "x" * n


@pytest.mark.parametrize("column, limit", sorted(FIELD_LIMITS.items()))
def test_length_limits(column, limit):
    at_limit = _value_of_length(column, limit)
    over = _value_of_length(column, limit + 1) if column != "customer_email" else at_limit + "m"
    assert len(at_limit) == limit
    assert parse_batch(jsonl_bytes(ticket(**{column: at_limit})), "t.jsonl").ok
    result = parse_batch(jsonl_bytes(ticket(**{column: over})), "t.jsonl")
    assert where(result) == [(1, column)]
    assert result.errors[0].message == f"{column} is {limit + 1:,} characters long; the limit is {limit:,}"


def test_length_limit_in_csv():
    result = parse_batch(csv_bytes("T-1,a@example.com," + "s" * 301 + ",b"), "t.csv")
    assert where(result) == [(2, "subject")]
    assert result.errors[0].message == "subject is 301 characters long; the limit is 300"


@pytest.mark.parametrize("email", ["bob@", "bob", "@example.com", "bob@example", "bob smith@example.com", "a@b@example.com"])
def test_invalid_email(email):
    result = parse_batch(csv_bytes("T-1,alice@example.com,Hi,Body", f"T-2,{email},Hi,Body"), "t.csv")
    assert where(result) == [(3, "customer_email")]
    assert result.errors[0].message == f"{email!r} is not a valid email address"
    assert str(result.errors[0]) == f"row 3, column customer_email: {email!r} is not a valid email address"


@pytest.mark.parametrize("email", ["bob@example.com", "Bob.Smith+tag@sub.example.org", "x@xn--exmple-cua.com"])
def test_valid_email(email):
    assert parse_batch(csv_bytes(f"T-1,{email},Hi,Body"), "t.csv").ok


@pytest.mark.parametrize("given, expected", [("", "normal"), ("low", "low"), ("HIGH", "high"), (" Urgent ", "urgent")])
def test_priority_ok(given, expected):
    result = parse_batch(csv_bytes(f"T-1,a@example.com,Hi,Body,{given}", header=HEADER + ",priority"), "t.csv")
    assert result.ok
    assert result.rows[0].priority == expected


def test_priority_invalid():
    result = parse_batch(csv_bytes("T-1,a@example.com,Hi,Body,asap", header=HEADER + ",priority"), "t.csv")
    assert where(result) == [(2, "priority")]
    assert result.errors[0].message == "priority 'asap' is not one of: low, normal, high, urgent"


def test_metadata_csv():
    header = HEADER + ",metadata"
    good = csv_bytes('T-1,a@example.com,Hi,Body,"{""plan"": ""pro""}"', "T-2,a@example.com,Hi,Body,", header=header)
    result = parse_batch(good, "t.csv")
    assert result.ok
    assert [r.metadata for r in result.rows] == [{"plan": "pro"}, {}]

    bad = csv_bytes(
        "T-1,a@example.com,Hi,Body,{plan: pro}",
        'T-2,a@example.com,Hi,Body,"[1, 2]"',
        'T-3,a@example.com,Hi,Body,"""pro"""',
        header=header,
    )
    result = parse_batch(bad, "t.csv")
    assert where(result) == [(2, "metadata"), (3, "metadata"), (4, "metadata")]
    assert result.errors[0].message.startswith("metadata is not valid JSON: Expecting property name")
    assert "must be a JSON object" in result.errors[1].message and "not an array" in result.errors[1].message
    assert "not a string" in result.errors[2].message


@pytest.mark.parametrize("ticket_id", ["T-1001", "1001", "acme.eu:T_1/2#3", "a" * 64])
def test_ticket_id_allowed(ticket_id):
    assert parse_batch(jsonl_bytes(ticket(ticket_id=ticket_id)), "t.jsonl").ok


@pytest.mark.parametrize("ticket_id", ["T 1001", "T-1001!", "Ticket№5", "T,1", "ü-1", "T-1\nT-2"])
def test_ticket_id_disallowed_characters(ticket_id):
    result = parse_batch(jsonl_bytes(ticket(ticket_id=ticket_id)), "t.jsonl")
    assert where(result) == [(1, "ticket_id")]
    assert "not allowed" in result.errors[0].message
    assert ". _ : / # -" in result.errors[0].message


def test_duplicate_ticket_ids():
    data = csv_bytes(
        "T-1,a@example.com,Hi,Body",
        "T-2,a@example.com,Hi,Body",
        "T-1,a@example.com,Hi,Body",
        " T-1 ,a@example.com,Hi,Body",
    )
    result = parse_batch(data, "t.csv")
    assert where(result) == [(4, "ticket_id"), (5, "ticket_id")]
    assert result.errors[0].message == "duplicate ticket_id 'T-1'; it is already used in row 2"


# --------------------------------------------------------------------------
# Error collection
# --------------------------------------------------------------------------


def test_collects_all_errors_and_returns_no_rows():
    data = csv_bytes(
        "T-1,a@example.com,Hi,Body",
        "T-2,bad,Hi,Body",
        "T-3,a@example.com,,",
        "T-4,a@example.com,Hi,Body",
    )
    result = parse_batch(data, "t.csv")
    assert result.rows == []
    assert not result.ok
    assert where(result) == [(3, "customer_email"), (4, "subject"), (4, "body")]


def test_max_errors_truncates_with_summary():
    lines = [f"T-{i},bad,,Body" for i in range(10)]  # 2 errors each = 20
    result = parse_batch(csv_bytes(*lines), "t.csv", max_errors=5)
    assert len(result.errors) == 6
    assert where(result)[:5] == [(2, "customer_email"), (2, "subject"), (3, "customer_email"), (3, "subject"), (4, "customer_email")]
    assert result.errors[-1] == RowError(None, None, "… and 15 more errors")
    result = parse_batch(csv_bytes(*lines), "t.csv")
    assert len(result.errors) == 20


# --------------------------------------------------------------------------
# Robustness and performance
# --------------------------------------------------------------------------


def test_odd_inputs_do_not_raise():
    good = csv_bytes("T-1,a@example.com,Hi,Body")
    assert parse_batch(bytearray(good), "t.csv").ok
    assert parse_batch(memoryview(good), "t.csv").ok
    for data in (b"\x00" * 50, b"\xef\xbb\xbf{", b"{", b'"', b"\r", b"\x1c\x1d\xe2\x80\xa8", b"ticket_id\n\x00"):
        for name in ("t.csv", "t.jsonl", "t"):
            assert_invariant(parse_batch(data, name))


def test_does_not_need_django_settings():
    """The parser (incl. EmailValidator) must work with no Django settings."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from ticketagent.upload.parse import parse_batch\n"
        "r = parse_batch(b'ticket_id,customer_email,subject,body\\nT-1,bob@,s,b\\nT-2,a@example.com,s,b\\n', 't.csv')\n"
        "assert [str(e) for e in r.errors] == [\"row 2, column customer_email: 'bob@' is not a valid email address\"], r.errors\n"
        "from django.conf import settings\n"
        "assert not settings.configured\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_fifty_thousand_rows_parse_in_one_go():
    """The row limit itself is accepted in full (how fast is the bench's business, not a test's)."""
    header = "ticket_id,customer_email,customer_name,subject,body,priority,language,metadata"
    lines = [
        f'T-{i},user{i}@example.com,User {i},Subject {i},"Body line one\nline two {i}",high,en,"{{""n"": {i}}}"'
        for i in range(DEFAULT_MAX_ROWS)
    ]
    data = csv_bytes(*lines, header=header)
    result = parse_batch(data, "big.csv")
    assert result.ok and len(result.rows) == DEFAULT_MAX_ROWS
    assert result.rows[-1].metadata == {"n": DEFAULT_MAX_ROWS - 1}


GOOD_CSV = (EXAMPLES / "tickets.csv").read_bytes() if (EXAMPLES / "tickets.csv").exists() else csv_bytes("T-1,a@example.com,Hi,Body")
GOOD_JSONL = (EXAMPLES / "tickets.jsonl").read_bytes() if (EXAMPLES / "tickets.jsonl").exists() else jsonl_bytes(ticket())
FILENAMES = st.sampled_from(["t.csv", "t.jsonl", "t.ndjson", "t", "t.txt"])


@st.composite
def mutated(draw):
    data = bytearray(draw(st.sampled_from([GOOD_CSV, GOOD_JSONL])))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "dup"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[pos:pos] = draw(st.sampled_from([b'"', b",", b"\n", b"\r\n", b"\x00", b"{", b"\xff", b"\xe2\x80\xa8", b" "]) | st.binary(max_size=8))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 50))]
        elif kind == "truncate":
            del data[pos:]
        elif kind == "dup":
            end = min(len(data), pos + draw(st.integers(1, 400)))
            data[pos:pos] = data[pos:end]
    return bytes(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(st.binary(max_size=300), mutated()), filename=FILENAMES)
def test_never_raises_and_never_partial(data, filename):
    result = parse_batch(data, filename, max_errors=20)
    assert_invariant(result)
    assert len(result.errors) <= 21


# --------------------------------------------------------------------------
# Spreadsheets under a .csv name, over-long file names
# --------------------------------------------------------------------------


def _zip(entries: dict[str, bytes]) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


XLSX = _zip({"[Content_Types].xml": b"<Types/>", "_rels/.rels": b"<Relationships/>",
             "xl/workbook.xml": b"<workbook/>", "xl/worksheets/sheet1.xml": b"<worksheet/>"})
ODS = _zip({"mimetype": b"application/vnd.oasis.opendocument.spreadsheet", "content.xml": b"<office/>"})
XLS = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600


@pytest.mark.parametrize("data, says", [
    (XLSX, "this is an Excel file (.xlsx), not CSV text; export it as CSV"),
    (XLS, "this is an Excel file (.xls), not CSV text; export it as CSV"),
    (ODS, "this is an OpenDocument spreadsheet (.ods), not CSV text; export it as CSV"),
    (_zip({"tickets.csv": b"a,b\n"}), "this is a ZIP archive, not CSV text; unpack it"),
])
@pytest.mark.parametrize("name", ["tickets.csv", "tickets.jsonl", "tickets"])
def test_a_spreadsheet_or_archive_under_any_name_says_what_it_is(data, says, name):
    err = only_error(parse_batch(data, name))
    assert (err.row, err.column) == (None, None)
    assert err.message.startswith(says), err.message
    assert "NUL" not in err.message and "UTF-16" not in err.message


def test_an_excel_file_says_how_to_export_it():
    err = only_error(parse_batch(XLSX, "tickets.csv"))
    assert 'File > Save As > "CSV UTF-8"' in err.message


@pytest.mark.parametrize("length", [256, 1000])
def test_an_over_long_file_name_is_refused_with_its_length(length):
    name = "t" * (length - 4) + ".csv"
    err = only_error(parse_batch(b"ticket_id,customer_email,subject,body\nT-1,a@example.com,s,b\n", name))
    assert err.message == (f"file name is {length:,} characters long; the limit is 255 - rename the file "
                           "and upload it again")


def test_a_255_character_file_name_is_fine():
    name = "t" * 251 + ".csv"
    assert parse_batch(b"ticket_id,customer_email,subject,body\nT-1,a@example.com,s,b\n", name).ok


def test_one_size_figure_for_one_limit():
    """The same bytes get the same words wherever a size is shown (binary megabytes)."""
    from ticketagent.upload.rows import human_size

    assert human_size(10 * 1024 * 1024) == "10.0 MB"
    assert human_size(14_500_000) == "13.8 MB"
    assert human_size(12 * 1024 * 1024) == "12.0 MB"
    assert human_size(2048) == "2.0 KB" and human_size(100) == "100 bytes"
