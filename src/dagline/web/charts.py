"""Pictures laid out on the server, as plain geometry the templates draw as SVG (pure functions; no
JavaScript needed to see them): the DAG graph (layers by longest path, ordered to cross few edges),
the Gantt chart of a run's tries, and a task's durations across runs with the median line."""

from __future__ import annotations

import dataclasses
import datetime as dt

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 170, 34, 70, 22, 16


@dataclasses.dataclass(frozen=True)
class Node:
    task_id: str
    x: float
    y: float
    state: str | None


@dataclasses.dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: str
    state: str | None  # the upstream task's state: what the edge carries


def layout_graph(upstream: dict[str, tuple[str, ...]], states: dict[str, str]) -> dict:
    """Nodes left to right by longest path from a root; within a layer ordered by the mean position of
    their upstream tasks (one sweep), which keeps chains straight and crossings few."""
    layer: dict[str, int] = {}
    for task in upstream:  # `upstream` is in topological order (Dag.tasks)
        layer[task] = 1 + max((layer[u] for u in upstream[task] if u in layer), default=-1)
    layers: dict[int, list[str]] = {}
    for task, depth in layer.items():
        layers.setdefault(depth, []).append(task)
    position: dict[str, float] = {}
    for depth in sorted(layers):
        members = layers[depth]
        if depth:
            members.sort(key=lambda t: (sum(position[u] for u in upstream[t]) / len(upstream[t])
                                        if upstream[t] else 0.0))
        for i, task in enumerate(members):
            position[task] = float(i)
    tallest = max((len(m) for m in layers.values()), default=0)
    height = PAD * 2 + tallest * NODE_H + max(0, tallest - 1) * GAP_Y
    nodes = {}
    for depth, members in layers.items():
        offset = (tallest - len(members)) * (NODE_H + GAP_Y) / 2
        for i, task in enumerate(members):
            nodes[task] = Node(task, PAD + depth * (NODE_W + GAP_X), PAD + offset + i * (NODE_H + GAP_Y),
                               states.get(task))
    edges = []
    for task, ups in upstream.items():
        for u in ups:
            a, b = nodes[u], nodes[task]
            x1, y1, x2, y2 = a.x + NODE_W, a.y + NODE_H / 2, b.x, b.y + NODE_H / 2
            mid = (x1 + x2) / 2
            path = f"M{x1:.0f},{y1:.0f} C{mid:.0f},{y1:.0f} {mid:.0f},{y2:.0f} {x2 - 6:.0f},{y2:.0f}"
            edges.append(Edge(u, task, path, states.get(u)))
    width = PAD * 2 + (max(layers, default=0) + 1) * NODE_W + max(layers, default=0) * GAP_X
    return {"nodes": list(nodes.values()), "edges": edges, "width": width, "height": height,
            "node_w": NODE_W, "node_h": NODE_H}


def gantt(tries: list[dict], *, now: dt.datetime, width: int = 900, row_h: int = 22, label_w: int = 200) -> dict:
    """One bar per try, from its start to its end (or now, while it runs), on the run's own time axis;
    the wait between queued and started drawn thin before it."""
    started = [t for t in tries if t["start"] or t["queued_at"]]
    if not started:
        return {"bars": [], "width": width, "height": 0, "label_w": label_w, "ticks": []}
    t0 = min(t["queued_at"] or t["start"] for t in started)
    t1 = max((t["end"] or now) for t in started)
    span = max((t1 - t0).total_seconds(), 1e-3)
    scale = (width - label_w - 20) / span
    bars = []
    for i, t in enumerate(started):
        begin = t["start"] or t["queued_at"]
        end = t["end"] or now
        x = label_w + (begin - t0).total_seconds() * scale
        w = max(2.0, (end - begin).total_seconds() * scale) if t["start"] else 2.0
        wait_x = label_w + ((t["queued_at"] or begin) - t0).total_seconds() * scale
        bars.append({**t, "x": round(x, 1), "w": round(w, 1), "y": 24 + i * row_h, "wait_x": round(wait_x, 1),
                     "wait_w": round(max(0.0, x - wait_x), 1)})
    ticks = []
    for k in range(5):
        seconds = span * k / 4
        ticks.append({"x": round(label_w + seconds * scale, 1), "label": _short(seconds)})
    return {"bars": bars, "width": width, "height": 24 + len(bars) * row_h + 8, "label_w": label_w, "ticks": ticks,
            "row_h": row_h}


def _short(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


_UNITS = (("s", 1.0), ("m", 60.0), ("h", 3600.0))


def chart_unit(top_s: float) -> tuple[str, float]:
    """The one unit a chart's axis and labels use, chosen by its largest value: (suffix, seconds per unit)."""
    return next(((name, size) for name, size in reversed(_UNITS) if top_s >= size * 1.5 and name != "s"),
                _UNITS[0])


def _in_unit(seconds: float, unit: tuple[str, float]) -> str:
    return f"{seconds / unit[1]:.1f}{unit[0]}"


def duration_chart(points: list[dict], median_s: float | None, *, width: int = 900, height: int = 260,
                   labels: list[tuple[str, str]] | None = None, max_labels: int = 24) -> dict:
    """Bars of a task's durations across runs (oldest left), with the median as a dashed line. Every
    label of the axis and the median is in one unit (`chart_unit`); under the bars, the runs' names
    (`labels`: `times.run_labels` of the points, date and time at the schedule's resolution), at most
    `max_labels` of them, evenly spread, the first and the last included."""
    known = [p["duration_s"] for p in points if p["duration_s"] is not None]
    top = max(known + [median_s or 0.0, 1e-3])
    unit = chart_unit(top)
    left, bottom, plot_h = 60, 40, height - 60
    slot = (width - left - 10) / max(1, len(points))
    step = max(1, -(-len(points) // max_labels))
    bars = []
    for i, p in enumerate(points):
        h = (p["duration_s"] or 0.0) / top * plot_h
        label = None
        if labels and (i % step == 0 or i == len(points) - 1):
            label = " ".join(part for part in labels[i] if part) or None
        bars.append({**p, "x": round(left + i * slot + slot * 0.1, 1), "w": round(max(1.0, slot * 0.8), 1),
                     "y": round(height - bottom - h, 1), "h": round(h, 1), "label": label,
                     "label_x": round(left + i * slot + slot / 2, 1),
                     "duration": None if p["duration_s"] is None else _in_unit(p["duration_s"], unit)})
    median_y = None if median_s is None else round(height - bottom - median_s / top * plot_h, 1)
    ticks = [{"y": round(height - bottom - plot_h * k / 4, 1), "label": _in_unit(top * k / 4, unit)} for k in range(5)]
    return {"bars": bars, "median_y": median_y,
            "median_label": None if median_s is None else _in_unit(median_s, unit),
            "width": width, "height": height, "left": left, "ticks": ticks, "label_y": height - bottom + 14}
