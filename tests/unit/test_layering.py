"""The layering holds: pure domain code imports no database or scheduler code, the database layer no
scheduler, the core no executors' internals or Kubernetes; `operator/` is never a Python package."""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "dagline"

PURE = {"times", "errors", "clock", "spec", "templating", "timetable", "deps", "limits"}
FORBIDDEN = {
    # module (or package) -> prefixes it must not import
    **{m: ("dagline.db", "dagline.scheduler", "dagline.executors", "dagline.cli", "dagline.k8s",
           "sqlalchemy", "kopf", "kubernetes") for m in PURE},
    "db": ("dagline.scheduler", "dagline.executors", "dagline.cli", "dagline.k8s", "kopf", "kubernetes"),
    "scheduler": ("dagline.cli", "dagline.k8s", "kopf", "kubernetes"),
    "executors": ("dagline.scheduler", "dagline.db", "dagline.cli", "dagline.k8s"),
}


def _imports(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_layers_import_only_downwards():
    problems = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        layer = rel.parts[0].removesuffix(".py")
        for name in _imports(path):
            for prefix in FORBIDDEN.get(layer, ()):
                if name == prefix or name.startswith(prefix + "."):
                    problems.append(f"{rel} imports {name}")
            if layer != "k8s" and name.split(".")[0] in ("kopf", "kubernetes"):
                problems.append(f"{rel} imports {name} (only dagline.k8s may)")
    assert problems == []


def test_every_module_says_its_role():
    missing = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
               if "migrations/versions" not in str(p) and not ast.get_docstring(ast.parse(p.read_text()))]
    assert missing == []


def test_row_locks_are_taken_only_in_the_claims_module():
    """Every FOR UPDATE (SKIP LOCKED / NOWAIT) is a named function in `dagline.db.claims`, where its
    invariant, its ORDER BY and its caps can be read in one place."""
    claims = SRC / "db" / "claims.py"
    offenders = [
        f"{path.relative_to(SRC)}:{n}"
        for path in SRC.rglob("*.py") if path != claims
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "with_for_update" in line or "FOR UPDATE" in line.upper().replace("_", " ")
    ]
    assert offenders == []
    assert "with_for_update" in claims.read_text()


def test_operator_folder_is_not_a_package():
    assert not (SRC.parents[1] / "operator" / "__init__.py").exists()


def test_the_limits_module_is_plain_data():
    """`dagline.limits` is imported by every layer (the loaders, the CLI, the scheduler's render budget):
    it imports nothing of dagline, so it can never close an import cycle."""
    assert {name for name in _imports(SRC / "limits.py") if name.startswith("dagline")} == set()
