"""The loop's phases that keep state between passes, each a small class or function on the replica's
shared `context`: `reaction` (signals), `take_in` (starting new runs), `hops` (critical section,
launches, executor reports), `mini_scheduler`, `upkeep` (deadlines, housekeeping), `until_idle`;
`stats` counts what a pass did. The stateless phases are modules beside `loop` (`create_runs`,
`start_runs`, `examine`, `critical_section`, `executor_events`, `housekeeping`, ...).
"""
