"""The scheduler loop and its phases, one module each (see `loop` for the order):

`create_runs` (1) -> `start_runs` (2) -> `examine` (3, and the mini-scheduler) ->
`critical_section` (4) -> `executor_events` (5) -> `housekeeping` (6).
Each phase is a short transaction opened by the loop; decisions are pure functions in `dagline.deps`.
"""
