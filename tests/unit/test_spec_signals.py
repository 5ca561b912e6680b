"""Signal rules in the DAG spec: triggers, task `on` rules, streaming mode, and what apply refuses."""

from __future__ import annotations

import textwrap

import pytest

from dagline.errors import InvalidInput
from dagline.spec import Dag, parse_dag_yaml

ML = textwrap.dedent("""
    apiVersion: dagline.io/v1alpha1
    kind: DAG
    metadata: {name: ml}
    spec:
      schedule: null
      maxActiveRuns: 1
      triggers:
        - signal: features.ready
      tasks:
        - id: train
          mode: streaming
          spark: {mainApplicationFile: jobs/train.py}
        - id: evaluate
          onSignal:
            - {signal: model.published, action: start, handling: each}
          spark: {mainApplicationFile: jobs/evaluate.py, arguments: ["--model", "{{ signal.value.path }}"]}
        - id: serve
          mode: streaming
          stopGracePeriod: PT10S
          onSignal:
            - {signal: model.validated, action: restart}
            - {signal: serving.off, action: stop, scope: run}
          spark: {mainApplicationFile: jobs/serve.py, arguments: ["--model", "{{ signal.value.path }}"]}
""")


def _dag(text: str) -> Dag:
    [doc] = parse_dag_yaml(text)
    return Dag.from_document(doc)


def test_the_design_example_parses_with_its_rules_resolved():
    dag = _dag(ML)
    assert [t.signal for t in dag.spec.triggers] == ["features.ready"]
    evaluate, serve, train = dag.tasks["evaluate"], dag.tasks["serve"], dag.tasks["train"]
    assert evaluate.waits_for_signal and not serve.waits_for_signal
    assert [(r.signal, r.action, r.handling, r.scope) for r in serve.on] == [
        ("model.validated", "restart", "each", "dag"), ("serving.off", "stop", "each", "run")]
    assert train.streaming and train.stop_grace_period.total_seconds() == 30
    assert serve.stop_grace_period.total_seconds() == 10
    assert not evaluate.streaming


def test_a_dag_without_signals_keeps_its_version_and_normal_form():
    dag = _dag(ML.replace("mode: streaming", "mode: batch"))
    assert "mode" not in dag.spec_json["tasks"][0]
    plain = _dag(textwrap.dedent("""
        apiVersion: dagline.io/v1alpha1
        kind: DAG
        metadata: {name: plain}
        spec:
          tasks: [{id: a, spark: {mainApplicationFile: a.py}}]
    """))
    assert "triggers" not in plain.spec_json and set(plain.spec_json["tasks"][0]) >= {"id", "spark"}
    assert "on" not in plain.spec_json["tasks"][0]
    # rebuilt from the stored form: the same version
    assert Dag.from_spec_json("ml", dag.spec_json).version == dag.version


@pytest.mark.parametrize("change, field, message", [
    (("model.published, action: start", "Model.Published, action: start"), "spec.tasks[1].onSignal[0].signal",
     "not a signal key"),
    (("model.published, action: start", "model.published, action: begin"), "spec.tasks[1].onSignal[0].action", "start"),
    (("handling: each", "handling: all"), "spec.tasks[1].onSignal[0].handling", "each"),
    (("features.ready", "dagline.features"), "spec.triggers[0].signal", "dagline.task.<dag_id>.<task_id>.<state>"),
    (("features.ready", "dagline.task.ml.nosuch.success"), "spec.triggers[0].signal", "names task 'nosuch'"),
    (("features.ready", "dagline.task.other.x.queued"), "spec.triggers[0].signal", "state 'queued' is not signalled"),
    (("model.published, action: start", "dagline.task.ml.evaluate.success, action: start"),
     "spec.tasks[1].onSignal[0].signal", "for ever"),
    (("serving.off, action: stop", "model.validated, action: stop"), "spec.tasks[2].onSignal[1].signal", "one rule per key"),
    (("stopGracePeriod: PT10S", "stopGracePeriod: 10s"), "spec.tasks[2].stopGracePeriod", "ISO-8601"),
    (("mode: streaming\n      stop", "mode: forever\n      stop"), "spec.tasks[2].mode", "batch"),
])
def test_bad_rules_are_refused_naming_the_field(change, field, message):
    with pytest.raises(InvalidInput) as info:
        _dag(ML.replace(*change, 1))
    assert info.value.field == field
    assert message in str(info.value)


def test_a_rule_on_another_dags_task_is_accepted_and_one_on_its_own_other_task_too():
    dag = _dag(ML.replace("features.ready", "dagline.task.upstream-dag.load.success")
               .replace("serving.off", "dagline.task.ml.train.failed"))
    assert dag.spec.triggers[0].signal == "dagline.task.upstream-dag.load.success"


@pytest.mark.parametrize("old", ["on:", "'on':", "true:"])
def test_the_old_on_key_is_read_as_on_signal_with_a_warning(old):
    """`on:` was the key before `onSignal:`; PyYAML and kubectl read it unquoted as the boolean true."""
    warnings: list[str] = []
    [document] = parse_dag_yaml(ML.replace("onSignal:", old), "dag.yaml", warn=warnings.append)
    new = _dag(ML)
    assert Dag.from_document(document).version == new.version  # the same DAG, the same version
    assert [[r.signal for r in t.on] for t in document.spec.tasks] == [[], ["model.published"],
                                                                        ["model.validated", "serving.off"]]
    assert len(warnings) == 2 and all(w.startswith("dag.yaml: spec.tasks[") and "renamed to onSignal" in w
                                      for w in warnings)


def test_no_warning_for_the_new_key():
    warnings: list[str] = []
    parse_dag_yaml(ML, "dag.yaml", warn=warnings.append)
    assert warnings == []
