#!/usr/bin/env bash
# The signals demo (`make demo-signals`): AIP-35's ML pipeline with real PySpark on SQLite. A streaming
# trainer publishes models, a batch job validates each, the streaming server is restarted with each
# validated model. Runs until both models went through the whole chain (at most DEMO_SECONDS, 600 by
# default), then stops its two streaming tasks (`dagline tasks stop`: no evaluate try is in flight by
# then, so the run ends success; `runs stop` would end it failed, as any stopped run), and prints the
# signal log and which model served when. The API listens on DAGLINE_DEMO_PORT (8793 by default).
# Exits 1 unless the run ended success.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK="$PWD/demo-signals"
rm -rf "$WORK" && mkdir -p "$WORK/data"
export DAGLINE_DB_URL="sqlite:///$WORK/dagline.db" DAGLINE_LOG_FOLDER="$WORK/logs"
PORT="${DAGLINE_DEMO_PORT:-8793}"
export DAGLINE_API_URL="http://127.0.0.1:$PORT"   # handed on to every try, with a token of its own

dagline db upgrade >/dev/null
dagline dags apply examples/ml-signals
dagline api --port "$PORT" 2>"$WORK/api.log" &
API=$!
dagline scheduler --parallelism 3 2>"$WORK/scheduler.log" &
SCHEDULER=$!
trap 'kill $API $SCHEDULER 2>/dev/null; wait 2>/dev/null || true' EXIT

RUN=$(dagline dags trigger ml-signals --conf "{\"root\": \"$WORK/data\", \"models\": 2}")
echo "== run $RUN: train (streaming), evaluate (one try per model.published), serve (restarted per model.validated)"
echo "   (each PySpark job takes 10-20 s to start on 2 cores; logs in $WORK/logs)"
python - "$WORK/data/serving.log" "${DEMO_SECONDS:-600}" <<'PY'
import os, sys, time
log, limit = sys.argv[1], float(sys.argv[2])
deadline, seen = time.monotonic() + limit, set()
while time.monotonic() < deadline:
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    models = [line.split(" model ")[1].split()[0] for line in lines]
    for m in models:
        if m not in seen:
            seen.add(m)
            print(f"   serving with model {m}", flush=True)
    if {"v1", "v2"} <= seen:
        break
    time.sleep(2)
else:
    sys.exit(f"two models were not served within {limit:g} s (see the logs)")
PY
echo "== both models served: stopping the streaming tasks (they stop cleanly on SIGTERM)"
dagline tasks stop "$RUN" train
dagline tasks stop "$RUN" serve
STATE=$(python - <<'PY'
import json, subprocess, sys, time
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    runs = json.loads(subprocess.check_output(["dagline", "runs", "list", "ml-signals", "--json"]))
    if runs[0]["state"] != "running":
        print(runs[0]["state"])
        sys.exit(0)
    time.sleep(1)
print("running")
PY
)
echo "   run $RUN: $STATE"
echo
echo "== the signal log (dagline signals list): who sent what, and what it caused"
dagline signals list --limit 50
echo
echo "== which model served when ($WORK/data/serving.log, first and last line per model)"
python - "$WORK/data/serving.log" <<'PY'
import sys
by_model = {}
for line in open(sys.argv[1]).read().splitlines():
    by_model.setdefault(line.split(" model ")[1].split()[0], []).append(line)
for model, lines in by_model.items():
    print(f"   {lines[0]}")
    if len(lines) > 1:
        print(f"   ... {len(lines) - 2} more ...\n   {lines[-1]}" if len(lines) > 2 else f"   {lines[-1]}")
PY
if [ "$STATE" != "success" ]; then
    echo "the run ended $STATE, not success (see dagline tasks list $RUN and $WORK/logs)" >&2
    exit 1
fi
