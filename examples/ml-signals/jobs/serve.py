"""serve: streaming predictions with one model. Structured Streaming from the `rate` source; every
micro-batch predicts with the model it was started with and appends a line to <root>/serving.log
naming that model (and one when the job starts), so the log shows which model served when. Started
with `--model none` (no model validated yet) it serves nothing but says so. Stops cleanly when
dagline asks (a restart with a new model stops it first).

    spark-submit serve.py --root /tmp/dagline-ml-signals --model /tmp/dagline-ml-signals/models/v2.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from dagline.sdk.streaming import run_until_stopped

    model = None if args.model == "none" else json.load(open(args.model))
    name = f"v{model['version']}" if model else "none"

    def log(line: str) -> None:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S")
        with open(f"{args.root}/serving.log", "a") as out:
            out.write(f"{stamp} model {name} {line}\n")
        print(f"[serve] model {name} {line}", flush=True)

    log("started")  # before Spark starts: a restart may come before the first micro-batch
    spark = SparkSession.builder.appName(f"serve {name}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")

    def predict(batch, batch_id):
        if model is None:
            line = "no model yet"
        else:
            row = batch.select(F.avg(model["a"] * (F.col("value") % 10) + model["b"]).alias("p"),
                               F.count("*").alias("n")).collect()[0]
            line = f"{row['n']} predictions, mean {row['p'] or 0:.2f}"
        log(f"batch {batch_id}: {line}")

    (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
     .writeStream.foreachBatch(predict).trigger(processingTime="3 seconds").queryName(f"serve-{name}").start())
    run_until_stopped(spark)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
