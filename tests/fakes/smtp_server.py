"""A scripted SMTP server for answers the sandbox helpdesk never gives
(standard library only; a daemon thread of the pytest process).

    server = ScriptedSMTPServer(mode="refuse_recipient").start()
    settings.EMAIL_PORT = server.port
    server.messages   # the DATA of every accepted message
    server.stop()

Modes:
    accept             every command succeeds
    refuse_recipient   RCPT TO is answered 550: the message is not accepted
    overlong_quit      the message is accepted, then QUIT is answered with a
                       line longer than smtplib reads, which it reports as an
                       error while closing
"""

from __future__ import annotations

import socketserver
import threading


class _Handler(socketserver.StreamRequestHandler):
    def reply(self, line: str) -> None:
        self.wfile.write(line.encode() + b"\r\n")
        self.wfile.flush()

    def handle(self):
        server: ScriptedSMTPServer = self.server.owner
        self.reply("220 scripted.test ESMTP")
        while line := self.rfile.readline():
            verb = line.decode(errors="replace").strip().split(" ", 1)[0].upper()
            if verb == "DATA":
                self.reply("354 go ahead")
                data = b"".join(iter(self.rfile.readline, b".\r\n"))
                server.messages.append(data)
                self.reply("250 queued")
            elif verb == "RCPT" and server.mode == "refuse_recipient":
                self.reply("550 5.1.1 no such user")
            elif verb == "QUIT":
                self.reply("221 " + "x" * 9000 if server.mode == "overlong_quit" else "221 bye")
                return
            else:
                self.reply("250 ok")


class ScriptedSMTPServer:
    def __init__(self, mode: str = "accept"):
        self.mode = mode
        self.messages: list[bytes] = []
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.owner = self
        self.port = self._server.server_address[1]

    def start(self) -> ScriptedSMTPServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
