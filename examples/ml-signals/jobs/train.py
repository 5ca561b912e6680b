"""train: online training on a stream. Structured Streaming from the `rate` source (generated rows);
every `--every` seconds a micro-batch refines a linear model y = a*x + b on the rows seen so far
(running sums: least squares), writes it to <root>/models/v<N>.json and sends `model.published`
with {path, version}. After `--models` models it keeps streaming without publishing. Stops
cleanly when dagline asks (SIGTERM: `dagline.sdk.streaming.run_until_stopped`).

    spark-submit train.py --root /tmp/dagline-ml-signals --every 6 --models 3
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--every", type=float, default=6)
    parser.add_argument("--models", type=int, default=3)
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from dagline.sdk.client import send_signal
    from dagline.sdk.streaming import run_until_stopped

    spark = SparkSession.builder.appName("train").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    os.makedirs(f"{args.root}/models", exist_ok=True)
    totals = {"n": 0.0, "x": 0.0, "y": 0.0, "xx": 0.0, "xy": 0.0}
    published = []

    def learn(batch, batch_id):
        # the "true" relation is y = 3x + 1, with noise; x cycles over 0..9
        rows = (batch.select((F.col("value") % 10).cast("double").alias("x"))
                .withColumn("y", 3 * F.col("x") + 1 + (F.rand(seed=int(batch_id)) - 0.5))
                .agg(F.count("*").alias("n"), F.sum("x").alias("x"), F.sum("y").alias("y"),
                     F.sum(F.col("x") * F.col("x")).alias("xx"), F.sum(F.col("x") * F.col("y")).alias("xy"))
                .collect()[0])
        if not rows["n"]:
            return
        for k in totals:
            totals[k] += float(rows[k])
        if len(published) >= args.models:
            return
        n, sx, sy, sxx, sxy = (totals[k] for k in ("n", "x", "y", "xx", "xy"))
        a = (n * sxy - sx * sy) / (n * sxx - sx * sx)
        b = (sy - a * sx) / n
        version = len(published) + 1
        path = f"{args.root}/models/v{version}.json"
        with open(path, "w") as f:
            json.dump({"version": version, "a": a, "b": b, "rows": n}, f)
        answer = send_signal("model.published", {"path": path, "version": version}, id=f"model-{version}")
        published.append(version)
        print(f"[train] published model v{version}: a={a:.3f} b={b:.3f} from {n:.0f} rows "
              f"(signal seq {answer['seq']})", flush=True)

    (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
     .writeStream.foreachBatch(learn).trigger(processingTime=f"{args.every} seconds")
     .option("checkpointLocation", f"{args.root}/checkpoints/train").queryName("train").start())
    run_until_stopped(spark)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
