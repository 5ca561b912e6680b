"""top_products: clean orders of one day -> <out>/marts/top_products/ds=YYYY-MM-DD (Parquet).

One row per product with units, orders, revenue and its revenue rank (1 = best seller); every
product is kept so the report can check totals. Only this date's partition is overwritten.

    spark-submit top_products.py --ds 2026-01-01 --out /tmp/dagline-demo
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
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    spark = SparkSession.builder.appName(f"top_products {args.ds}").getOrCreate()
    try:
        orders = spark.read.parquet(f"{args.out}/clean/orders/ds={args.ds}")
        target = f"{args.out}/marts/top_products/ds={args.ds}"
        by_revenue = Window.orderBy(F.col("revenue").desc(), F.col("product").asc())
        mart = (
            orders.groupBy("product")
            .agg(
                F.sum("quantity").alias("units"),
                F.count("*").alias("orders"),
                F.sum("amount").cast("decimal(14,2)").alias("revenue"),
            )
            .withColumn("rank", F.row_number().over(by_revenue))
            .orderBy("rank")
        )
        mart.coalesce(1).write.mode("overwrite").parquet(target)
        print(f"top_products: {args.ds} -> {target}")
        mart.show(5, truncate=False)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
