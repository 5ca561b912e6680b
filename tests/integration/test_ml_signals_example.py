"""examples/ml-signals end to end with real PySpark (the example folder is executable documentation):
the streaming trainer publishes two models, a batch try validates each, and the streaming server is
restarted with each; every signal is sent over HTTP by the jobs themselves with their try's token.

Real time by nature (streaming jobs): the scheduler runs on the wall clock and the test waits for
what the jobs write, with a generous bound; it asserts what happened, never how long it took."""

from __future__ import annotations

import json
import pathlib
import threading
import time

import pytest

from dagline.api import create_app
from dagline.api.server import ApiServer
from dagline.clock import SystemClock
from dagline.executors.local import LocalExecutor
from dagline.scheduler.loop import Scheduler
from dagline.store.runs import stop_task, trigger_run
from dagline.store.signals import list_signals
from tests.helpers.harness import apply, runs, tis

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "ml-signals"


def served_models(log: pathlib.Path) -> list[str]:
    if not log.exists():
        return []
    models = []
    for line in log.read_text().splitlines():
        model = line.split(" model ")[1].split()[0]
        if not models or models[-1] != model:
            models.append(model)
    return models


def wait_for(condition, what: str, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(1.0)


@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_two_models_go_through_train_evaluate_and_serve(sqlite_db, tmp_path):
    db, data = sqlite_db, tmp_path / "data"
    data.mkdir()
    apply(db, str(EXAMPLE / "dag.yaml"))
    api = ApiServer(create_app(db), host="127.0.0.1", port=0).start()
    scheduler = Scheduler(db, LocalExecutor(parallelism=3, log_folder=str(tmp_path / "logs")),
                          api_url=f"http://127.0.0.1:{api.port}")
    loop = threading.Thread(target=scheduler.run, daemon=True)
    loop.start()
    try:
        run = trigger_run(db, "ml-signals", now=SystemClock().now(), conf={"root": str(data), "models": 2, "every": 5})
        wait_for(lambda: served_models(data / "serving.log")[-1:] == ["v2"], "model v2 served")
        # as the demo ends it: every model went through the chain (no evaluate try in flight), so stopping
        # the two streaming tasks ends the run cleanly (`runs stop` would end it failed: it was stopped)
        for task in ("train", "serve"):
            stop_task(db, run.run_id, task, now=SystemClock().now())
        wait_for(lambda: runs(db, "ml-signals")[0]["state"] != "running", "the run to end once stopped")
    finally:
        scheduler.request_stop()
        loop.join(60)
        api.stop()

    assert served_models(data / "serving.log") == ["none", "v1", "v2"]
    with db.begin() as conn:
        log = list_signals(conn)
    sent = [(s["key"], s["id"], s["source"]) for s in log if not s["key"].startswith("dagline.")]
    prefix = f"try:ml-signals/{run.run_id}"
    assert sorted(sent) == [("model.published", "model-1", f"{prefix}/train/1"),
                            ("model.published", "model-2", f"{prefix}/train/1"),
                            ("model.validated", "validated-1", f"{prefix}/evaluate/1"),
                            ("model.validated", "validated-2", f"{prefix}/evaluate/2")]
    caused = {(s["key"], s["value"]["version"]): [(a["task_id"], a["action"], a["status"], a["try_number"])
                                                  for a in s["actions"]]
              for s in log if s["key"].startswith("model.")}
    assert caused == {("model.published", 1): [("evaluate", "start", "done", 1)],
                      ("model.published", 2): [("evaluate", "start", "done", 2)],
                      ("model.validated", 1): [("serve", "restart", "done", 2)],
                      ("model.validated", 2): [("serve", "restart", "done", 3)]}
    final = tis(db, runs(db, "ml-signals")[0]["id"])
    assert {k: (v.state, v.try_number) for k, v in final.items()} == {
        "train": ("success", 1), "evaluate": ("success", 2), "serve": ("success", 3)}
    assert runs(db, "ml-signals")[0]["state"] == "success"
    assert json.loads((data / "models" / "v2.json").read_text())["version"] == 2
