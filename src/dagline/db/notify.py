"""Wake-ups on PostgreSQL: every transaction that records a state change NOTIFYs, idle replicas LISTEN.

Sending: `announce(conn, who)` issues `pg_notify('dagline', who)` once per transaction (it is called
by `transitions.record_events`, which every state change goes through; it leaves out transactions
that only queue task instances). PostgreSQL delivers a
NOTIFY only when its transaction commits, so a listener never wakes for a change it cannot see yet,
nor for one that was rolled back. The payload is the writer (`scheduler:7`, `cli`), so a replica
can ignore its own announcements. A transaction that only stored new signals announces `signal`
(`SIGNALS_ONLY`): a replica woken by that alone only has signals to claim, and need not look at
anything else (`Listener.wait` says `signals`). Likewise a transaction that only created queued runs
(a trigger, a backfill, the schedule) announces `runs` (`RUNS_ONLY`): a replica woken by that alone
need only try to start them (`Listener.wait` says `runs`), and the replicas that find them taken by
a peer go back to waiting instead of running a full pass each. A transaction that changed
something else as well also announces its writer's name: a replica woken by both runs a full pass.

Peers: a scheduler replica's ordinary changes do not wake its peers (`Listener.peers`). The replica
that made them goes on with what they made possible itself (the follow-up queues the tasks its
reports made runnable; its next full pass looks at everything), so a peer woken for them would only
repeat that work: with three replicas on one machine, such wake-ups cost more than they saved. What
a peer must act on is announced `urgent` (payload `!scheduler:7`): a stop request for a try that
may run on a peer, tasks this replica left unqueued because its executor is full, or a replica
leaving. New signals and new runs wake every idle replica, whoever wrote them. The peers' ordinary
changes still arrive, as do a replica's own: the listener hands every notification it reads to
`Listener.seen`, and a scheduler replica learns from them which replicas are at work, and which has
been for longest (`dagline.scheduler.replica.gathering`).

Listening: a `Listener` holds one dedicated connection outside the pool (autocommit, `LISTEN
dagline`) and waits on its socket with `select`. A lost connection is reopened on the next wait;
notifications sent while it was gone are lost, so a wait right after reconnecting returns at once
(the caller then looks at the database instead of trusting that nothing happened). SQLite has no
NOTIFY: there `announce` does nothing and replicas poll.
"""

from __future__ import annotations

import logging
import select
import time
import weakref
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dagline.db.faults import first_line

log = logging.getLogger(__name__)

CHANNEL = "dagline"
SIGNALS_ONLY = "signal"  # the payload of a transaction that stored new signals and changed nothing else
RUNS_ONLY = "runs"  # the payload of a transaction that created queued runs and changed nothing else
URGENT = "!"  # before a writer's name: peers must act on this change (see the module docstring)
SCOPED = "/scoped"  # after a scheduler replica's name: it works on one backfill only (`announce_as_scoped`)
_LIGHT = frozenset({SIGNALS_ONLY, RUNS_ONLY})  # a replica woken by one of these has only that to look at
_ANNOUNCED = "dagline_announced_in"  # key in the DBAPI connection's info: _Announced of the transaction


class _Announced:
    """What one transaction announced so far, and whether it holds its announcements."""

    __slots__ = ("transaction", "held", "payloads")

    def __init__(self, transaction, held: bool):
        self.transaction = transaction
        self.held = held
        self.payloads: set[str] = set()


def announce(conn: Connection, who: str, *, urgent: bool = False) -> None:
    """NOTIFY listeners that this transaction changed state (PostgreSQL only; each payload once per
    transaction, and one writer's name at most once, plain or `urgent`). `urgent`: peers must act on
    it (see the module docstring), even in a transaction that holds its announcements
    (`hold_announcements`)."""
    if conn.dialect.name != "postgresql":
        return
    transaction = conn.get_transaction()
    done = conn.info.get(_ANNOUNCED)
    if transaction is None or done is None or done.transaction is not transaction:
        done = _Announced(transaction, held=False)
    if done.held and not urgent:
        return
    name = who + SCOPED if who in _scoped.get(conn.engine, ()) else who
    payload = (URGENT + name if urgent else name)[:100]
    if payload in done.payloads or (not urgent and URGENT + name in done.payloads):
        return  # said already (an urgent announcement says the plain one too)
    conn.execute(_NOTIFY, {"who": payload})
    done.payloads.add(payload)
    conn.info[_ANNOUNCED] = done


_NOTIFY = sa.select(sa.func.pg_notify(CHANNEL, sa.bindparam("who", type_=sa.String)))  # built once
_scoped: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # engine -> writers announced SCOPED


def announce_as_scoped(engine, who: str) -> None:
    """Scheduler replica `who` (writing through `engine`) works on one backfill only (`dagline backfill
    run`): its announcements say so (`scheduler:7/scoped`), so that peers never count it as a replica
    at work to leave new work to (`dagline.scheduler.replica.gathering`); they still take its ordinary
    changes as a peer's."""
    _scoped.setdefault(engine, set()).add(who)


def hold_announcements(conn: Connection) -> None:
    """This transaction's changes wake no one, save by an `urgent` announcement: for a writer that
    itself goes on at once with what its changes made possible (the signal reaction step, whose
    runnable tries the same replica queues right after), so idle peers are not woken to find nothing."""
    transaction = conn.get_transaction()
    if conn.dialect.name == "postgresql" and transaction is not None:
        conn.info[_ANNOUNCED] = _Announced(transaction, held=True)


