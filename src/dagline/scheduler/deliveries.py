"""Delivering callbacks from the outbox without ever blocking the loop.

Each loop iteration calls `pump(now)`, which never waits on the network:
1. settles the attempts its worker threads finished (one transaction: delivered, or due again after a
   backoff, or failed for good after `max_attempts`);
2. when a worker is free and a claim is due (every `poll_interval_s`, at once while rows keep coming),
   claims due rows (`claims.claim_due_callbacks`: SKIP LOCKED plus a lease) and hands each to a worker.
The channels (`channels`: webhook, log; the operator adds Kubernetes Events) run in the workers,
outside any transaction. A replica killed mid-delivery leaves its rows pending until their lease
passes, then any replica sends them again: at least once, a duplicate always with the same delivery id.

Settings come from `DAGLINE_CALLBACK_<FIELD>` environment variables (e.g. `DAGLINE_CALLBACK_MAX_ATTEMPTS`;
`DAGLINE_CALLBACK_ALLOWED_NETWORKS` is the webhooks' egress allow-list, `dagline.domain.egress`). A
delivery the egress policy refuses fails for good at once, its reason kept as the row's `last_error`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
import queue
import time
from collections.abc import Callable, Mapping

from dagline import metrics
from dagline.db.claims import claim_due_callbacks
from dagline.db.outbox import settle_delivered, settle_failed
from dagline.domain.callbacks import redelivery_delay
from dagline.domain.egress import ALLOWED_NETWORKS_SETTING, EgressPolicy
from dagline.errors import InvalidInput
from dagline.scheduler.channels import Callback, DeliveryFailed, DeliveryRefused
from dagline.scheduler.replica.resilience import Transactions
from dagline.scheduler.settings import env_overrides

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CallbackSettings:
    workers: int = 4                 # deliveries in flight per replica (threads)
    batch: int = 32                  # rows claimed at most per claim
    poll_interval_s: float = 1.0     # how often an idle replica looks for due callbacks
    lease_s: float = 60.0            # a claimed row is another replica's again after this (must exceed timeout_s)
    timeout_s: float = 10.0          # one webhook attempt
    max_attempts: int = 10           # then the row is `failed` (kept, with its last error)
    backoff_base_s: float = 5.0      # wait after the first failed attempt; doubles each time
    backoff_max_s: float = 600.0     # ... up to this
    deadline_check_interval_s: float = 1.0  # how often the loop looks for missed deadlines (an indexed query)
    allowed_networks: str = ""       # CIDRs (optionally :port) webhooks may reach besides public addresses

    def __post_init__(self):
        self.egress  # noqa: B018 - a bad allow-list is an error naming the variable, at start
        for field in dataclasses.fields(self):
            if isinstance(field.default, str):
                continue
            if getattr(self, field.name) <= 0:
                raise InvalidInput(f"must be positive, got {getattr(self, field.name)!r}", field=_env(field.name))
        if self.lease_s <= self.timeout_s:
            raise InvalidInput(f"must be longer than DAGLINE_CALLBACK_TIMEOUT_S ({self.timeout_s:g}), got "
                               f"{self.lease_s:g}: a slow attempt would be sent twice at once", field=_env("lease_s"))

    @functools.cached_property
    def egress(self) -> EgressPolicy:
        """The egress policy of webhooks (`dagline.domain.egress`) with `allowed_networks` allowed."""
        return EgressPolicy.parse(self.allowed_networks, field=ALLOWED_NETWORKS_SETTING)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CallbackSettings:
        return cls(**env_overrides(cls, "DAGLINE_CALLBACK_", environ))


def _env(field: str) -> str:
    return f"DAGLINE_CALLBACK_{field.upper()}"


@dataclasses.dataclass(frozen=True)
class _Outcome:
    callback: Callback
    error: str | None
    seconds: float
    final: bool = False  # no further attempt (a destination the egress policy refuses)


class Deliveries:
    """The outbox deliverer of one replica (`channels`: channel name -> deliver function)."""

    def __init__(self, tx: Transactions, channels: Mapping[str, Callable[[Callback], None]], *,
                 replica_id: int | None, clock, settings: CallbackSettings | None = None,
                 on_done: Callable[[], None] | None = None):
        self.tx = tx
        self.channels = dict(channels)
        self.replica_id = replica_id
        self.clock = clock
        self.settings = settings or CallbackSettings()
        self.on_done = on_done  # called from a worker when an attempt ends (wakes the loop)
        self._pool = concurrent.futures.ThreadPoolExecutor(self.settings.workers, thread_name_prefix="callbacks")
        self._finished: queue.SimpleQueue[_Outcome] = queue.SimpleQueue()
        self._in_flight = 0
        self._next_claim = float("-inf")
        self.delivered = 0
        self.failed_attempts = 0

    def busy(self) -> bool:
        """Attempts in flight or finished but not yet recorded."""
        return self._in_flight > 0

    def pump(self, now, *, force: bool = False) -> int:
        """Record finished attempts, claim and start new ones; returns how many rows it touched."""
        work = self._settle(now)
        free = self.settings.workers - self._in_flight
        if free > 0 and (force or time.monotonic() >= self._next_claim):
            claimed = self.tx.run(lambda conn: claim_due_callbacks(
                conn, now=now, limit=min(free, self.settings.batch), channels=sorted(self.channels),
                replica_id=self.replica_id, lease_s=self.settings.lease_s), what="claiming callbacks")
            for row in claimed:
                callback = Callback(row.id, row.delivery_id, row.channel, row.event, row.target, row.payload,
                                    row.attempts)
                self._in_flight += 1
                self._pool.submit(self._attempt, callback)
            work += len(claimed)
            # Rows left over: claim again next loop; none: look again after the poll interval.
            self._next_claim = 0.0 if len(claimed) == min(free, self.settings.batch) else (
                time.monotonic() + self.settings.poll_interval_s)
        return work

    def _attempt(self, callback: Callback) -> None:
        started = time.monotonic()
        error, final = None, False
        try:
            self.channels[callback.channel](callback)
        except DeliveryRefused as exc:
            error, final = str(exc), True
        except DeliveryFailed as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - any failure of a channel is a failed attempt, retried
            error = f"{type(exc).__name__}: {exc}"
        self._finished.put(_Outcome(callback, error, time.monotonic() - started, final))
        if self.on_done is not None:
            self.on_done()

    def _settle(self, now) -> int:
        outcomes = []
        while True:
            try:
                outcomes.append(self._finished.get_nowait())
            except queue.Empty:
                break
        if not outcomes:
            return 0
        s = self.settings

        def record(conn):
            for outcome in outcomes:
                cb = outcome.callback
                if outcome.error is None:
                    settle_delivered(conn, cb.outbox_id, at=now)
                    continue
                retry_at = None if outcome.final or cb.attempt >= s.max_attempts else now + redelivery_delay(
                    cb.attempt, base_s=s.backoff_base_s, cap_s=s.backoff_max_s)
                settle_failed(conn, cb.outbox_id, attempt=cb.attempt, error=outcome.error, retry_at=retry_at)

        try:
            self.tx.run(record, what="recording callback deliveries")
        except Exception:
            for outcome in outcomes:  # keep them: recorded next time (the leases cover them meanwhile)
                self._finished.put(outcome)
            raise
        self._in_flight -= len(outcomes)
        for outcome in outcomes:
            cb = outcome.callback
            outcome_label = "delivered" if outcome.error is None else "failed"
            metrics.CALLBACK_DELIVERIES.labels(channel=cb.channel, outcome=outcome_label).inc()
            metrics.CALLBACK_DELIVERY_SECONDS.labels(channel=cb.channel).observe(outcome.seconds)
            if outcome.error is None:
                self.delivered += 1
            else:
                self.failed_attempts += 1
                last = outcome.final or cb.attempt >= s.max_attempts
                log.warning("callback %s (%s, %s) attempt %d failed: %s%s", cb.delivery_id, cb.channel, cb.event,
                            cb.attempt, outcome.error, "; giving up" if last else "; will retry")
        return len(outcomes)

    def close(self, *, wait_s: float = 5.0) -> None:
        """Stop: give attempts in flight `wait_s` to finish and record them; the rest is left to the
        leases (another replica, or this one's next start, sends them again)."""
        deadline = time.monotonic() + wait_s
        while self._in_flight and time.monotonic() < deadline:
            try:
                outcome = self._finished.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self._finished.put(outcome)
            try:
                self._settle(self.clock.now())
            except Exception as exc:  # noqa: BLE001 - the leases cover what could not be recorded
                log.warning("could not record callback deliveries at stop: %s", exc)
                break
        self._pool.shutdown(wait=False, cancel_futures=True)

