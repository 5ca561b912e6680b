"""dagline: a scheduler for DAGs of PySpark jobs.

Layers, bottom to top: pure domain (`times`, `spec`, `templating`, `timetable`, `deps`,
`backfill` planning) -> `db` -> `scheduler` -> `executors` -> `cli` (and, later, `k8s`).
"""

__version__ = "0.1.0"
