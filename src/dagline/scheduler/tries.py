"""The tries this replica's executor runs, as the replica knows them (ti id and try number -> key).

A try enters when it is launched or adopted and leaves once its final report is stored (not merely
read from the executor: a report whose transaction failed is applied again, and until then its try
is still this replica's). Housekeeping compares this set with the database
(`replica.adoption.reconcile_own_tries`): a try the database no longer has `queued` or `running` on that try
number was timed out or cleared by someone else, and is cancelled; a task instance the database says
is this replica's but that is not in the set is followed, launched or settled as an orphan.
"""

from __future__ import annotations

from collections.abc import Iterable

from dagline.domain.states import TIState
from dagline.executors.base import TaskKey, TaskLaunch, TaskReport

FINAL_REPORTS = frozenset({TIState.SUCCESS, TIState.FAILED})


class InFlight:
    def __init__(self):
        self._keys: dict[tuple[int, int], TaskKey] = {}
        self._cancelled: set[tuple[int, int]] = set()

    def add(self, launches: Iterable[TaskLaunch]) -> None:
        for launch in launches:
            self._keys[(launch.ti_id, launch.key.try_number)] = launch.key

    def stored(self, reports: Iterable[TaskReport]) -> None:
        """These reports are in the database: final ones end their tries here."""
        for report in reports:
            if report.state in FINAL_REPORTS:
                self._keys.pop((report.ti_id, report.try_number), None)
                self._cancelled.discard((report.ti_id, report.try_number))

    def tries(self) -> dict[tuple[int, int], TaskKey]:
        return dict(self._keys)

    def ti_ids(self) -> set[int]:
        return {ti_id for ti_id, _ in self._keys}

    def to_cancel(self, ti_try: tuple[int, int]) -> TaskKey | None:
        """The key to cancel, the first time a try is found gone from the database; else None."""
        if ti_try in self._cancelled or ti_try not in self._keys:
            return None
        self._cancelled.add(ti_try)
        return self._keys[ti_try]

    def __contains__(self, ti_try: tuple[int, int]) -> bool:
        return ti_try in self._keys

    def __len__(self) -> int:
        return len(self._keys)
