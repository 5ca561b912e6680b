"""clean_orders: raw orders of one day -> <out>/clean/orders/ds=YYYY-MM-DD (Parquet).

Drops rows that cannot be used (no region, a quantity or price that is not positive), keeps the
first copy of an order sent more than once (by timestamp), and adds `amount = quantity * unit_price`.
Fails if the day's raw partition is missing or nothing survives cleaning. Only this date's partition
is overwritten.

    spark-submit clean_orders.py --ds 2026-01-01 --out /tmp/dagline-demo
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

    spark = SparkSession.builder.appName(f"clean_orders {args.ds}").getOrCreate()
    try:
        source = f"{args.out}/raw/orders/ds={args.ds}"
        target = f"{args.out}/clean/orders/ds={args.ds}"
        raw = spark.read.parquet(source)
        valid = raw.where(
            F.col("region").isNotNull() & (F.col("quantity") > 0) & (F.col("unit_price") > 0)
        )
        first_copy = Window.partitionBy("order_id").orderBy(F.col("ts").asc())
        clean = (
            valid.withColumn("copy", F.row_number().over(first_copy))
            .where(F.col("copy") == 1)
            .drop("copy")
            .withColumn("amount", (F.col("quantity") * F.col("unit_price")).cast("decimal(12,2)"))
        ).cache()
        n_raw, n_valid, n_clean = raw.count(), valid.count(), clean.count()
        if n_clean == 0:
            print(f"clean_orders: no usable orders in {source}", file=sys.stderr)
            return 1
        clean.coalesce(1).write.mode("overwrite").parquet(target)
        print(
            f"clean_orders: {n_raw} raw -> {n_raw - n_valid} invalid dropped, "
            f"{n_valid - n_clean} duplicates dropped -> {n_clean} orders in {target}"
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
