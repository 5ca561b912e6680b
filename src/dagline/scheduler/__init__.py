"""The scheduler loop and its phases, one module each (see `loop` for the order):

`create_runs` (1) -> `start_runs` (2) -> `examine` (3, and the mini-scheduler) ->
`critical_section` (4) -> `executor_events` (5) -> `housekeeping` (6).
Each phase is a short transaction opened by the loop; decisions are pure functions in `dagline.domain`.

Around them, `tries` (what this replica's executor runs) and `replica/`: the rules of a replica among
its peers (liveness, adoption, wake-ups, resilience, the SQLite guard).
"""
