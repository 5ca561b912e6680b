"""Spark's own log lines are told apart from a job's output (`dagline dags test` shows the job's)."""

from __future__ import annotations

from dagline.executors.spark_chatter import SparkChatter

LOG = """\
WARNING: Using incubator modules: jdk.incubator.vector
Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties
26/11/26 21:53:20 WARN Utils: Set SPARK_LOCAL_IP if you need to bind to another address
extracting --ds 2026-03-02
26/11/26 21:53:37 INFO SparkContext: Running Spark version 4.3.0
26/11/26 21:53:39 WARN Executor: Issue communicating with driver
java.io.IOException: broken pipe
\tat org.apache.spark.rpc.RpcEnv.call(RpcEnv.scala:12)
\t... 3 more
rows 3
26/11/26 21:53:40 ERROR Executor: Exception in task 0.0
\tat org.apache.spark.executor.Executor.run(Executor.scala:1)
Traceback (most recent call last):
  File "job.py", line 3, in <module>
    at home
"""


def test_spark_info_and_warn_lines_and_their_stack_frames_are_hidden_the_rest_is_shown():
    chatter = SparkChatter()
    shown = [line for line in LOG.splitlines() if not chatter.hides(line)]
    assert shown == [
        "extracting --ds 2026-03-02",
        "rows 3",
        "26/11/26 21:53:40 ERROR Executor: Exception in task 0.0",  # errors are shown, with their frames
        "\tat org.apache.spark.executor.Executor.run(Executor.scala:1)",
        "Traceback (most recent call last):",
        '  File "job.py", line 3, in <module>',
        "    at home",
    ]
    assert chatter.hidden == 8  # the WARN line's exception and frames with it
