"""Sandbox helpdesk tests: a real subprocess, real HTTP and SMTP.

Run with ``.venv/bin/python -m pytest -p no:django tests/sandbox``.
"""

from __future__ import annotations

import http.client
import json
import signal
import smtplib
import threading
import time
from email.message import EmailMessage

import pytest

from .conftest import launch, stop

# ----------------------------------------------------------------------------
# fixtures / helpers
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _honor(tmp_path_factory):
    sb = launch(tmp_path_factory.mktemp("honor"))
    yield sb
    assert stop(sb) == 0


@pytest.fixture(scope="module")
def _ignore(tmp_path_factory):
    sb = launch(tmp_path_factory.mktemp("ignore"), ignore_keys=True)
    yield sb
    assert stop(sb) == 0


@pytest.fixture
def sb(_honor):
    _honor.client.reset()
    return _honor


@pytest.fixture
def sbi(_ignore):
    _ignore.client.reset()
    return _ignore


def raw(sb, method, path, body=None, headers=None, timeout=10):
    """One request on a fresh http.client connection -> (status, json)."""
    conn = http.client.HTTPConnection("127.0.0.1", sb.port, timeout=timeout)
    try:
        data = (
            body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        )
        conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        payload = resp.read()
        ctype = resp.getheader("Content-Type", "")
        return resp.status, (
            json.loads(payload) if "json" in ctype else payload.decode()
        )
    finally:
        conn.close()


def draft(sb, key=None, ticket="T-1", subject="Hello", body="Draft body"):
    return sb.client.write("draft", ticket, {"subject": subject, "body": body}, key=key)


def make_email(key=None, subject="Your ticket", body="Hi there,\nwe are on it.\n"):
    msg = EmailMessage()
    msg["From"] = "support@example.com"
    msg["To"] = "customer@example.org"
    msg["Subject"] = subject
    if key is not None:
        msg["Message-ID"] = f"<{key}@ticketagent.test>"
    msg.set_content(body)
    return msg


def send_email(sb, msg):
    with smtplib.SMTP("127.0.0.1", sb.smtp_port, timeout=10) as smtp:
        smtp.send_message(msg)


# ----------------------------------------------------------------------------
# HTTP write endpoints
# ----------------------------------------------------------------------------


def test_every_write_endpoint_records_one_delivery(sb):
    calls = [
        ("draft", {"subject": "S", "body": "B"}),
        ("notify", {"to": "alice@example.org", "subject": "S", "body": "B"}),
        ("status", {"status": "pending"}),
        ("close", {"reason": "done"}),
        ("close", {}),
        ("escalate", {"note": "vip"}),
        ("escalate", None),
    ]
    ids = []
    for i, (endpoint, body) in enumerate(calls):
        status, data = sb.client.write(endpoint, "T-7", body, key=f"k-{i}")
        assert status == 201, data
        assert data["replayed"] is False and data["key"] == f"k-{i}"
        assert data["id"].startswith("dlv-")
        ids.append(data["id"])
    assert len(set(ids)) == len(ids)
    counts = sb.client.counts()
    assert counts["deliveries"] == len(calls)
    assert counts["by_endpoint"] == {
        "draft": 1,
        "notify": 1,
        "status": 1,
        "close": 2,
        "escalate": 2,
        "email": 0,
    }
    rows = sb.client.deliveries()
    assert [r["id"] for r in rows] == ids
    assert rows[0]["method"] == "PUT" and rows[1]["method"] == "POST"
    assert rows[1]["payload"]["to"] == "alice@example.org"
    assert all(r["ticket"] == "T-7" for r in rows)


def test_ticket_ids_are_url_decoded(sb):
    ticket = "acme/T-9#2:x.y_z"
    status, data = sb.client.write("status", ticket, {"status": "on_hold"}, key="tk")
    assert status == 201, data
    assert sb.client.lookup("tk")["deliveries"][0]["ticket"] == ticket


def test_honor_mode_sequential_replay(sb):
    s1, d1 = draft(sb, key="same")
    s2, d2 = draft(sb, key="same")
    s3, d3 = draft(sb, key="same", subject="different payload, same key")
    assert (s1, s2, s3) == (201, 200, 200)
    assert d1 == {"id": d1["id"], "key": "same", "replayed": False}
    assert d2 == d3 == {"id": d1["id"], "key": "same", "replayed": True}
    # requests without a key are never deduped
    assert draft(sb)[0] == 201
    assert draft(sb)[0] == 201
    counts = sb.client.counts()
    assert counts["deliveries"] == 3
    assert counts["by_key"] == {"same": 1}
    assert counts["duplicates"] == 0
    assert counts["requests"] == 5
    assert counts["replays"] == 2
    assert counts["honor_keys"] is True


