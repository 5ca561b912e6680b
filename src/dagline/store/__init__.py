"""Stored state: every statement that is not a row lock or a compare-and-set (those are `dagline.db`).

One module per thing stored (`dags`, `timeline`, `runs`, `backfills`, `pools`, `signals`, `tokens`,
`deletion`, `signal_batches`), the facts the scheduler's decisions and their explanations use (`facts`:
the one gatherer), those explanations (`waiting`), and the read models of lists (`read_models`) and of the
web pages (`pages`).
The caller owns the transaction: a function here takes a `Connection` (or opens one short transaction
where its docstring says so) and never commits halfway.
"""
