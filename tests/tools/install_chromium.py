"""Install the headless browser the web UI tests drive: Debian's `chromium`, pinned by version.

The browser tests (tests/browser/) run Playwright for Python (pinned in pyproject's `test` extra)
against the system Chromium at /usr/bin/chromium, through `executable_path`: Playwright never
downloads browsers of its own here. This script makes sure that Chromium is installed:

1. if `/usr/bin/chromium --version` already reports the pinned version, it does nothing (a few ms);
2. otherwise it runs `apt-get install -y chromium=<pinned version>` (as root, or through sudo), after
   an `apt-get update` if apt does not know that version yet;
3. it then checks the version again: another version is an error, never used silently.

`make test` runs it before pytest; the browser tests call `ensure_chromium()` too, so
`pytest tests/browser` alone works on a fresh clone. Prints the browser's path.

    python tests/tools/install_chromium.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

CHROMIUM_PACKAGE_VERSION = "156.0.8078.79-1~deb12u1"  # `apt-cache policy chromium` on Debian 12 (bookworm-security)
CHROMIUM = "/usr/bin/chromium"


class InstallError(RuntimeError):
    pass


def _upstream(package_version: str) -> str:
    return package_version.split("-", 1)[0]


def installed_version(path: str = CHROMIUM) -> str | None:
    """The version `chromium --version` reports (e.g. 156.0.8078.79), or None if it is not there."""
    if not os.path.exists(path):
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"(\d+\.\d+\.\d+\.\d+)", out)
    return found.group(1) if found else None


def _as_root(args: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return args
    if shutil.which("sudo"):
        return ["sudo", "-n", *args]
    raise InstallError(f"installing Chromium needs root (or sudo): run `apt-get install -y "
                       f"chromium={CHROMIUM_PACKAGE_VERSION}` as root")


def _apt(*args: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    result = subprocess.run(_as_root(["apt-get", *args]), capture_output=True, text=True, env=env, timeout=900)
    if result.returncode != 0:
        raise InstallError(f"apt-get {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-2000:]}")


def _apt_knows(version: str) -> bool:
    out = subprocess.run(["apt-cache", "policy", "chromium"], capture_output=True, text=True, timeout=60).stdout
    return version in out


def ensure_chromium() -> str:
    """The path of the pinned Chromium, installed first if needed."""
    wanted = _upstream(CHROMIUM_PACKAGE_VERSION)
    if installed_version() == wanted:
        return CHROMIUM
    if not shutil.which("apt-get"):
        raise InstallError("no apt-get: install Chromium "
                           f"{wanted} at {CHROMIUM} by other means to run the browser tests")
    if not _apt_knows(CHROMIUM_PACKAGE_VERSION):
        _apt("update")
    _apt("install", "-y", "--no-install-recommends", f"chromium={CHROMIUM_PACKAGE_VERSION}")
    got = installed_version()
    if got != wanted:
        raise InstallError(f"{CHROMIUM} reports version {got}, not the pinned {wanted}")
    return CHROMIUM


if __name__ == "__main__":
    try:
        print(ensure_chromium())
    except InstallError as exc:
        print(f"install_chromium: {exc}", file=sys.stderr)
        sys.exit(1)
