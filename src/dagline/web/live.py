"""Live pages: server-sent events that say "something you may read changed", so open pages refresh
their live parts without a reload.

One `LiveFeed` per app, started by the first page that listens: a thread that learns of changes from
the database itself, never from this process, so a change made through any replica (or by any
scheduler, or the command line) reaches the pages every replica serves. It is woken by PostgreSQL's
NOTIFY (`db.notify.Listener`: LISTEN on the channel every state change NOTIFYs at commit; also every
15 s, and at once after a reconnection, when notifications may have been missed), on SQLite (no
NOTIFY) once a second. Woken, it reads what was stored since it last looked (`store.changes.
changes_after`): every change a page shows records an event or stores a signal, so the new event ids
and signal seqs are the changes, and each says whose it is:

- an event of a DAG (its runs, tasks, backfills, deadlines): the namespace in the DAG's key;
- a signal: its sender's namespace (`signal.namespace`);
- a pool's event: the namespace owning the pool, or `PLATFORM` for a platform pool (every reader
  sees those on /pools);
- anything else (a scheduler replica starting or leaving): `UNATTRIBUTED`, told to unlimited readers only.

Each stream (`GET /ui/events`) belongs to one reader and its namespaces (None: unlimited, anonymous
readers included) and is sent `event: change` only after a change it may read: a reader limited to
`a-team` is never told that `team-b` changed anything, not even when (`wants`). Its counter is its
own too (`version_for`: the changes of its namespaces and of the platform, counted since this process
started), so the numbers it sees do not count other namespaces' changes either. Bursts are coalesced
(the browser refetches at most a few times a second), a comment every 15 s keeps proxies from
closing the stream, and it ends when the server stops, or when its reader's token no longer reads as
it did (revoked, expired: asked every 15 s). A page carries its reader's counter as it was rendered,
and its stream's first event (`hello`) the counter then: if they differ (a change committed between
rendering and listening), the page refreshes once; so does a browser that reconnects (perhaps to
another replica), for what it may have missed.

On PostgreSQL ids are taken at insert and become visible at commit, so a transaction can commit an
event id lower than one already read: the feed reads again the last `lookback` ids each time and
remembers which of them it has seen, so such an event is announced when it commits, once.

Streams are capped (ADR 62): at most `max_streams` open at once in this process, `max_per_client` per
client (its sign-in token, else its address); `admit` refuses one more, and the page answers 429 with
`Retry-After` (the browser's page still works; it only stops updating live).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable

from dagline.db.notify import Listener
from dagline.domain import names
from dagline.store.changes import changes_after, newest_change

log = logging.getLogger(__name__)

PING_EVERY_S = 15.0
RECHECK_S = 15.0  # how often a stream asks whether its reader's token still reads
COALESCE_S = 0.25
CHUNK = 5000  # changes read per query (a look reads on until it has them all)
PLATFORM = None  # a change every reader may read: a platform pool's
UNATTRIBUTED = ""  # a change of no namespace's that no page of a limited reader shows (never a namespace name)
POOL_EVENT = "pool "  # a pool event's detail: `pool <pool key>` (`store.pools`)


def changed_namespaces(events: Iterable[tuple], signals: Iterable[tuple]) -> set[str | None]:
    """Whose changes these are: `changes_after`'s events (id, dag_id, pool event detail) and signals
    (seq, namespace) -> the namespaces they belong to, `PLATFORM`, `UNATTRIBUTED`."""
    found: set[str | None] = set()
    for _, dag_id, pool in events:
        if dag_id is not None:
            found.add(names.namespace_of(dag_id))
        elif pool is not None and pool.startswith(POOL_EVENT):
            found.add(names.split_pool(pool[len(POOL_EVENT):])[0])  # None: a platform pool (PLATFORM)
        else:
            found.add(UNATTRIBUTED)
    found.update(namespace or UNATTRIBUTED for _, namespace in signals)
    return found


def wants(scope: Collection[str] | None, changed: Collection[str | None]) -> bool:
    """Whether a reader of `scope` (its namespaces; None: unlimited) may be told of `changed`."""
    if not changed:
        return False
    return scope is None or PLATFORM in changed or any(n in scope for n in changed if n)


class LiveFeed:
    def __init__(self, database, *, poll_s: float = 1.0, max_streams: int = 100, max_per_client: int = 8,
                 lookback: int | None = None):
        self.database = database
        self.poll_s = poll_s
        self.max_streams = max_streams
        self.max_per_client = max_per_client
        # ids read again at each look: commits out of id order happen on PostgreSQL only
        self.lookback = lookback if lookback is not None else (1000 if database.dialect == "postgresql" else 0)
        self._open: dict[str, int] = {}  # client -> open streams
        self.version = 0  # every change (an unlimited reader's counter)
        self._counts: collections.Counter = collections.Counter()  # namespace (PLATFORM...) -> its changes
        self.closed = False
        self.watching = threading.Event()  # set once the thread knows where the stored changes stand
        self._lock = threading.Lock()
        self._looking = threading.Lock()  # one look at a time (the thread's, or a caller's)
        self._subscribers: set[tuple[asyncio.AbstractEventLoop, asyncio.Event, frozenset[str] | None]] = set()
        self._thread: threading.Thread | None = None
        if self.lookback >= CHUNK:
            raise ValueError(f"a lookback of {self.lookback} ids: at most {CHUNK - 1}")
        self._wake_r, self._wake_w = os.pipe()
        self._tops: tuple[int, int] | None = None  # the newest event id and signal seq read
        self._seen: tuple[set[int], set[int]] = (set(), set())  # ids read within the lookback

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
            listener.open()  # LISTEN first: a change committed after the first look wakes the feed
            self.look()
            while not self.closed:
                if listener.wait(PING_EVERY_S, interrupt_fd=self._wake_r) != "interrupted":
                    self.look()  # a notification, a reconnection, or a quiet while: what is new?
        finally:
            listener.close()

    def _poll(self) -> None:
        import select as selector

        while not self.closed:
            self.look()
            selector.select([self._wake_r], [], [], self.poll_s)

    def look(self) -> set[str | None]:
        """Read what was stored since the last look, and tell the streams that may read it; returns
        whose changes they were. The first look only learns where the stored changes stand."""
        try:
            with self._looking, self.database.begin() as conn:
                changed = self._read(conn)
        except Exception as exc:  # noqa: BLE001 - the database is away: try again at the next look
            log.debug("the live feed could not read the changes: %s", exc)
            return set()
        self.watching.set()
        if changed:
            self._changed(changed)
        return changed

    def _read(self, conn) -> set[str | None]:
        """Whose changes were stored since the last look (the first look: where they stand, no news).
        Nothing is kept of a look that fails half way: the next one reads the same again."""
        first = self._tops is None
        tops = newest_change(conn) if first else self._tops
        if first and not self.lookback:
            self._tops = tops
            return set()
        seen = (set(self._seen[0]), set(self._seen[1]))
        new: tuple[list, list] = ([], [])
        while True:
            read = changes_after(conn, *(max(0, top - self.lookback) for top in tops), limit=CHUNK)
            tops = tuple(max([top, *(row[0] for row in rows)]) for top, rows in zip(tops, read, strict=True))
            for kept, known, rows, top in zip(new, seen, read, tops, strict=True):
                kept += [row for row in rows if row[0] not in known]
                known.update(row[0] for row in rows)
                known.difference_update([i for i in known if i <= top - self.lookback])
            if all(len(rows) < CHUNK for rows in read):
                break
        self._tops, self._seen = tops, seen
        return set() if first else changed_namespaces(*new)

    def _changed(self, changed: set[str | None]) -> None:
        with self._lock:
            self.version += 1
            self._counts.update(changed)
            subscribers = [(loop, event) for loop, event, scope in self._subscribers if wants(scope, changed)]
        for loop, event in subscribers:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop has closed
                self._drop(loop, event)

    def version_for(self, namespaces: Collection[str] | None) -> int:
        """The change counter of a reader limited to `namespaces` (None: unlimited): the changes it may
        read, counted since this process started (what a page is rendered with, and its stream says)."""
        with self._lock:
            if namespaces is None:
                return self.version
            return self._counts[PLATFORM] + sum(self._counts[n] for n in set(namespaces))

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

    def subscribe(self, loop, event, namespaces: Collection[str] | None = None) -> None:
        """Set `event` (in `loop`) after each change a reader limited to `namespaces` may read (None: every change)."""
        with self._lock:
            self._subscribers.add((loop, event, None if namespaces is None else frozenset(namespaces)))

    def unsubscribe(self, loop, event) -> None:
        self._drop(loop, event)

    def _drop(self, loop, event) -> None:
        with self._lock:
            self._subscribers = {s for s in self._subscribers if s[:2] != (loop, event)}

    async def stream(self, client: str | None = None, namespaces: Collection[str] | None = None,
                     still_reads: Callable[[], bool] | None = None):
        """The body of one event stream of a reader limited to `namespaces` (None: unlimited); `client`:
        admitted by `admit`, released when it ends. `still_reads()` (blocking: run in a thread), asked
        every `RECHECK_S`, says whether its reader still may read so (a revoked or expired token may not):
        when not, the stream ends."""
        try:
            async for part in self._stream(namespaces, still_reads):
                yield part
        finally:
            if client is not None:
                self.release(client)

    async def _stream(self, namespaces: Collection[str] | None, still_reads: Callable[[], bool] | None):
        self.ensure_started()
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        self.subscribe(loop, event, namespaces)
        try:
            yield f"retry: 2000\nevent: hello\ndata: {self.version_for(namespaces)}\n\n"
            quiet_since = checked_at = time.monotonic()
            while not self.closed:
                try:
                    await asyncio.wait_for(event.wait(), timeout=1.0)
                except TimeoutError:
                    pass
                if still_reads is not None and time.monotonic() - checked_at >= RECHECK_S:
                    if not await asyncio.to_thread(still_reads):
                        return
                    checked_at = time.monotonic()
                if event.is_set():
                    await asyncio.sleep(COALESCE_S)  # a burst of commits becomes one refresh
                    event.clear()
                    quiet_since = time.monotonic()
                    yield f"event: change\ndata: {self.version_for(namespaces)}\n\n"
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
        for loop, event, _ in subscribers:
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
