"""ingest_orders: land one day of raw orders at <out>/raw/orders/ds=YYYY-MM-DD (Parquet).

Stands in for an export from the order system: the day's orders are generated deterministically
from the date (a random generator seeded with `ds`), so re-running a day writes the same rows. Like
a real feed it carries a few bad rows — a null region, a non-positive quantity, orders sent twice —
which `clean_orders` removes. Only this date's partition is overwritten.

    spark-submit ingest_orders.py --ds 2026-01-01 --out /tmp/dagline-demo
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
from decimal import Decimal

REGIONS = ["north", "south", "east", "west", "central"]
PRODUCTS = {  # product -> list price
    "espresso-beans-1kg": Decimal("18.90"),
    "filter-coffee-500g": Decimal("8.50"),
    "green-tea-100g": Decimal("6.25"),
    "oat-milk-1l": Decimal("2.39"),
    "ceramic-mug": Decimal("12.00"),
    "french-press": Decimal("34.95"),
    "milk-frother": Decimal("49.00"),
    "grinder-manual": Decimal("59.90"),
    "grinder-electric": Decimal("129.00"),
    "paper-filters-100": Decimal("3.49"),
    "travel-cup": Decimal("17.50"),
    "gift-card-25": Decimal("25.00"),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ds", required=True, help="the day to process, YYYY-MM-DD")
    parser.add_argument("--out", required=True, help="root folder of the pipeline's data")
    args = parser.parse_args(argv)
    dt.date.fromisoformat(args.ds)  # fail early on a bad date
    return args


def generate_orders(ds: str) -> list[tuple]:
    """The day's raw orders as rows (order_id, ts, region, product, quantity, unit_price); deterministic."""
    day = dt.date.fromisoformat(ds)
    rng = random.Random(f"sales-daily:{ds}")
    midnight = dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc)
    products = sorted(PRODUCTS)
    rows = []
    for n in range(rng.randint(2500, 4000)):
        product = rng.choice(products)
        discount = Decimal(rng.choice([100, 100, 100, 95, 90])) / 100
        rows.append(
            (
                f"{day:%Y%m%d}-{n:06d}",
                midnight + dt.timedelta(seconds=rng.randrange(86400)),
                rng.choice(REGIONS),
                product,
                rng.choices([1, 2, 3, 4, 6], weights=[60, 20, 10, 6, 4])[0],
                (PRODUCTS[product] * discount).quantize(Decimal("0.01")),
            )
        )
    # The feed's known defects, a handful of each.
    for i in rng.sample(range(len(rows)), 7):  # region lost by the point of sale
        rows[i] = rows[i][:2] + (None,) + rows[i][3:]
    for i in rng.sample(range(len(rows)), 5):  # returns booked as orders
        rows[i] = rows[i][:4] + (-rows[i][4],) + rows[i][5:]
    for i in rng.sample(range(len(rows)), 12):  # orders sent twice, a little later
        original = rows[i]
        rows.append((original[0], original[1] + dt.timedelta(seconds=rng.randint(1, 120))) + original[2:])
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("order_id", T.StringType(), False),
            T.StructField("ts", T.TimestampType(), False),
            T.StructField("region", T.StringType(), True),
            T.StructField("product", T.StringType(), False),
            T.StructField("quantity", T.IntegerType(), False),
            T.StructField("unit_price", T.DecimalType(10, 2), False),
        ]
    )
    spark = SparkSession.builder.appName(f"ingest_orders {args.ds}").getOrCreate()
    try:
        rows = generate_orders(args.ds)
        target = f"{args.out}/raw/orders/ds={args.ds}"
        df = spark.createDataFrame(rows, schema)
        df.coalesce(1).write.mode("overwrite").parquet(target)
        print(f"ingest_orders: wrote {len(rows)} raw orders for {args.ds} to {target}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
