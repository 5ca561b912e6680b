"""A replica's own rules: what lets any number of replicas share one PostgreSQL.

`liveness` (registration and heartbeats on the database clock), `adoption` (orphaned and zombie task
instances, this replica's own tries), `wakeup` (LISTEN/NOTIFY or polling while idle), `resilience`
(transaction retry and backoff on database errors), `guard` (one replica on SQLite).
"""
