"""What one pass of the loop (or one step outside it) did, counted: the loop logs it, and an idle pass
(no work at all) is what lets a replica wait, or `run(until_idle=True)` return."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class LoopStats:
    signals_handled: int = 0
    runs_created: int = 0
    runs_started: int = 0
    tis_decided: int = 0
    runs_finished: int = 0
    tis_queued: int = 0
    reports: int = 0
    tis_adopted: int = 0
    callbacks: int = 0  # outbox rows claimed or settled
    deadlines_missed: int = 0
    tries_stopped: int = 0

    @property
    def work(self) -> int:
        return sum(dataclasses.astuple(self))

    def summary(self) -> str:
        parts = [f"{value} {field.name.replace('_', ' ')}" for field, value in
                 zip(dataclasses.fields(self), dataclasses.astuple(self), strict=True) if value]
        return ", ".join(parts)

    def add_decisions(self, other: LoopStats) -> None:
        """Count in what `other` (a step's own stats) started, decided and finished."""
        self.runs_started += other.runs_started
        self.tis_decided += other.tis_decided
        self.runs_finished += other.runs_finished
