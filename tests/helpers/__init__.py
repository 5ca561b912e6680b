"""What the tests share, other than fixtures (those are in the conftest.py files): every module a test
imports that is not a test itself lives here, so no test module imports another (tests/unit/test_test_layout.py).

- `dags`: `dag(...)`, `task(...)` build DAG documents as a user writes them; `write` puts one in a file,
  `loaded` parses it as the Kubernetes handlers do.
- `harness`: scenario steps on a database with a frozen clock: `t`, `write_dag`, `apply`, `schedule`,
  `backfill`, and reading state back (`runs`, `run_row`, `tis`, `ti_states`, `events`), `assert_invariants`
  (the audit), `SLOW_DAG`.
- `cli`: the `dagline` command in-process: `cli(db, *args, expect=0)`, `snapshot(db)` (row counts of every
  table), `GOOD` (a valid DAG document; the `applied` fixture applies it).
- `polling`: `wait_for(probe, what, timeout=...)`, the one way to wait for another process or thread.
- `postgres`: `make_pg_database(pg_admin)`, a fresh database cloned from the migrated template; `PG_URL`.
- `prometheus`: `scrape(port)` a `/metrics` page, `value(page, name, **labels)` of one sample.
- `receiver`: `Receiver`, a real local HTTP(S) server recording callback deliveries (and holding them); its
  `allowed_networks` is the egress allow-list that admits it (loopback is refused to webhooks by default).
- `web_scenario`: the scene the web UI's tests look at: `build(db, folder)` and what it is made of.
- `tenancy`: DAGs in namespaces, stored under their keys: `apply_in_namespaces(db, folder, [(namespace, yaml)])`,
  `apply_team_dags` (a-team's `a-sales`, team-b's `b-sales`, default's `local`; `TEAM_KEYS`).
- `web_session`: signing in to the web UI as a browser does (`sign_in`, `csrf_field`).
- `k8s/`: the Kubernetes stand-ins: `emulator` (the API server, rules in `api_rules`), `cluster` (it in a
  thread, and a client), `kopf_runner` (real kopf in a thread), `spark_operator` (the spark-operator),
  `operator_harness` (manifests, an operator replica, reading state back). Also used by bench/k8s_mirror.py.
"""