def test_honor_mode_concurrent_same_key_records_once(sb):
    n = 20
    barrier = threading.Barrier(n)
    results, errors = [], []

    def worker():
        try:
            barrier.wait(timeout=5)
            results.append(draft(sb, key="race"))
        except Exception as exc:  # noqa: BLE001  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not errors
    statuses = sorted(s for s, _ in results)
    assert statuses == [200] * (n - 1) + [201]
    assert len({d["id"] for _, d in results}) == 1
    counts = sb.client.counts()
    assert counts["deliveries"] == 1 and counts["by_key"] == {"race": 1}
    assert counts["requests"] == n


def test_ignore_mode_records_every_request(sbi):
    assert sbi.client.counts()["honor_keys"] is False
    for _ in range(3):
        status, data = draft(sbi, key="dup")
        assert status == 201 and data["replayed"] is False
    threads = [
        threading.Thread(target=draft, args=(sbi,), kwargs={"key": "dup2"})
        for _ in range(10)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    counts = sbi.client.counts()
    assert counts["deliveries"] == 13
    assert counts["by_key"] == {"dup": 3, "dup2": 10}
    assert counts["duplicates"] == 2
    found = sbi.client.lookup("dup")
    assert found["found"] is True and found["count"] == 3
    assert found["id"] == found["deliveries"][0]["id"]
    assert len(sbi.client.deliveries(key="dup2")) == 10


def test_honor_keys_switchable_via_faults(sb):
    sb.client.set_faults(honor_keys=False)
    draft(sb, key="k")
    draft(sb, key="k")
    assert sb.client.counts()["by_key"] == {"k": 2}
    sb.client.clear_faults()  # back to the startup mode (honor)
    assert draft(sb, key="k")[0] == 200
    assert sb.client.counts()["deliveries"] == 2


@pytest.mark.parametrize(
    "endpoint, body",
    [
        ("draft", b"{not json"),
        ("draft", b""),
        ("draft", b"[1, 2]"),
        ("draft", {"subject": "no body"}),
        ("draft", {"subject": 1, "body": "x"}),
        ("notify", {"to": "not-an-email", "subject": "s", "body": "b"}),
        ("notify", {"subject": "s", "body": "b"}),
        ("status", {"status": "reopened"}),
        ("status", {}),
        ("close", {"reason": 42}),
        ("escalate", {"note": ["x"]}),
    ],
)
def test_validation_failure_is_422_and_records_nothing(sb, endpoint, body):
    method = "PUT" if endpoint == "draft" else "POST"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, resp = raw(
        sb, method, f"/api/tickets/T-1/{endpoint}", data, {"Idempotency-Key": "v"}
    )
    assert status == 422 and resp["error"]
    counts = sb.client.counts()
    assert counts["deliveries"] == 0
    assert counts["requests"] == 1 and counts["rejected"] == 1
    assert sb.client.lookup("v") is None


def test_bad_ticket_and_wrong_method(sb):
    status, _ = raw(sb, "POST", "/api/tickets/bad%20ticket/close", {})
    assert status == 422
    status, _ = raw(sb, "POST", "/api/tickets/T-1/draft", {"subject": "s", "body": "b"})
    assert status == 405
    assert raw(sb, "GET", "/api/nope")[0] == 404
    assert sb.client.counts()["deliveries"] == 0


# ----------------------------------------------------------------------------
# faults
# ----------------------------------------------------------------------------


def test_error_next_answers_503_and_records_nothing(sb):
    faults = sb.client.set_faults(error_next={"draft": 2})
    assert faults["error_next"] == {"draft": 2}
    assert draft(sb, key="e")[0] == 503
    # other endpoints are unaffected
    assert sb.client.write("status", "T-1", {"status": "open"}, key="s")[0] == 201
    assert draft(sb, key="e")[0] == 503
    assert sb.client.lookup("e") is None
    status, data = draft(sb, key="e")
    assert status == 201 and data["replayed"] is False
    counts = sb.client.counts()
    assert counts["deliveries"] == 2 and counts["errors_injected"] == 2
    assert counts["requests"] == 4
    assert sb.client.faults()["error_next"] == {}


def test_error_rate_and_custom_status(sb):
    sb.client.set_faults(error_rate={"*": 1.0}, error_status=500)
    assert draft(sb, key="r")[0] == 500
    assert sb.client.write("escalate", "T-1", {}, key="r2")[0] == 500
    assert sb.client.counts()["deliveries"] == 0
    sb.client.set_faults(error_rate={"*": 0})
    assert draft(sb, key="r")[0] == 201


def test_drop_next_records_then_resets_connection(sb):
    sb.client.set_faults(drop_next={"notify": 1})
    body = {"to": "bob@example.org", "subject": "Update", "body": "We fixed it."}
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        raw(sb, "POST", "/api/tickets/T-3/notify", body, {"Idempotency-Key": "drop-1"})
    found = sb.client.lookup("drop-1")
    assert found["found"] is True and found["count"] == 1
    assert found["deliveries"][0]["payload"] == body
    # the crash-safe retry: same key -> replayed, still one delivery
    status, data = raw(
        sb, "POST", "/api/tickets/T-3/notify", body, {"Idempotency-Key": "drop-1"}
    )
    assert status == 200 and data == {
        "id": found["id"],
        "key": "drop-1",
        "replayed": True,
    }
    counts = sb.client.counts()
    assert counts["deliveries"] == 1 and counts["drops"] == 1


def test_drop_in_ignore_mode_duplicates_on_retry(sbi):
    sbi.client.set_faults(drop_next={"close": 1})
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        raw(
            sbi,
            "POST",
            "/api/tickets/T-4/close",
            {"reason": "x"},
            {"Idempotency-Key": "c"},
        )
    assert (
        raw(
            sbi,
            "POST",
            "/api/tickets/T-4/close",
            {"reason": "x"},
            {"Idempotency-Key": "c"},
        )[0]
        == 201
    )
    assert sbi.client.counts()["duplicates"] == 1


def test_latency_is_applied_to_writes_only(sb):
    sb.client.set_faults(latency_ms=300)
    t0 = time.monotonic()
    assert draft(sb, key="slow")[0] == 201
    assert time.monotonic() - t0 >= 0.3
    t0 = time.monotonic()
    sb.client.counts()
    assert time.monotonic() - t0 < 0.25


def test_a_write_waiting_out_its_latency_across_a_reset_is_not_recorded(sb):
    """A test that ends with writes in flight (the helpdesk holding them) must not leave them to land in the
    next test's sandbox: what began before a reset is answered 503 (SMTP: 451) and recorded nowhere."""
    sb.client.set_faults(latency_ms=1500)
    answers = {}

    def write():
        answers["http"] = draft(sb, key="before-reset")[0]

    def mail():
        try:
            send_email(sb, make_email(key="mail-before-reset"))
            answers["smtp"] = 250
        except smtplib.SMTPResponseException as exc:
            answers["smtp"] = exc.smtp_code

    threads = [threading.Thread(target=write), threading.Thread(target=mail)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while sb.client.counts()["requests"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    sb.client.reset()
    for thread in threads:
        thread.join(timeout=10)
    assert answers == {"http": 503, "smtp": 451}
    assert sb.client.deliveries() == []
    assert draft(sb, key="after-reset")[0] == 201  # the latency fault went with the reset; writes land again


def test_read_faults_answer_an_error_drop_or_stall_the_next_reads_in_turn(sb):
    assert draft(sb, key="rk")[0] == 201
    faults = sb.client.set_faults(read_error_next=1, read_drop_next=1, read_stall_next=1)
    assert (faults["read_error_next"], faults["read_drop_next"], faults["read_stall_next"]) == (1, 1, 1)
    status, data = raw(sb, "GET", "/api/lookup/rk")
    assert status == 503 and "injected" in data["error"]
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        raw(sb, "GET", "/api/lookup/rk")
    with pytest.raises(TimeoutError):  # nothing comes back: the client gives up
        raw(sb, "GET", "/api/lookup/rk", timeout=0.5)
    assert raw(sb, "GET", "/api/lookup/rk")[0] == 200  # the faults are spent
    assert draft(sb, key="rk2")[0] == 201, "writes are not read faults' to fault"
    counts = sb.client.counts()
    assert (counts["errors_injected"], counts["drops"], counts["stalls"]) == (1, 1, 1)
    assert counts["requests"] == 2, "reads are not counted as write requests"


def test_read_error_rate_faults_every_read_until_cleared(sb):
    sb.client.set_faults(read_error_rate=1.0, error_status=500)
    assert [raw(sb, "GET", f"/api/lookup/x{i}")[0] for i in range(3)] == [500, 500, 500]
    assert sb.client.health() and sb.client.counts()["deliveries"] == 0, "the controls never fault"
    sb.client.set_faults(read_error_rate=0)
    assert raw(sb, "GET", "/api/lookup/x")[0] == 404
    for bad in ({"read_error_rate": 2}, {"read_drop_next": -1}, {"read_stall_next": "1"}):
        status, resp = raw(sb, "POST", "/_sandbox/faults", bad)
        assert status == 422 and resp["error"], bad


def test_faults_merge_clear_and_validate(sb):
    sb.client.set_faults(error_rate={"draft": 0.5}, seed=7)
    faults = sb.client.set_faults(drop_rate={"email": 0.25}, error_rate={"notify": 0.1})
    assert faults["error_rate"] == {"draft": 0.5, "notify": 0.1}
    assert faults["drop_rate"] == {"email": 0.25}
    assert faults["seed"] == 7
    for bad in (
        {"error_rate": {"bogus": 1}},
        {"error_rate": {"draft": 2}},
        {"latency_ms": -1},
        {"nope": 1},
        {"honor_keys": "yes"},
    ):
        status, resp = raw(sb, "POST", "/_sandbox/faults", bad)
        assert status == 422 and resp["error"], bad
    cleared = sb.client.clear_faults()
    assert cleared["error_rate"] == {} and cleared["drop_rate"] == {}
    assert cleared["honor_keys"] is True and cleared["latency_ms"] == 0


def test_keep_alive_connection_reuse(sb):
    conn = http.client.HTTPConnection("127.0.0.1", sb.port, timeout=5)
    try:
        for i in range(3):
            conn.request(
                "PUT",
                "/api/tickets/T-1/draft",
                body=json.dumps({"subject": "s", "body": str(i)}),
                headers={"Idempotency-Key": f"ka-{i}"},
            )
            resp = conn.getresponse()
            assert resp.status == 201
            resp.read()
    finally:
        conn.close()
    assert sb.client.counts()["deliveries"] == 3


# ----------------------------------------------------------------------------
# lookup / counts / html / reset
# ----------------------------------------------------------------------------


def test_lookup_unknown_key_is_404(sb):
    status, data = raw(sb, "GET", "/api/lookup/does-not-exist")
    assert status == 404 and data == {"found": False}


def test_counts_shape_and_reset(sb):
    draft(sb, key="a")
    sb.client.write("close", "T-2", {}, key="b")
    raw(sb, "POST", "/api/tickets/T-2/status", {"status": "bad"})
    counts = sb.client.counts()
    for field in (
        "deliveries",
        "by_endpoint",
        "by_key",
        "duplicates",
        "requests",
        "honor_keys",
    ):
        assert field in counts
    assert counts["deliveries"] == 2
    assert counts["by_key"] == {"a": 1, "b": 1}
    assert counts["requests"] == 3
    sb.client.reset()
    counts = sb.client.counts()
    assert (
        counts["deliveries"] == 0 and counts["requests"] == 0 and counts["by_key"] == {}
    )
    # ids are never reused after reset
    assert draft(sb, key="a")[1]["id"] not in ("dlv-1", "dlv-2")


def test_html_page_escapes_everything(sb):
    draft(sb, key="<b>k</b>", subject="<script>alert(1)</script>", body="a & b")
    status, page = raw(sb, "GET", "/")
    assert status == 200
    assert "<script>" not in page and "<b>k</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;k&lt;/b&gt;" in page
    assert "honor keys" in page


# ----------------------------------------------------------------------------
# SMTP
# ----------------------------------------------------------------------------


def test_smtp_message_is_a_delivery_found_by_lookup(sb):
    body = "Hello,\n.leading dot line\n..two dots\nBye\n"
    send_email(sb, make_email("mail-1", body=body))
    found = sb.client.lookup("mail-1")
    assert found["found"] is True and found["count"] == 1
    d = found["deliveries"][0]
    assert d["endpoint"] == "email" and d["method"] == "SMTP" and d["key"] == "mail-1"
    p = d["payload"]
    assert p["message_id"] == "<mail-1@ticketagent.test>"
    assert p["from"] == "support@example.com"
    assert p["to"] == ["customer@example.org"]
    assert p["subject"] == "Your ticket"
    assert p["body"] == body  # dot-unstuffing preserved the leading dots
    assert sb.client.counts()["by_endpoint"]["email"] == 1


def test_smtp_honor_mode_dedupes_message_id(sb):
    send_email(sb, make_email("mail-2"))
    send_email(sb, make_email("mail-2"))  # accepted (250) but not recorded
    send_email(sb, make_email(None))
    send_email(sb, make_email(None))  # no Message-ID -> no key -> recorded each time
    counts = sb.client.counts()
    assert counts["by_key"] == {"mail-2": 1}
    assert counts["by_endpoint"]["email"] == 3


def test_smtp_ignore_mode_records_duplicates(sbi):
    send_email(sbi, make_email("mail-3"))
    send_email(sbi, make_email("mail-3"))
    assert sbi.client.lookup("mail-3")["count"] == 2


def test_smtp_session_commands(sb):
    with smtplib.SMTP("127.0.0.1", sb.smtp_port, timeout=10) as smtp:
        code, _ = smtp.ehlo("client.test")
        assert code == 250
        assert not smtp.has_extn("starttls") and not smtp.has_extn("auth")
        assert smtp.noop()[0] == 250
        assert smtp.rcpt("x@example.org")[0] == 503  # RCPT before MAIL
        assert smtp.mail("a@example.com")[0] == 250
        assert smtp.rset()[0] == 250
        refused = smtp.sendmail(
            "a@example.com",
            ["b@example.org", "c@example.org"],
            make_email("mail-4").as_bytes(),
        )
        assert refused == {}
    d = sb.client.lookup("mail-4")["deliveries"][0]
    assert d["payload"]["to"] == ["b@example.org", "c@example.org"]
    assert d["payload"]["envelope_from"] == "a@example.com"


def test_smtp_error_fault_answers_451(sb):
    sb.client.set_faults(error_next={"email": 1})
    with pytest.raises(smtplib.SMTPDataError) as exc_info:
        send_email(sb, make_email("mail-5"))
    assert exc_info.value.smtp_code == 451
    assert sb.client.lookup("mail-5") is None
    send_email(sb, make_email("mail-5"))
    assert sb.client.lookup("mail-5")["count"] == 1


def test_smtp_drop_fault_records_then_disconnects(sb):
    sb.client.set_faults(drop_next={"email": 1})
    with pytest.raises((smtplib.SMTPServerDisconnected, ConnectionResetError)):
        send_email(sb, make_email("mail-6"))
    assert sb.client.lookup("mail-6")["count"] == 1
    send_email(sb, make_email("mail-6"))  # retry: honored, still one
    assert sb.client.lookup("mail-6")["count"] == 1


# ----------------------------------------------------------------------------
# process lifecycle
# ----------------------------------------------------------------------------


def test_sigterm_exits_cleanly_and_data_is_durable(tmp_path):
    db = tmp_path / "durable.sqlite3"
    first = launch(tmp_path, db=db)
    assert draft(first, key="persist")[0] == 201
    first.proc.signal(signal.SIGTERM)
    assert first.proc.wait(timeout=10) == 0

    second = launch(tmp_path, db=db)
    try:
        assert second.client.lookup("persist")["count"] == 1
        assert draft(second, key="persist")[0] == 200
    finally:
        second.proc.signal(signal.SIGINT)
        assert second.proc.wait(timeout=10) == 0
        stop(second)


def test_busy_port_fails_fast(sb):
    import subprocess
    import sys

    from ops.processes import ROOT

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandbox",
            "--port",
            str(sb.port),
            "--smtp-port",
            "0",
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert "cannot listen" in proc.stderr


DJANGO_SEND = r"""
import sys
import django
from django.conf import settings
settings.configure(EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
                   EMAIL_HOST="127.0.0.1", EMAIL_PORT=int(sys.argv[1]), EMAIL_TIMEOUT=5)
django.setup()
from django.core.mail import EmailMessage, get_connection
with get_connection() as conn:
    for _ in range(2):
        EmailMessage("S\u00fcbject", "Body\n.dot\n", "support@example.com", ["c@example.org"],
                     headers={"Message-ID": "<dj-key@ticketagent>", "X-Ticket": "T-42"},
                     connection=conn).send()
"""


def test_django_smtp_backend_compatible(sb):
    pytest.importorskip("django")
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", DJANGO_SEND, str(sb.smtp_port)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    found = sb.client.lookup("dj-key")
    assert found["count"] == 1  # second send with the same Message-ID was deduped
    d = found["deliveries"][0]
    assert d["ticket"] == "T-42"
    assert d["payload"]["subject"] == "S\u00fcbject"
    assert d["payload"]["body"] == "Body\n.dot\n"


def test_the_sandbox_generates_its_identity_once_and_keeps_it_with_its_data(tmp_path):
    """A helpdesk's identity (GET /api/helpdesk): the same after a restart and a reset, another for other data."""
    from sandbox.store import Store

    first = Store(str(tmp_path / "a.sqlite3"))
    ident = first.instance_id
    first.reset()
    assert first.instance_id == ident
    first.close()
    again = Store(str(tmp_path / "a.sqlite3"))
    assert again.instance_id == ident and ident.startswith("sandbox-")
    other = Store(str(tmp_path / "b.sqlite3"))
    assert other.instance_id != ident
    again.close()
    other.close()
