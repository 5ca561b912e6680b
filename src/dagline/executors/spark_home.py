"""Where the installed Spark is: the `pyspark` package's own `spark-submit`, not one from PATH.

The local executor's `spark-submit` tries and the replica's Spark Connect server both start from it,
so jobs run with the same Spark and the same Python as the scheduler.
"""

from __future__ import annotations

import os


def find_spark_submit() -> str:
    """`<spark_home>/bin/spark-submit` of the installed pyspark package."""
    try:
        from pyspark.find_spark_home import _find_spark_home

        spark_home = _find_spark_home()
    except Exception:  # noqa: BLE001 - fall back to the package folder
        import pyspark

        spark_home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    return os.path.join(spark_home, "bin", "spark-submit")
