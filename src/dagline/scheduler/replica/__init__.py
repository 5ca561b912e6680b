"""A replica's own rules: what lets any number of replicas share one PostgreSQL.

`liveness` (registration and heartbeats on the database clock), `adoption` (orphaned and zombie task
instances, this replica's own tries), `wakeup` (LISTEN/NOTIFY or polling while idle), `resilience`
(transaction retry and backoff on database errors), `guard` (one replica on SQLite).

Work sharing, each rule pure and on an injected clock (unit-tested in `tests/unit/test_replica_rules.py`):
`gathering` (who is at work, whom new work is left to), `left_to_peer` (for how long, and what is
never left), `lost_race` (the first run of a burst), `idle_pass` (the polling pass left to the
replica at work), `timers` (when an idle replica looks again unwoken: on a timeout only).
"""
