"""The scheduler loop and its phases, one module each (see `loop` for the order):

`create_runs` (1) -> `start_runs` (2) -> `examine` (3, and the mini-scheduler) ->
`critical_section` (4) -> `executor_events` (5) -> `housekeeping` (6).
Each phase is a short transaction opened by the loop; decisions are pure functions in `dagline.domain.deps`.

Around them, what lets any number of replicas share one PostgreSQL: `liveness` (registration and
heartbeats on the database clock), `adoption` (orphaned and zombie task instances, this replica's own
tries), `tries` (what this replica's executor runs), `wakeup` (LISTEN/NOTIFY or polling while idle),
`resilience` (transaction retry and backoff on database errors), and `guard` (one replica on SQLite).
"""
