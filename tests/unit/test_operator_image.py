"""The operator image's build: its Python dependencies come from a lock file, every one pinned to a version
inside pyproject.toml's range and to a wheel hash, and the Dockerfile installs exactly that lock."""

from __future__ import annotations

import pathlib
import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOCK = ROOT / "operator" / "requirements.lock"
LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>[^ ]+) --hash=sha256:(?P<sha>[0-9a-f]{64})$")


def locked() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            match = LINE.match(line)
            assert match, f"not `name==version --hash=sha256:...`: {line!r}"
            pins[canonicalize_name(match["name"])] = match["version"]
    return pins


def test_every_runtime_dependency_but_pyspark_is_locked_within_its_range():
    pins = locked()
    for text in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name == "pyspark":
            assert name not in pins  # the operator never starts Spark: 490 MB left out of the image
            continue
        assert name in pins, f"{name} is not in operator/requirements.lock: run `make operator-lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), \
            f"{name}=={pins[name]} is outside pyproject.toml's {requirement.specifier}: run `make operator-lock`"


def test_the_dockerfile_installs_the_lock_with_hashes_required():
    dockerfile = (ROOT / "operator" / "Dockerfile").read_text()
    assert "--require-hashes -r /tmp/requirements.lock" in dockerfile
    assert "COPY operator/requirements.lock" in dockerfile
    assert "!operator/requirements.lock" in (ROOT / "operator" / "Dockerfile.dockerignore").read_text()
    # the package itself goes in without resolving anything again
    assert re.search(r"pip install [^\n]*--no-deps \.", dockerfile)
