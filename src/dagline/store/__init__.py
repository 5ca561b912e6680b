"""Stored state: every statement that is not a row lock or a compare-and-set (those are `dagline.db`).

One module per thing stored: `dags`, `timeline`, `runs`, `backfills`, `pools`, `tries`, `signals`,
`signal_actions`, `signal_batches`, `tokens`, `deadlines`, `replicas`, `launches`, `deletion`; the one
gatherer of the facts decisions and their explanations use (`facts`, explained by `waiting`); and the
read models of lists and pages (`read_models` for the CLI and API, `pages` for the web UI). The caller
owns the transaction: a function here takes a `Connection` (or opens one short transaction where its
docstring says so) and never commits halfway. The faces, the scheduler and the operator build no SQL
of their own (import contracts in pyproject.toml and `tests/unit/test_layering.py`).
"""
