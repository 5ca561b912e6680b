"""The HTTP endpoints of a replica: `/healthz` and `/readyz` on the health port, `/metrics` on the metrics port.

- `/healthz` (liveness): 200 while kopf's event loop turns, the scheduler loop and status sync make
  progress, and the watches bring what the API lists (`k8s.listing`: a watch that cannot be renewed is
  named with the objects it has not brought); 503 with the reasons otherwise, so Kubernetes restarts a
  wedged replica.
- `/readyz` (readiness): 200 while the database answers `SELECT 1`; 503 with the error otherwise.
- `/metrics`: Prometheus text (`dagline.k8s.metrics`: every `dagline.metrics` figure plus the operator's own).
Each server runs in a thread of its own (`ThreadingHTTPServer`); when both ports are the same, one
server answers all three paths.
"""

from __future__ import annotations

import http.server
import logging
import threading

from dagline.k8s import metrics

log = logging.getLogger(__name__)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _handler(routes):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the name http.server calls
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                code, content_type, text = 404, "text/plain", f"no such path; try {', '.join(sorted(routes))}\n"
            else:
                try:
                    code, content_type, text = route()
                except Exception as exc:  # noqa: BLE001 - an answer, not a crashed server thread
                    code, content_type, text = 500, "text/plain", f"{type(exc).__name__}: {exc}\n"
            body = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", f"{content_type}; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):  # probes every few seconds: not worth a log line each
            pass

    return Handler


class ProbeServers:
    def __init__(self, runtime):
        self.runtime = runtime
        self._servers: list[_Server] = []
        self.health_port = 0
        self.metrics_port = 0

    def healthz(self):
        problems = self.runtime.health.problems()
        if problems:
            return 503, "text/plain", "not live: " + "; ".join(problems) + "\n"
        return 200, "text/plain", "ok\n"

    def readyz(self):
        try:
            self.runtime.db.check_reachable()
        except Exception as exc:  # noqa: BLE001 - the reason is the answer
            return 503, "text/plain", f"not ready: the database does not answer: {exc}\n"
        return 200, "text/plain", "ok\n"

    def metrics(self):
        return 200, "text/plain; version=0.0.4", metrics.render(self.runtime)

    def start(self) -> ProbeServers:
        settings = self.runtime.settings
        health = {"/healthz": self.healthz, "/readyz": self.readyz}
        if settings.health_port == settings.metrics_port and settings.health_port != 0:
            server = self._serve(settings.health_port, {**health, "/metrics": self.metrics})
            self.health_port = self.metrics_port = server.server_address[1]
        else:
            self.health_port = self._serve(settings.health_port, health).server_address[1]
            self.metrics_port = self._serve(settings.metrics_port, {"/metrics": self.metrics}).server_address[1]
        return self

    def _serve(self, port: int, routes) -> _Server:
        server = _Server(("0.0.0.0", port), _handler(routes))
        self._servers.append(server)
        threading.Thread(target=server.serve_forever, name=f"dagline-http-{server.server_address[1]}",
                         daemon=True).start()
        return server

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers = []
