"""Serving the app on uvicorn: in the foreground (`dagline api`), or in a thread of its own with its own
event loop (`ApiServer`, used by every operator replica beside kopf and the scheduler loop).

A thread, not kopf's event loop: the API then never waits behind kopf's handlers or watch streams
(nor they behind it), and stopping it is `should_exit` plus a join, independent of how kopf stops.
uvicorn installs no signal handlers outside the main thread, so SIGTERM still reaches kopf.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn

log = logging.getLogger(__name__)
GRACE_S = 5  # at a stop, requests still open after this long (the web UI's event streams) are cancelled


def serve(app, *, host: str, port: int) -> None:
    """Run until SIGINT or SIGTERM (uvicorn's own handling: finish the requests in flight, then exit)."""
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, server_header=False,
                timeout_graceful_shutdown=GRACE_S)


class ApiServer:
    """uvicorn in a daemon thread. `port=0` picks a free port (`self.port` says which)."""

    def __init__(self, app, *, host: str = "0.0.0.0", port: int = 8793):
        self.host = host
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))  # bound here, so a taken port is an error at start, not in the thread
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False, lifespan="off",
                                timeout_graceful_shutdown=GRACE_S)
        self.app = app
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name="dagline-api", daemon=True)

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        except BaseException:  # noqa: BLE001 - logged; the replica's other parts go on
            log.exception("the API server stopped")

    def start(self, timeout: float = 10.0) -> ApiServer:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.server.started:
            raise RuntimeError(f"the API server did not start on {self.host}:{self.port}")
        log.info("API on http://%s:%s/api/v1/signals", self.host, self.port)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        live = getattr(getattr(self.app, "state", None), "dagline_live", None)
        if live is not None:
            live.close()  # ends the web UI's event streams, so the stop does not wait for them
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()
