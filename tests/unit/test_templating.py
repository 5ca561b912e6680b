"""Sandboxed Jinja for Spark arguments and conf: checking at load, rendering at launch."""

from __future__ import annotations

import datetime as dt

import pendulum
import pytest

from dagline.domain.templating import (
    TEMPLATE_VARIABLES,
    build_context,
    check_template,
    referenced_params,
    render,
    render_spark,
)
from dagline.spec import SparkSpec

UTC = dt.timezone.utc


def context(**overrides):
    values = dict(
        dag_id="sales-daily", task_id="extract", run_id="scheduled__2026-03-01T02:00:00+00:00",
        logical_date=dt.datetime(2026, 3, 1, 2, 0, tzinfo=UTC),
        data_interval_start=dt.datetime(2026, 3, 1, 2, 0, tzinfo=UTC),
        data_interval_end=dt.datetime(2026, 3, 2, 2, 0, tzinfo=UTC),
        try_number=2, params={"out": "/data/out", "tables": ["a", "b"]}, conf={"full": True},
    )
    values.update(overrides)
    return build_context(**values)


def test_the_variables():
    assert TEMPLATE_VARIABLES == {
        "ds", "ds_nodash", "logical_date", "data_interval_start", "data_interval_end",
        "run_id", "dag_id", "dag_namespace", "task_id", "try_number", "params", "conf", "signal",
    }
    assert set(context()) == TEMPLATE_VARIABLES


def test_signal_is_the_signal_that_started_the_try_and_null_otherwise():
    started = {**context(), "signal": {"key": "model.published", "value": {"path": "/m/7"}, "seq": 42,
                                       "source": "try:ml/r/train/1"}}
    assert render("{{ signal.key }} {{ signal.value.path }} {{ signal.seq }} {{ signal.source }}", started) == \
        "model.published /m/7 42 try:ml/r/train/1"
    assert render("{{ signal.value | tojson }}", started) == '{"path": "/m/7"}'
    assert render("{{ signal is none }} {{ signal.value.path if signal else 'none' }}", context()) == "True none"
    with pytest.raises(ValueError, match="cannot render"):
        render("{{ signal.value.path }}", context())


@pytest.mark.parametrize("template, expected", [
    ("{{ ds }}", "2026-03-01"),
    ("{{ ds_nodash }}", "20260301"),
    ("{{ logical_date }}", "2026-03-01 02:00:00+00:00"),  # pendulum 3's str(); .isoformat() has the T
    ("{{ logical_date.isoformat() }}", "2026-03-01T02:00:00+00:00"),
    ("{{ data_interval_start.isoformat() }}", "2026-03-01T02:00:00+00:00"),
    ("{{ data_interval_end.isoformat() }}", "2026-03-02T02:00:00+00:00"),
    ("{{ run_id }}", "scheduled__2026-03-01T02:00:00+00:00"),
    ("{{ dag_id }}", "sales-daily"),
    ("{{ task_id }}", "extract"),
    ("{{ try_number }}", "2"),
    ("{{ params.out }}", "/data/out"),
    ("{{ params['tables'] | join(',') }}", "a,b"),
    ("{{ conf.full }}", "True"),
    ("{{ conf.get('missing', 'fallback') }}", "fallback"),
    ("{{ logical_date.strftime('%Y/%m') }}", "2026/03"),
    ("{{ data_interval_end.subtract(days=1).to_date_string() }}", "2026-03-01"),
    ("plain text", "plain text"),
])
def test_render_every_variable(template, expected):
    check_template(template)
    assert render(template, context()) == expected


def test_ds_is_the_local_date_in_the_dag_time_zone():
    # 2026-03-02 00:00 in Amsterdam is 2026-03-01 23:00 UTC: `ds` is the local day, not the UTC one.
    midnight = dt.datetime(2026, 3, 1, 23, 0, tzinfo=UTC)
    ctx = context(logical_date=midnight, data_interval_start=midnight,
                  data_interval_end=midnight + dt.timedelta(days=1), timezone="Europe/Amsterdam")
    assert ctx["ds"] == "2026-03-02"
    assert ctx["ds_nodash"] == "20260302"
    assert isinstance(ctx["logical_date"], pendulum.DateTime)
    assert ctx["logical_date"].timezone_name == "Europe/Amsterdam"
    assert render("{{ logical_date.isoformat() }} {{ data_interval_end.hour }}", ctx) == "2026-03-02T00:00:00+01:00 0"
    assert context(logical_date=midnight)["ds"] == "2026-03-01"  # the same instant, in UTC


