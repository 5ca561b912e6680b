"""revenue_by_region: clean orders of one day -> <out>/marts/revenue_by_region/ds=YYYY-MM-DD (Parquet).

One row per region: orders, units, revenue and average order value. Only this date's partition is
overwritten.

    spark-submit revenue_by_region.py --ds 2026-01-01 --out /tmp/dagline-demo
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ds", required=True, help="the day to process, YYYY-MM-DD")
    parser.add_argument("--out", required=True, help="root folder of the pipeline's data")
    args = parser.parse_args(argv)
    dt.date.fromisoformat(args.ds)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = SparkSession.builder.appName(f"revenue_by_region {args.ds}").getOrCreate()
    try:
        orders = spark.read.parquet(f"{args.out}/clean/orders/ds={args.ds}")
        target = f"{args.out}/marts/revenue_by_region/ds={args.ds}"
        mart = (
            orders.groupBy("region")
            .agg(
                F.count("*").alias("orders"),
                F.sum("quantity").alias("units"),
                F.sum("amount").cast("decimal(14,2)").alias("revenue"),
            )
            .withColumn("avg_order_value", (F.col("revenue") / F.col("orders")).cast("decimal(12,2)"))
            .orderBy(F.col("revenue").desc())
        )
        mart.coalesce(1).write.mode("overwrite").parquet(target)
        print(f"revenue_by_region: {args.ds} -> {target}")
        mart.show(truncate=False)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
