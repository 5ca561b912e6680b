"""The tests' own layout: no module imports a test module (or a conftest.py), and every module a test imports
that is not a test lives in tests/helpers/. A test module is then read on its own, a shared fixture is in a
conftest.py where pytest finds it, and moving or deleting a test breaks no other."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
HELPERS = TESTS / "helpers"

# Modules under tests/ that are neither tests, fixtures nor helpers, each with why it stays where it is.
NOT_HELPERS = {
    "tests/tools": "the set-up tools `make test` runs by path (fetch_k8s_tools.py, install_chromium.py); the chart and "
                   "browser tests call them to make sure their binaries are there",
    "tests/unit/airflow_reference": "a data folder: generate.py writes airflow_timetables.json beside it, run by "
                                    "hand in a throwaway virtualenv with Airflow; nothing imports it",
}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: pathlib.Path) -> set[str]:
    return _imported_by(_module_name(path), path.name == "__init__.py", path.read_text())


def _imported_by(module: str, is_package: bool, source: str) -> set[str]:
    """Every module `source` (the module `module`) imports, by absolute name; `from a import b` counts `a`
    and `a.b` (b may be a module), and relative imports resolve against the module's package."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            imported = ".".join(base + ([node.module] if node.module else []))
            names.add(imported)
            names |= {f"{imported}.{alias.name}" for alias in node.names}
    return names


def _is_test_or_conftest(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return module.startswith("tests.") and (last.startswith("test_") or last == "conftest")


def _python_files(*folders: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for folder in folders for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_imports_a_test_module_or_a_conftest():
    """A fixture two test modules share goes into their conftest.py; a function or constant into tests/helpers/."""
    offenders = [f"{path.relative_to(ROOT)} imports {module}"
                 for path in _python_files(TESTS, ROOT / "bench")
                 for module in sorted(_imported(path)) if _is_test_or_conftest(module)]
    assert offenders == []


def test_every_module_that_is_not_a_test_is_a_helper():
    def allowed(path: pathlib.Path) -> bool:
        relative = path.relative_to(ROOT).as_posix()
        return (path.name.startswith("test_") or path.name in ("conftest.py", "__init__.py")
                or path.is_relative_to(HELPERS) or any(relative.startswith(f"{folder}/") for folder in NOT_HELPERS))

    assert [str(p.relative_to(ROOT)) for p in _python_files(TESTS) if not allowed(p)] == []


def test_every_exception_still_exists():
    """An exception that no longer names a folder is removed, so the list stays the truth."""
    assert [folder for folder in NOT_HELPERS if not (ROOT / folder).is_dir()] == []


def test_the_layout_checks_see_what_they_must():
    """The checks above parse real imports: relative ones resolve against the module's package, and a test
    module imported as a name (`from tests.integration import test_cli`) is found too."""
    assert _module_name(TESTS / "integration" / "__init__.py") == "tests.integration"
    assert _is_test_or_conftest("tests.integration.test_cli") and _is_test_or_conftest("tests.conftest")
    assert not _is_test_or_conftest("tests.helpers.cli") and not _is_test_or_conftest("dagline.testing")
    source = "from .test_cli import cli\nfrom tests.integration import test_api\nfrom ..helpers import dags\n"
    found = _imported_by("tests.integration.test_x", False, source)
    assert {"tests.integration.test_cli", "tests.integration.test_api", "tests.helpers.dags"} <= found
    assert "tests.helpers.dags" in _imported_by("tests.integration", True, "from ..helpers import dags\n")
