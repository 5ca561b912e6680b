"""The durations chart as a user reads it: one unit on every label, runs named under the bars, and a
duration a frozen clock could not measure shown as not measured rather than `0.0s`."""

from __future__ import annotations

from dagline.cli.display import duration as cli_duration
from dagline.web.charts import duration_chart
from dagline.web.render import duration as web_duration


def _points(seconds: list[float | None]) -> list[dict]:
    return [{"run_pk": i, "run_id": f"r{i}", "state": "success", "duration_s": s} for i, s in enumerate(seconds)]


def test_every_label_of_a_chart_is_in_one_unit():
    chart = duration_chart(_points([31.2, 45.0, 125.0]), 45.0)
    labels = [t["label"] for t in chart["ticks"]] + [chart["median_label"]] + [b["duration"] for b in chart["bars"]]
    assert {label[-1] for label in labels} == {"m"}, labels  # not `31.2s` beside `1.0m`
    assert chart["median_label"] == "0.8m" and chart["bars"][0]["duration"] == "0.5m"
    short = duration_chart(_points([3.0, 4.5]), 4.0)
    assert {t["label"][-1] for t in short["ticks"]} == {"s"}


def test_the_bars_are_labelled_with_their_runs_spread_evenly():
    labels = [("01-05", "22:00"), ("", "23:00"), ("01-06", "00:00"), ("", "01:00"), ("", "02:00")]
    chart = duration_chart(_points([1.0] * 5), 1.0, labels=labels, max_labels=3)
    assert [b["label"] for b in chart["bars"]] == ["01-05 22:00", None, "01-06 00:00", None, "02:00"]


def test_a_duration_a_frozen_clock_could_not_measure_is_not_shown_as_zero():
    assert cli_duration(0.0) == "—" and web_duration(0) == "—"
    assert cli_duration(0.4) == "0.4s" and web_duration(0.4) == "0.4s"
