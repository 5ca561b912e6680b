"""One error hierarchy: every exception class defined under `src/dagline` (outside `sdk/`, which users'
jobs import alone) derives from `dagline.errors.DaglineError` and says how each face answers it: an exit
code for the CLI and an HTTP status for the API and the web UI. The classes are found by importing every
module, so a new one is held to this too; and the handlers map errors by these attributes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from click.testing import CliRunner

import dagline
from dagline import errors
from dagline.cli.base import main

SKIPPED = ("dagline.sdk", "dagline.client", "dagline.streaming", "dagline.db.migrations")


def dagline_modules() -> list:
    names = [m.name for m in pkgutil.walk_packages(dagline.__path__, "dagline.")
             if not m.name.startswith(SKIPPED) and not m.name.endswith("__main__")]
    return [importlib.import_module(name) for name in ["dagline", *names]]


def exception_classes() -> list[type[BaseException]]:
    return sorted({cls for module in dagline_modules() for cls in vars(module).values()
                   if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == module.__name__},
                  key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


CLASSES = exception_classes()


def test_the_walk_finds_the_classes_of_every_layer():
    found = {f"{cls.__module__}.{cls.__name__}" for cls in CLASSES}
    assert {"dagline.errors.InvalidInput", "dagline.api.errors.ApiError", "dagline.db.claims.PoolsBusy",
            "dagline.web.access.CsrfRefused", "dagline.k8s.client.ApiRejected",
            "dagline.domain.json_values.InvalidJson", "dagline.scheduler.renderer.RenderFailed"} <= found
    assert not any(name.startswith("dagline.sdk.") for name in found)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_exception_class_derives_from_the_base_with_an_exit_code_and_an_http_status(cls):
    assert issubclass(cls, errors.DaglineError), f"{cls.__module__}.{cls.__name__} is not a DaglineError"
    assert cls.exit_code in (1, 2)
    assert isinstance(cls.http_status, int) and 400 <= cls.http_status <= 599
    if cls.exit_code == 2:  # bad input is the caller's fault
        assert 400 <= cls.http_status < 500
    if issubclass(cls, errors.InvalidInput):
        assert cls.exit_code == 2


def test_subclasses_callers_catch_as_value_errors_stay_value_errors():
    from dagline.k8s.crds import SchemaError
    from dagline.k8s.sparkapp import ManifestError
    from dagline.scheduler.renderer import RenderFailed

    assert all(issubclass(cls, ValueError) for cls in (SchemaError, ManifestError, RenderFailed))


def test_the_families_answer_as_documented():
    assert (errors.InvalidInput.exit_code, errors.InvalidInput.http_status) == (2, 422)
    assert (errors.OperationFailed.exit_code, errors.OperationFailed.http_status) == (1, 409)
    assert (errors.NotFound.http_status, errors.DatabaseUnreachable.http_status) == (404, 503)
    assert (errors.Unavailable.http_status, errors.AccessRefused.http_status) == (503, 403)
    error = errors.InvalidInput("must be positive", field="--count", source="a.yaml")
    assert (str(error), error.reason, error.field) == ("a.yaml: --count: must be positive", "must be positive",
                                                      "--count")
    plain = errors.OperationFailed("the pool is in use")
    assert (plain.reason, plain.field) == ("the pool is in use", None)


@pytest.mark.parametrize("cls", [errors.NotFound, errors.Unavailable, errors.AccessRefused, errors.InvalidInput])
def test_the_cli_exits_with_the_errors_own_code(cls):
    @main.command(f"raise-{cls.__name__.lower()}")
    def raiser():
        raise cls("it went wrong")

    try:
        result = CliRunner().invoke(main, ["--db", "sqlite://", f"raise-{cls.__name__.lower()}"])
    finally:
        main.commands.pop(f"raise-{cls.__name__.lower()}")
    assert result.exit_code == cls.exit_code and "error: it went wrong" in result.output
    assert "Traceback" not in result.output