def test_naive_times_are_utc():
    ctx = context(logical_date=dt.datetime(2026, 3, 1, 23, 0), timezone="Europe/Amsterdam")
    assert ctx["ds"] == "2026-03-02"


def test_missing_conf_is_empty():
    assert context(conf=None)["conf"] == {}
    assert render("{{ conf.get('x', 1) }}", context(conf=None)) == "1"


def test_render_spark_renders_arguments_and_conf():
    spark = SparkSpec(
        main_application_file="jobs/extract.py",
        arguments=["--date", "{{ ds }}", "--out", "{{ params.out }}/{{ ds_nodash }}", "--try", "{{ try_number }}"],
        conf={"spark.app.name": "{{ dag_id }}.{{ task_id }}", "spark.sql.shuffle.partitions": "4"},
    )
    arguments, conf = render_spark(spark, context())
    assert arguments == ["--date", "2026-03-01", "--out", "/data/out/20260301", "--try", "2"]
    assert conf == {"spark.app.name": "sales-daily.extract", "spark.sql.shuffle.partitions": "4"}
    assert spark.arguments[1] == "{{ ds }}"  # the spec is not changed


@pytest.mark.parametrize("template", [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ params.__class__ }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ logical_date.__init__.__globals__ }}",
])
def test_sandbox_blocks_python_internals(template):
    with pytest.raises(ValueError, match="cannot render template"):
        render(template, context())


def test_sandbox_blocks_changing_params_and_conf():
    ctx = context()
    for template in ("{{ params.update({'out': '/'}) }}", "{{ params.tables.append('c') }}", "{{ conf.clear() }}"):
        with pytest.raises(ValueError, match="cannot render template"):
            render(template, ctx)
    assert ctx["params"] == {"out": "/data/out", "tables": ["a", "b"]}


@pytest.mark.parametrize("template", ["{{ params.nope }}", "{{ conf['absent'] }}", "{{ params.out.nope }}"])
def test_undefined_values_fail_instead_of_rendering_empty(template):
    with pytest.raises(ValueError) as caught:
        render(template, context())
    assert template in str(caught.value)


def test_a_template_runtime_error_is_a_value_error():
    with pytest.raises(ValueError, match="ZeroDivisionError"):
        render("{{ 1 / 0 }}", context())


@pytest.mark.parametrize("template", [
    "{{ ds }}", "{{ params.out }}/{{ conf.get('x', 'y') }}", "{% set day = ds %}{{ day }}",
    "{% for t in params.tables %}{{ t }}{% endfor %}", "{{ range(3) | list }}", "no template at all", "",
])
def test_check_template_accepts_known_variables(template):
    check_template(template)


@pytest.mark.parametrize("template, unknown", [
    ("{{ execution_date }}", "execution_date"),
    ("{{ ds }}/{{ macros.ds_add(ds, 1) }}", "macros"),
    ("{% for t in tables %}{{ t }}{% endfor %}", "tables"),
])
def test_check_template_refuses_unknown_variables(template, unknown):
    with pytest.raises(ValueError, match=f"unknown variable {unknown}"):
        check_template(template)


@pytest.mark.parametrize("template", ["{{ ds ", "{% if ds %}x", "{{ ds | no_such_filter }}", "{{ }}"])
def test_check_template_refuses_syntax_errors(template):
    with pytest.raises(ValueError, match="does not parse"):
        check_template(template)


def test_referenced_params():
    assert referenced_params("{{ params.out }}/{{ params['day'] }}/{{ ds }}") == {"out", "day"}
    assert referenced_params("{{ params.get('x', 1) }}{{ params.items() | list }}{{ conf.out }}") == set()


# -- bounds: a template is the user's, so it may be hostile or careless ------------------------------

HUGE = [
    ("{{ 'x' * 10**10 }}", "times 10,000,000,000"),
    ("{{ 'x' | center(10000000000) }}", "filter center called with 10,000,000,000"),
    ("{{ '%1000000000s' % 'x' }}", "width of 1,000,000,000"),
    ("{{ '{:>1000000000}'.format('x') }}", "width of 1,000,000,000"),
    ("{{ 'x'.ljust(10000000000) }}", "ljust() called with 10,000,000,000"),
    ("{{ [0] * 10000000000 }}", "times 10,000,000,000"),
    ("{{ 7 ** 100000 }}", "too large a number"),
    ("{% for i in range(99999) %}{{ 'x' * 50 }}{% endfor %}", "output over the budget of 1,048,576"),
    ("{% set ns = namespace(x='ab') %}{% for i in range(30) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}{{ ns.x }}",
     "'~' would make 2,097,152 characters"),
]


