"""Every bound dagline puts on its inputs, in one place, as named constants.

Pure data: no imports of dagline, no behaviour. The loaders, the CLI, the README's "Limits" section and
the tests all use these names, so an error message, the documentation and a test cannot disagree about a
number. A value beyond a bound is refused with an error that names the bound and the value (exit 2 from
the CLI); nothing is stored.
"""

from __future__ import annotations

import datetime as dt

KIB = 1024
MIB = 1024 * KIB

# --- loading spec files -----------------------------------------------------------------------------------

MAX_SPEC_FILE_BYTES = 1 * MIB
"""Size of one YAML file read by `dags apply` (checked before it is read)."""

MAX_TASKS_PER_DAG = 1_000
"""Tasks in one DAG (counted before the tasks are validated)."""

MAX_NESTING_DEPTH = 32
"""Levels of nesting in a JSON value: `params`, a run's `conf`, `--conf` (a scalar is level 1)."""

MAX_YAML_DEPTH = 48
"""Levels of nesting in a whole YAML document (checked on the parser's event stream, before building it)."""

MAX_YAML_ALIASES = 100
"""`*alias` references in one YAML file."""

MAX_YAML_NODES = 200_000
"""Nodes of one YAML file once every alias is expanded (an alias bomb stops here)."""

MAX_STRING_LENGTH = 64 * KIB
"""Characters in one YAML scalar or JSON string."""

# --- JSON given to dagline (`dagline.domain.json_values`) -------------------------------------------------

MAX_JSON_BYTES = 1 * MIB
"""Bytes of UTF-8 in a JSON text given to a command or a form: `--conf`, `--conf-file`, `--value`, the web UI's
conf and signal value."""

MAX_SIGNAL_VALUE_BYTES = 64 * KIB
"""A signal's value, as compact UTF-8 JSON (however it was sent: the CLI, the API, the web UI, a job)."""

MIN_JSON_INTEGER = -(2**63)
MAX_JSON_INTEGER = 2**63 - 1
"""Integers in JSON dagline reads (a conf, params, a signal value): what a BIGINT, a Java long and a Go int64
hold."""

MAX_ID_LENGTH = 250
"""Characters in a task id, a pool name, a run id or a request id (Airflow's limit)."""

# --- numbers: what an INTEGER column and a datetime can hold -------------------------------------------------

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)

MAX_PRIORITY_WEIGHT = INT32_MAX
MIN_PRIORITY_WEIGHT = INT32_MIN
MAX_RETRIES = 1_000
"""Retries of one task (`max_tries` = retries + 1 is an INTEGER column; a thousand retries is plenty)."""

MAX_POOL_SLOTS = INT32_MAX
"""Slots of a pool (`pools set`, a Pool resource) and `poolSlots` of a task."""

MAX_ACTIVE_LIMIT = INT32_MAX
"""`maxActiveRuns`, `maxActiveTasks`, `maxActiveTisPerDag` and a backfill's `--max-active-runs`."""

MAX_RETRY_DELAY = dt.timedelta(days=1)
"""`retryDelay`; an exponential backoff grows up to this and stays there."""

MAX_EXECUTION_TIMEOUT = dt.timedelta(days=365)
"""`executionTimeout` (months count 30 days, years 365)."""

MAX_SCHEDULE_INTERVAL = dt.timedelta(days=3650)
"""An ISO-8601 duration `schedule` (`P1D`, `PT6H`): at most about ten years."""

MAX_SPARK_CORES = 1_024
"""`driver.cores`, `executor.cores`."""
MAX_SPARK_INSTANCES = 10_000
"""`executor.instances`."""
MAX_SPARK_MEMORY_BYTES = 1024**5
"""`driver.memory`, `executor.memory`: 1 PiB (`1p`); a bare number is MiB, as Spark reads it."""
MAX_TASK_ENV = 200
"""Variables in one task's `env` (or the task defaults' `env`)."""

MIN_YEAR = 1900
MAX_YEAR = 9000
"""Instants given to dagline (`startDate`, `--now`, `--start`, ...) lie in [MIN_YEAR, MAX_YEAR]: far from the
ends of `datetime` (years 1 and 9999), so adding an interval or a time zone offset never overflows."""

MAX_BACKFILL_RUNS = 100_000
"""Intervals in one backfill's range (`--start` to `--end`, due or not): 270 years daily, 11 years hourly."""

MAX_ROW_ID = 2**63 - 1
"""A numeric id given to a command (`backfill show ID`, a run's numeric id): what a BIGINT holds."""

# --- settings from the environment ------------------------------------------------------------------------

MAX_SETTING_SECONDS = 86_400.0
"""An interval or timeout setting (`DAGLINE_SCHEDULER_POLL_INTERVAL_S`...): positive, finite, at most a day."""
MAX_SETTING_COUNT = 1_000_000
"""A batch-size setting (`DAGLINE_SCHEDULER_TIS_PER_LOOP`...)."""

# --- command options -------------------------------------------------------------------------------------

MAX_NEXT_RUNS_COUNT = 1_000
"""`dags next-runs --count`."""

# --- rendering templates (at launch, in the renderer process) ---------------------------------------------

TEMPLATE_TIME_BUDGET_S = 2.0
"""Seconds one template may take to render (`DAGLINE_SCHEDULER_TEMPLATE_TIME_BUDGET_S`); past it the renderer
process is killed and the try fails."""

TEMPLATE_OUTPUT_BUDGET = 1 * MIB
"""Characters a template may output, and the size of any string or list it builds on the way."""

TEMPLATE_MAX_NUMBER_BITS = 4096
"""Bits of an integer a template computes (`7 ** 100000` is refused before it is computed)."""

RENDERER_MEMORY_LIMIT = 1024 * MIB
"""Address space of the renderer process: a template that slips past the other bounds runs out of memory there."""
