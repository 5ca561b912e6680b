"""A real HTTP receiver for callback tests: `http.server` in a thread on a free local port.

It records every POST (headers and JSON body) and answers 200, or what `answer(body)` returns (a
status code), and can hold a request until released (`hold(predicate)`): the sender is then stuck
mid-delivery, as a replica killed at that moment would be."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable


class Receiver:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, tls=None):
        """`tls`: an `ssl.SSLContext` (server side) to answer https instead of http."""
        self.received: list[tuple[dict, dict]] = []  # (headers, body)
        self.answer: Callable[[dict], int] = lambda body: 200
        self._hold: Callable[[dict], bool] | None = None
        self.held = threading.Event()      # set when a held request arrived
        self.release = threading.Event()   # set to let held requests answer
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver._lock:
                    receiver.received.append((dict(self.headers), body))
                if receiver._hold is not None and receiver._hold(body):
                    receiver.held.set()
                    receiver.release.wait(60)
                status = receiver.answer(body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_port
        self.url = f"{'https' if tls is not None else 'http'}://{host}:{self.server.server_port}/hook"
        # Loopback is refused to webhooks by default (`dagline.domain.egress`): deliveries to this receiver
        # need this allow-list (DAGLINE_CALLBACK_ALLOWED_NETWORKS), which admits its port and no other.
        self.allowed_networks = f"{host}/32:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def hold(self, predicate: Callable[[dict], bool]) -> None:
        self._hold = predicate

    def bodies(self) -> list[dict]:
        with self._lock:
            return [body for _, body in self.received]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
