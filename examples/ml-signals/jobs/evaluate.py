"""evaluate: a batch check of one model. Scores it on fresh generated data (mean squared error of
y = 3x + 1 with noise); if the error is under `--max-mse`, sends `model.validated` with the model's
path and version, else exits 1 (the model is not served).

    spark-submit evaluate.py --model /tmp/dagline-ml-signals/models/v1.json --version 1
"""

from __future__ import annotations

import argparse
import json


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--version", type=int, required=True)
    parser.add_argument("--max-mse", type=float, default=0.5)
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from dagline.sdk.client import send_signal

    with open(args.model) as f:
        model = json.load(f)
    spark = SparkSession.builder.appName(f"evaluate v{args.version}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        data = (spark.range(2000).select((F.col("id") % 10).cast("double").alias("x"))
                .withColumn("y", 3 * F.col("x") + 1 + (F.rand(seed=7) - 0.5)))
        mse = data.select(F.avg((F.col("y") - (model["a"] * F.col("x") + model["b"])) ** 2)).collect()[0][0]
    finally:
        spark.stop()
    if mse > args.max_mse:
        print(f"[evaluate] model v{args.version} refused: mse {mse:.4f} > {args.max_mse}", flush=True)
        return 1
    answer = send_signal("model.validated", {"path": args.model, "version": args.version, "mse": round(mse, 4)},
                         id=f"validated-{args.version}")
    print(f"[evaluate] model v{args.version} validated: mse {mse:.4f} (signal seq {answer['seq']})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
