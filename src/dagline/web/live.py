"""Live pages: server-sent events that say "something changed", so open pages refresh their live
parts without a reload.

One `LiveFeed` per app, started by the first page that listens: a thread that learns of changes from
the database itself, never from this process, so a change made through any replica (or by any
scheduler, or the command line) reaches the pages every replica serves:
- PostgreSQL: `db.notify.Listener` (LISTEN on the channel every state change NOTIFYs at commit); a
  reconnection counts as a change, since notifications may have been missed meanwhile;
- SQLite (no NOTIFY): it polls the newest event id and signal seq once a second.
Each stream (`GET /ui/events`) gets `event: change` with a counter after every change (bursts are
coalesced: the browser refetches at most a few times a second), a comment every 15 s to keep proxies
from closing it, and ends when the server stops. A page carries the counter it was rendered at, and
its stream's first event (`hello`) the counter then: if they differ (a change committed between
rendering and listening), the page refreshes once; so does a browser that reconnects (perhaps to
another replica), for what it may have missed.

Streams are capped (ADR 62): at most `max_streams` open at once in this process, `max_per_client` per
client (its sign-in token, else its address); `admit` refuses one more, and the page answers 429 with
`Retry-After` (the browser's page still works; it only stops updating live).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

from dagline.db.notify import Listener
from dagline.store.pages import change_marker

log = logging.getLogger(__name__)

PING_EVERY_S = 15.0
COALESCE_S = 0.25


class LiveFeed:
    def __init__(self, database, *, poll_s: float = 1.0, max_streams: int = 100, max_per_client: int = 8):
        self.database = database
        self.poll_s = poll_s
        self.max_streams = max_streams
        self.max_per_client = max_per_client
        self._open: dict[str, int] = {}  # client -> open streams
        self.version = 0
        self.closed = False
        self._lock = threading.Lock()
        self._subscribers: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()

    # -- the watching thread ------------------------------------------------------------------
    def ensure_started(self) -> None:
        with self._lock:
            if self._thread is None and not self.closed:
                self._thread = threading.Thread(target=self._run, name="dagline-ui-live", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        try:
            if self.database.dialect == "postgresql":
                self._listen()
            else:
                self._poll()
        except Exception:  # noqa: BLE001 - pages then stop updating live; they still load
            log.exception("the web UI's live feed stopped")

    def _listen(self) -> None:
        listener = Listener(self.database.engine)
        try:
            while not self.closed:
                outcome = listener.wait(PING_EVERY_S, interrupt_fd=self._wake_r)
                if outcome not in ("timeout", "interrupted"):  # any change: new signals and new runs too
                    self._changed()
        finally:
            listener.close()

    def _marker(self):
        with self.database.begin() as conn:
            return change_marker(conn)

    def _poll(self) -> None:
        import select as selector

        seen = None
        while not self.closed:
            try:
                marker = self._marker()
            except Exception as exc:  # noqa: BLE001 - the database is away: try again at the next tick
                log.debug("live feed poll failed: %s", exc)
                marker = seen
            if seen is not None and marker != seen:
                self._changed()
            seen = marker
            selector.select([self._wake_r], [], [], self.poll_s)

    def _changed(self) -> None:
        with self._lock:
            self.version += 1
            subscribers = list(self._subscribers)
        for loop, event in subscribers:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop has closed
                self.unsubscribe(loop, event)

    # -- streams --------------------------------------------------------------------------------
    def admit(self, client: str) -> str | None:
        """Count one more stream of `client`; or why not (None: admitted; then `release` it once)."""
        with self._lock:
            if sum(self._open.values()) >= self.max_streams:
                return f"{self.max_streams} live event streams are open on this server"
            if self._open.get(client, 0) >= self.max_per_client:
                return f"{self.max_per_client} live event streams are open for this client"
            self._open[client] = self._open.get(client, 0) + 1
        return None

    def release(self, client: str) -> None:
        with self._lock:
            left = self._open.get(client, 0) - 1
            if left > 0:
                self._open[client] = left
            else:
                self._open.pop(client, None)

    @property
    def open_streams(self) -> int:
        with self._lock:
            return sum(self._open.values())

    def subscribe(self, loop, event) -> None:
        with self._lock:
            self._subscribers.add((loop, event))

    def unsubscribe(self, loop, event) -> None:
        with self._lock:
            self._subscribers.discard((loop, event))

    async def stream(self, client: str | None = None):
        """The body of one event stream (`client`: admitted by `admit`, released when it ends)."""
        try:
            async for part in self._stream():
                yield part
        finally:
            if client is not None:
                self.release(client)

    async def _stream(self):
        self.ensure_started()
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        self.subscribe(loop, event)
        try:
            yield f"retry: 2000\nevent: hello\ndata: {self.version}\n\n"
            quiet_since = time.monotonic()
            while not self.closed:
                try:
                    await asyncio.wait_for(event.wait(), timeout=1.0)
                except TimeoutError:
                    pass
                if event.is_set():
                    await asyncio.sleep(COALESCE_S)  # a burst of commits becomes one refresh
                    event.clear()
                    quiet_since = time.monotonic()
                    yield f"event: change\ndata: {self.version}\n\n"
                elif time.monotonic() - quiet_since >= PING_EVERY_S:
                    quiet_since = time.monotonic()
                    yield ": ping\n\n"
        finally:
            self.unsubscribe(loop, event)

    def close(self) -> None:
        """End every stream and the watching thread (the server is stopping)."""
        self.closed = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        with self._lock:
            subscribers = list(self._subscribers)
        for loop, event in subscribers:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass
        if self._thread is not None:
            self._thread.join(5)
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
