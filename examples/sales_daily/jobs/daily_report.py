"""daily_report: both marts of one day -> <out>/reports/ds=YYYY-MM-DD/report.json, and a printed summary.

Reads revenue_by_region and top_products for the day, checks that they agree on the day's total
revenue (a cheap data-quality gate: the job fails if they do not), and writes a small JSON report
(replaced atomically, so re-running a day is idempotent).

    spark-submit daily_report.py --ds 2026-01-01 --out /tmp/dagline-demo
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from decimal import Decimal

TOP_N = 5


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ds", required=True, help="the day to process, YYYY-MM-DD")
    parser.add_argument("--out", required=True, help="root folder of the pipeline's data")
    args = parser.parse_args(argv)
    dt.date.fromisoformat(args.ds)
    return args


def money(value: Decimal) -> float:
    return float(Decimal(value).quantize(Decimal("0.01")))


def main(argv=None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"daily_report {args.ds}").getOrCreate()
    try:
        regions = spark.read.parquet(f"{args.out}/marts/revenue_by_region/ds={args.ds}").collect()
        products = spark.read.parquet(f"{args.out}/marts/top_products/ds={args.ds}").orderBy("rank").collect()
    finally:
        spark.stop()

    revenue_by_region = sum((r["revenue"] for r in regions), Decimal(0))
    revenue_by_product = sum((p["revenue"] for p in products), Decimal(0))
    if not regions or revenue_by_region != revenue_by_product:
        print(
            f"daily_report: the marts disagree for {args.ds}: revenue by region {revenue_by_region}, "
            f"by product {revenue_by_product} ({len(regions)} regions, {len(products)} products)",
            file=sys.stderr,
        )
        return 1
    orders = sum(r["orders"] for r in regions)
    report = {
        "ds": args.ds,
        "orders": orders,
        "units": sum(r["units"] for r in regions),
        "revenue": money(revenue_by_region),
        "avg_order_value": money(revenue_by_region / orders),
        "regions": [
            {"region": r["region"], "orders": r["orders"], "revenue": money(r["revenue"])}
            for r in sorted(regions, key=lambda r: (-r["revenue"], r["region"]))
        ],
        "top_products": [
            {"rank": p["rank"], "product": p["product"], "units": p["units"], "revenue": money(p["revenue"])}
            for p in products[:TOP_N]
        ],
    }
    folder = os.path.join(args.out, "reports", f"ds={args.ds}")
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, "report.json")
    with open(target + ".tmp", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    os.replace(target + ".tmp", target)

    best = report["regions"][0]
    print(f"daily_report {args.ds}: {orders} orders, revenue {report['revenue']:.2f} -> {target}")
    print(f"  best region: {best['region']} ({best['revenue']:.2f})")
    for p in report["top_products"]:
        print(f"  #{p['rank']} {p['product']}: {p['units']} units, {p['revenue']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
