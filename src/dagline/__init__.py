"""dagline: a scheduler for DAGs of PySpark jobs.

Layers, bottom to top: the pure domain (`states`, `times`, `errors` -> `deps`, `templating`,
`timetable`, `clock` -> `spec`) -> `db` | `executors` -> the stored-state services (`timeline`,
`dagstore`, then `runs`, `backfill`, `pools`, `queries`, `audit`) -> `scheduler` -> `k8s` -> `cli`.
The import-linter contracts in pyproject.toml hold the code to this (`lint-imports`).
"""

__version__ = "0.1.0"