@pytest.mark.parametrize("template, message", HUGE)
def test_a_template_that_would_produce_too_much_is_accepted_at_load_without_folding_and_fails_at_render(
        template, message):
    # Jinja folds constant expressions while compiling: before the bounded sandbox, check_template
    # itself computed 'x' * 10**10 (10 GB) and the load ran out of memory.
    check_template(template)
    with pytest.raises(ValueError, match="exceeds a bound|ran out of memory") as caught:
        render(template, context())
    assert message in str(caught.value) or "ran out of memory" in str(caught.value)


def test_ranges_stay_bounded_by_the_sandbox():
    with pytest.raises(ValueError, match="Range too big"):
        render("{% for i in range(10**10) %}x{% endfor %}", context())


@pytest.mark.parametrize("template, name", [
    ("{{ params.items }}", "items"),
    ("{{ ds.upper }}", "upper"),
    ("{{ logical_date.isoformat }}", "isoformat"),
    ("{{ range }}", "safe_range"),
])
def test_a_function_or_method_is_not_a_value(template, name):
    with pytest.raises(ValueError, match=f"outputs the function or method '{name}', not a value"):
        render(template, context())


def test_ordinary_arithmetic_and_filters_still_work():
    assert render("{{ 3 * 4 }} {{ 2 ** 10 }} {{ 7 // 2 }} {{ 7 % 4 }} {{ 'ab' * 3 }} {{ [1] + [2] }}", context()) == \
        "12 1024 3 3 ababab [1, 2]"
    assert render("{{ 'x' | center(5) }}|{{ ds | replace('-', '') }}|{{ params.tables | join('+') }}", context()) == \
        "  x  |20260301|a+b"
    assert render("{{ '%05d' % try_number }} {{ '{:>4}'.format(task_id[:2]) }}", context()) == "00002   ex"


# -- the renderer process: the time budget a thread cannot enforce -----------------------------------

NEVER_ENDS = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"


def test_a_template_that_never_ends_fails_on_the_time_budget_naming_task_and_argument_and_the_next_renders():
    from dagline.scheduler.renderer import Renderer, RenderFailed, RenderRequest

    renderer = Renderer(time_budget_s=0.5)
    try:
        request = RenderRequest("extract", [("spark.arguments[0]", "{{ ds }}"), ("spark.arguments[1]", NEVER_ENDS)],
                                context())
        with pytest.raises(RenderFailed, match=r"task extract, spark.arguments\[1\]: template .* did not finish "
                                               r"rendering within the time budget of 0.5s"):
            renderer.render(request)
        assert renderer.kills == 1
        assert renderer.render(RenderRequest("load", [("spark.arguments[0]", "{{ ds }}")], context())) == {
            "spark.arguments[0]": "2026-03-01"}  # a fresh process took over
        assert renderer.spawns == 2
        with pytest.raises(RenderFailed, match=r"task load, spark.conf\['x'\]: .*outputs the function or method"):
            renderer.render(RenderRequest("load", [("spark.conf['x']", "{{ params.items }}")], context()))
    finally:
        renderer.close()


def test_a_prestarted_renderer_has_its_process_before_the_first_render_and_again_after_a_kill():
    from dagline.scheduler.renderer import Renderer, RenderFailed, RenderRequest

    renderer = Renderer(time_budget_s=0.5)
    try:
        renderer.prestart()
        assert renderer.spawns == 1  # started with the replica, not at its first launch
        assert renderer.render(RenderRequest("extract", [("a", "{{ ds }}")], context())) == {"a": "2026-03-01"}
        assert renderer.spawns == 1  # the render used it
        with pytest.raises(RenderFailed, match="time budget"):
            renderer.render(RenderRequest("extract", [("a", NEVER_ENDS)], context()))
        assert renderer.spawns == 2  # its successor started as the killed one went, before any render asked
        assert renderer.render(RenderRequest("load", [("a", "{{ try_number }}")], context())) == {"a": "2"}
        assert renderer.spawns == 2
    finally:
        renderer.close()


def test_a_stopping_replica_abandons_a_render_at_once():
    from dagline.scheduler.renderer import Renderer, RenderInterrupted, RenderRequest

    stopping = []
    renderer = Renderer(time_budget_s=600, should_stop=lambda: bool(stopping))
    try:
        renderer.render(RenderRequest("extract", [("a", "{{ ds }}")], context()))  # started
        stopping.append(True)
        with pytest.raises(RenderInterrupted):
            renderer.render(RenderRequest("extract", [("a", NEVER_ENDS)], context()))
    finally:
        renderer.close()
