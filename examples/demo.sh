#!/usr/bin/env bash
# The demo: the example pipeline, a 7-day backfill through the scheduler with the local executor on
# SQLite, then the run grid and where the data landed. Run it with `make demo`. Everything it writes
# (database, logs, data) is in this checkout's `demo/` folder (ignored by git): two checkouts never share
# it. The data goes to demo/data through the runs' conf (`out`, which overrides the DAG's params.out).
set -euo pipefail
cd "$(dirname "$0")/.."
export DAGLINE_DB_URL="sqlite:///$PWD/demo/dagline.db"
export DAGLINE_LOG_FOLDER="$PWD/demo/logs"
OUT="$PWD/demo/data"
CONF="{\"out\": \"$OUT\"}"
rm -rf demo && mkdir -p demo

echo "== dagline demo: database $DAGLINE_DB_URL"
dagline db upgrade
dagline pools set spark 4 --description "Spark-heavy aggregation tasks"
dagline dags apply examples/sales_daily            # created paused, as every DAG applied for the first time
dagline dags unpause sales-daily
echo
echo "== backfilling 7 days of sales-daily (35 PySpark jobs, 2 at a time, on a warm Spark Connect server)"
dagline backfill run sales-daily --start 2026-03-01 --end 2026-03-07 --parallelism 2 --conf "$CONF"
echo
dagline runs grid sales-daily
echo
echo "== output under $OUT (Parquet partitioned by date, one JSON report a day):"
for dataset in raw/orders clean/orders marts/revenue_by_region marts/top_products reports; do
  printf '  %-26s %s partitions: %s\n' "$dataset" "$(ls -d "$OUT/$dataset"/ds=* | wc -l)" \
    "$(ls "$OUT/$dataset" | sed 's/ds=//' | paste -sd' ')"
done
echo
echo "== the report of 2026-03-07 ($OUT/reports/ds=2026-03-07/report.json):"
python - "$OUT/reports/ds=2026-03-07/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
print(f"  {report['orders']} orders, revenue {report['revenue']}, best region {report['regions'][0]['region']}, "
      f"top product {report['top_products'][0]['product']}")
PY
echo
echo "== look further (same database and logs as the demo). \`make demo\` put dagline in .venv/bin;"
echo "   to have it on your PATH in this shell:"
echo "  . .venv/bin/activate            # or call .venv/bin/dagline"
echo "  export DAGLINE_DB_URL=$DAGLINE_DB_URL DAGLINE_LOG_FOLDER=$DAGLINE_LOG_FOLDER"
echo "  dagline runs list sales-daily"
echo "  dagline runs show backfill__2026-03-07T01:00:00+00:00"
echo "  dagline tasks logs backfill__2026-03-07T01:00:00+00:00 daily_report"
echo "  dagline dags test sales-daily 2026-03-08 --conf '$CONF'   # one more day, in the foreground"
