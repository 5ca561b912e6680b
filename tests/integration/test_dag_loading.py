"""A scheduler loads the current version of every active, unpaused DAG when it starts
(`DagCache.warm`), so the first runs of each DAG do not pay for reading and building it; a version
that cannot be read does not stop the start (the step that needs it records the DAG's import error).
A replica that stays (not `--until-idle`) also starts its template renderer process with itself, so
its first templated launch does not wait for a Python process to start."""

from __future__ import annotations

from sqlalchemy import event, select, update

from dagline.clock import SystemClock
from dagline.db.models import dag_t, dag_version_t
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.spec import load_dag_paths
from dagline.store.dags import DagCache, apply_dags
from tests.helpers.dags import dag, task, write


def _apply(db, tmp_path) -> dict[str, int]:
    write(tmp_path, dag("on", task("a")))
    write(tmp_path, dag("off", task("a"), paused=True))
    apply_dags(db, load_dag_paths([str(tmp_path)]), now=SystemClock().now())
    with db.begin() as conn:
        return dict(conn.execute(select(dag_t.c.dag_id, dag_t.c.current_version_id)).all())


def test_a_warmed_cache_holds_the_active_unpaused_dags_and_reads_them_no_more(db, tmp_path):
    versions = _apply(db, tmp_path)
    cache = DagCache()
    with db.begin() as conn:
        assert cache.warm(conn) == 1  # `off` is paused: its runs start only once it is unpaused
    statements = []
    event.listen(db.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    with db.begin() as conn:
        assert cache.get(conn, versions["on"]).dag_id == "on"
    assert not [s for s in statements if "dag_version" in s]  # not read again: loaded at the warm-up


def test_a_scheduler_starts_even_when_a_current_version_cannot_be_read(db, tmp_path):
    versions = _apply(db, tmp_path)
    with db.begin() as conn:
        conn.execute(update(dag_version_t).where(dag_version_t.c.id == versions["on"]).values(spec='{"not": "a DAG"}'))
    scheduler = Scheduler(db, NoopExecutor(1))
    scheduler.start()
    scheduler.stop()


def test_a_replica_that_stays_starts_its_renderer_with_itself_and_one_run_until_idle_does_not(db, tmp_path):
    _apply(db, tmp_path)
    staying = Scheduler(db, NoopExecutor(1))
    staying.run(should_stop=lambda: True)  # one loop: `on` has no schedule, so nothing was launched
    assert staying.renderer.spawns == 1
    once = Scheduler(db, NoopExecutor(1))
    once.run(until_idle=True)
    assert once.renderer.spawns == 0  # it renders nothing: no process is started for it
