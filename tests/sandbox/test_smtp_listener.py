"""The sandbox's SMTP listener (aiosmtpd): what it keeps of the mail server the tests and docs rely on.

A real sandbox subprocess, spoken to with smtplib and a raw socket.
"""

from __future__ import annotations

import signal
import smtplib
import socket

import pytest

from .conftest import launch, stop


@pytest.fixture(scope="module")
def _running(tmp_path_factory):
    sb = launch(tmp_path_factory.mktemp("smtp"))
    yield sb.proc, sb.client, sb.smtp_port
    assert stop(sb) == 0


@pytest.fixture
def sb(_running):
    _running[1].reset()
    return _running


class Session:
    """One raw SMTP session: send a line, read the whole (multi-line) reply."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.file = self.sock.makefile("rb")
        self.greeting = self.file.readline()

    def reply(self) -> bytes:
        lines = []
        while True:
            line = self.file.readline()
            lines.append(line)
            if line[3:4] != b"-":
                return b"".join(lines)

    def send(self, line: bytes) -> bytes:
        self.sock.sendall(line + b"\r\n")
        return self.reply()

    def close(self):
        self.file.close()
        self.sock.close()


def test_greeting_and_ehlo_advertise_no_tls_and_no_auth(sb):
    _, _, port = sb
    session = Session(port)
    try:
        assert session.greeting == b"220 sandbox.helpdesk.test ESMTP TicketSandbox ready\r\n"
        ehlo = session.send(b"EHLO client.test")
        assert ehlo.startswith(b"250-sandbox.helpdesk.test\r\n")
        for extension in (b"SIZE 33554432", b"8BITMIME", b"SMTPUTF8"):
            assert extension in ehlo
        assert b"STARTTLS" not in ehlo and b"AUTH" not in ehlo
        assert session.send(b"QUIT").startswith(b"221")
    finally:
        session.close()


def test_replayed_message_id_is_accepted_and_names_the_first_delivery(sb):
    _, client, port = sb
    message = b"Message-ID: <again@ticketagent>\r\nSubject: s\r\n\r\nhello\r\n"
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
        smtp.sendmail("support@example.com", ["c@example.org"], message)
        first = client.lookup("again")["id"]
        smtp.mail("support@example.com")
        smtp.rcpt("c@example.org")
        code, answer = smtp.data(message)
    assert code == 250
    assert answer.decode() == f"2.0.0 OK duplicate of {first}, not recorded"
    assert client.lookup("again")["count"] == 1


def test_long_lines_are_recorded_not_refused(sb):
    _, client, port = sb
    line = "x" * 5000
    session = Session(port)
    try:
        session.send(b"EHLO client.test")
        assert session.send(b"MAIL FROM:<support@example.com>").startswith(b"250")
        assert session.send(b"RCPT TO:<c@example.org>").startswith(b"250")
        assert session.send(b"DATA").startswith(b"354")
        answer = session.send(b"Message-ID: <long@ticketagent>\r\n\r\n" + line.encode() + b"\r\n.")
        assert answer.startswith(b"250")
    finally:
        session.close()
    assert client.lookup("long")["deliveries"][0]["payload"]["body"] == line + "\n"


def test_null_reverse_path_is_an_empty_envelope_sender(sb):
    _, client, port = sb
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
        smtp.sendmail("", ["c@example.org"], b"Message-ID: <bounce@ticketagent>\r\n\r\nbounced\r\n")
    payload = client.lookup("bounce")["deliveries"][0]["payload"]
    assert payload["envelope_from"] == "" and payload["to"] == ["c@example.org"]


def test_drop_fault_on_a_replay_still_records_nothing_new(sb):
    _, client, port = sb
    message = b"Message-ID: <drop-replay@ticketagent>\r\n\r\nhi\r\n"
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
        smtp.sendmail("support@example.com", ["c@example.org"], message)
    client.set_faults(drop_next={"*": 1})
    with pytest.raises((smtplib.SMTPServerDisconnected, ConnectionResetError)):
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
            smtp.sendmail("support@example.com", ["c@example.org"], message)
    counts = client.counts()
    assert counts["by_key"] == {"drop-replay": 1}
    assert counts["drops"] == 1 and counts["replays"] == 1


def test_sigterm_with_an_open_smtp_session_exits_cleanly(tmp_path):
    sb = launch(tmp_path)
    proc = sb.proc
    session = Session(sb.smtp_port)
    try:
        session.send(b"EHLO client.test")
        proc.signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        session.close()
        stop(sb)
    assert "Traceback" not in proc.log_path.read_text()