class Listener:
    """A dedicated LISTEN connection; `wait` returns when another writer committed a change."""

    def __init__(self, engine):
        self.engine = engine
        self.ignore: str | None = None
        self.peers: str | None = None  # payload prefix of the peers whose ordinary changes wake no one
        self.seen: Callable[[str], None] | None = None  # given every notification read (who is at work)
        self._unread: list[str] = []  # payloads read by `look`, not yet reported
        self._conn = None
        self.reconnects = 0  # connections opened after the first (after losing one)
        self._opened = 0
        self._failing = False  # warn once per outage, not at every wait

    def set_ignore(self, who: str) -> None:
        """Announcements with this payload (this replica's own) do not wake it."""
        self.ignore = who

    def open(self) -> bool:
        """Open the connection and LISTEN; False (and logged) if the database cannot be reached now."""
        if self._conn is not None:
            return True
        try:
            cargs, cparams = self.engine.dialect.create_connect_args(self.engine.url)
            conn = self.engine.dialect.connect(*cargs, **cparams)  # not pooled: it must stay ours
        except Exception as exc:  # noqa: BLE001 - the database is down: poll until it is back
            self._cannot_listen(exc)
            return False
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f"LISTEN {CHANNEL}")
        except Exception as exc:  # noqa: BLE001
            self._cannot_listen(exc)
            _close_quietly(conn)
            return False
        if self._failing:
            log.warning("listening for wake-ups again")
        self._failing = False
        self._conn = conn
        if self._opened:
            self.reconnects += 1
        self._opened += 1
        return True

    def _cannot_listen(self, exc: BaseException) -> None:
        level = logging.DEBUG if self._failing else logging.WARNING
        log.log(level, "cannot LISTEN for wake-ups (%s); polling until the database is back", first_line(exc))
        self._failing = True

    def wait(self, timeout: float, interrupt_fd: int | None = None) -> str:
        """Wait up to `timeout` seconds. Returns 'notified' (another writer committed a change),
        'signals' (writers committed new signals and nothing else), 'runs' (writers created queued runs
        and nothing else), 'reconnected' (the connection was
        reopened: changes may have been missed), 'interrupted' (`interrupt_fd` became readable) or
        'timeout'."""
        was_lost = self._conn is None and self._opened > 0
        if not self.open():
            _sleep(timeout, interrupt_fd)
            return "timeout"
        if was_lost:
            return "reconnected"  # reopened only now: changes may have been missed meanwhile
        fds = [self._conn] + ([interrupt_fd] if interrupt_fd is not None else [])
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            # The socket can be readable with no notification for us: our own announcement, or the
            # server's goodbye arriving before the connection's end. Keep waiting until the deadline.
            while True:
                woke = self._drain()
                if woke is not None:
                    return woke
                if self._conn.closed:
                    raise ConnectionError("the server closed the connection")
                readable, _, _ = select.select(fds, [], [], max(0.0, deadline - time.monotonic()))
                if interrupt_fd is not None and interrupt_fd in readable:
                    return "interrupted"
                if not readable:
                    break
        except Exception as exc:  # noqa: BLE001 - a lost connection: reopened on the next wait
            log.warning("lost the LISTEN connection (%s); reconnecting", first_line(exc))
            self.close()
            self.open()  # if the database is still down, the next wait tries again
            return "reconnected"
        return "timeout"

    def pending(self) -> str | None:
        """Without waiting: 'notified', 'signals' or 'runs' (as `wait` says) if other writers committed
        since the last look (those notifications are consumed), else None. A lost connection counts
        as 'notified' (changes may have been missed), and is reopened by the next `wait`."""
        if self._conn is None:
            return None
        try:
            return self._drain()
        except Exception as exc:  # noqa: BLE001 - the next wait reconnects and reports it
            log.warning("lost the LISTEN connection (%s); reconnecting", first_line(exc))
            self.close()
            return "notified"

    def look(self) -> None:
        """Read the notifications that arrived, without consuming them (the next `wait` or `pending`
        still reports them): `seen` has then been given them all."""
        if self._conn is None:
            return
        try:
            self._read()
        except Exception as exc:  # noqa: BLE001 - the next wait or pending reports it and reconnects
            log.debug("could not read notifications (%s)", first_line(exc))

    def _read(self) -> None:
        self._conn.poll()
        while self._conn.notifies:
            payload = self._conn.notifies.pop(0).payload
            if self.seen is not None:
                self.seen(payload)
            self._unread.append(payload)

    def _drain(self) -> str | None:
        """Read pending notifications: 'notified' if one came from another writer (or both kinds of
        light ones came), 'signals' or 'runs' if all that came were new signals or new runs, None if
        none, or only this replica's own, or only its peers' ordinary changes (`peers`)."""
        self._read()
        payloads, self._unread = self._unread, []
        light: set[str] = set()
        full = False
        for payload in payloads:
            if payload in _LIGHT:
                light.add(payload)
                continue
            urgent = payload.startswith(URGENT)
            writer = payload[len(URGENT):] if urgent else payload
            if writer.removesuffix(SCOPED) != self.ignore and (
                    urgent or not (self.peers and writer.startswith(self.peers))):
                full = True
        if full or len(light) > 1:
            return "notified"
        if light:
            return "signals" if SIGNALS_ONLY in light else "runs"
        return None

    def close(self) -> None:
        if self._conn is not None:
            _close_quietly(self._conn)
            self._conn = None


def _close_quietly(conn) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - already gone
        pass


def _sleep(timeout: float, interrupt_fd: int | None) -> None:
    if interrupt_fd is None:
        select.select([], [], [], max(0.0, timeout))
    else:
        select.select([interrupt_fd], [], [], max(0.0, timeout))
