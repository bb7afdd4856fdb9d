"""A recording proxy in front of a real model server (standard library only), for tests of the real local model.

    proxy = ModelProxy("http://127.0.0.1:8080").start()   # its own base_url ends in /v1
    proxy.drop = {"response_format"}                       # forward requests without these keys
    proxy.set = {"temperature": 0}                         # ... and with these values
    proxy.forge = [message]                                # answer the next turn(s) with these messages
    proxy.exchanges                                        # [(request sent, status, response body)]
    proxy.stop()

It forwards `POST /v1/chat/completions` unchanged, or without the keys in
`drop` (and with the values in `set`): dropping `response_format` makes the real server behave like one that ignores structured
outputs (llama-cpp-python's server takes only its own `json_object` form), so
the real model answers in free text. `forge` holds assistant messages (a
malformed tool call, say) that replace the real answer's message, one per
turn, in order, before the real model answers on its own again; the request
still reaches the real server, so its answer keeps the server's own shape.
Everything else answers 404.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: ModelProxy


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802 - http.server's name
        proxy = self.server.proxy
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._answer(404, b'{"error": {"message": "not found"}}')
        sent = {**{k: v for k, v in body.items() if k not in proxy.drop}, **proxy.set}
        request = urllib.request.Request(proxy.upstream + "/v1/chat/completions", data=json.dumps(sent).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status, data = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, data = exc.code, exc.read()
        try:
            answer = json.loads(data)
        except ValueError:
            answer = data.decode(errors="replace")
        with proxy.lock:
            if proxy.forge and status == 200 and isinstance(answer, dict) and answer.get("choices"):
                answer["choices"][0]["message"] = proxy.forge.pop(0)
                answer["choices"][0]["finish_reason"] = "tool_calls"
                data = json.dumps(answer).encode()
            proxy.exchanges.append((sent, status, answer))
        self._answer(status, data)

    def _answer(self, status: int, data: bytes):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ModelProxy:
    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.drop: set[str] = set()
        self.set: dict = {}
        self.forge: list[dict] = []
        self.exchanges: list[tuple[dict, int, object]] = []
        self.lock = threading.Lock()
        self._server: _Server | None = None

    def start(self) -> ModelProxy:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        threading.Thread(target=self._server.serve_forever, name="model-proxy", daemon=True).start()
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
