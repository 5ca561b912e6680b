"""Install the headless browser the web UI tests drive: Debian's current `chromium`, with a floor.

The browser tests (tests/browser/) run Playwright for Python (pinned in pyproject's `test` extra)
against the system Chromium at /usr/bin/chromium, through `executable_path`: Playwright never
downloads browsers of its own here. Why Debian's package, and why no exact pin, is written down in
docs/adr/0001-chromium-for-the-browser-tests.md. In short: Debian's security archive keeps only its
newest build, so an exact pin breaks every fresh machine at the next security update, while apt
brings the libraries Chromium needs. So this script

1. uses the Chromium already at /usr/bin/chromium when its major version is at least the floor
   (`CHROMIUM_MIN_MAJOR`), newer builds included, and asks apt nothing (a few ms);
2. otherwise installs (or upgrades) whatever build apt offers now, `apt-get install chromium` with no
   version, running `apt-get update` first when apt offers no candidate, and once more before a
   second try when the install fails (the lists named a build the archive no longer has);
3. refuses a build below the floor with a message naming both versions, never using it silently;
4. prints the version used, so every run's log says which browser the tests ran in.

The apt calls go through `Apt`, whose `run` a test replaces to fake the package tool's answers
(tests/unit/test_install_chromium.py): the machine is never changed by those tests.

`make test` runs it before pytest; the browser tests call `ensure_chromium()` too, so
`pytest tests/browser` alone works on a fresh clone.

    python tests/tools/install_chromium.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence

CHROMIUM = "/usr/bin/chromium"
# The oldest Chromium major the pinned Playwright (1.65.0, built for Chromium 158) was run with here:
# Debian 12's bookworm-security build 156 passed the browser tests. Raise it with Playwright's pin.
CHROMIUM_MIN_MAJOR = 156


class InstallError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Answer:
    returncode: int
    stdout: str = ""
    stderr: str = ""


def _run(args: Sequence[str]) -> Answer:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=900)
    except (OSError, subprocess.SubprocessError) as exc:
        return Answer(127, "", str(exc))
    return Answer(done.returncode, done.stdout, done.stderr)


def _as_root(args: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return args
    if shutil.which("sudo"):
        return ["sudo", "-n", *args]
    raise InstallError("installing Chromium needs root (or sudo): run `apt-get install -y chromium` as root")


def version_in(text: str) -> str | None:
    """The first dotted four-part version in `text` (`Chromium 156.0.8078.108 built on Debian`)."""
    found = re.search(r"(\d+\.\d+\.\d+\.\d+)", text)
    return found.group(1) if found else None


def major(version: str) -> int:
    return int(version.split(".", 1)[0])


@dataclasses.dataclass
class Apt:
    """The package tool, as the installer sees it: four questions, each answered by `run`."""

    run: Callable[[Sequence[str]], Answer] = _run
    which: Callable[[str], str | None] = shutil.which
    path: str = CHROMIUM

    def present(self) -> bool:
        return self.which("apt-get") is not None

    def installed(self) -> str | None:
        """The version `chromium --version` reports, or None when it is not there."""
        answer = self.run([self.path, "--version"])
        return version_in(answer.stdout) if answer.returncode == 0 else None

    def candidate(self) -> str | None:
        """The Debian version apt would install now (`Candidate:` of `apt-cache policy`), or None."""
        answer = self.run(["apt-cache", "policy", "chromium"])
        found = re.search(r"Candidate:\s*(\S+)", answer.stdout)
        if answer.returncode != 0 or found is None or found.group(1) == "(none)":
            return None
        return found.group(1)

    def update(self) -> None:
        self._must(["apt-get", "update"])

    def install(self) -> Answer:
        return self.run(_as_root(["apt-get", "install", "-y", "--no-install-recommends", "chromium"]))

    def _must(self, args: list[str]) -> None:
        answer = self.run(_as_root(args))
        if answer.returncode != 0:
            raise InstallError(f"{' '.join(args)} failed ({answer.returncode}):\n{answer.stderr[-2000:]}")


def playwright_chromium() -> str:
    """The Chromium version the installed Playwright was built for (its browsers.json), or '?'."""
    try:
        import playwright
    except ImportError:
        return "?"
    listing = pathlib.Path(playwright.__file__).parent / "driver" / "package" / "browsers.json"
    try:
        browsers = json.loads(listing.read_text())["browsers"]
    except (OSError, ValueError, KeyError):
        return "?"
    return next((b.get("browserVersion", "?") for b in browsers if b.get("name") == "chromium"), "?")


def _floor_message(found: str) -> str:
    return (f"Chromium {found} is older than the floor {CHROMIUM_MIN_MAJOR} that the pinned Playwright "
            f"(built for Chromium {playwright_chromium()}) is known to drive; apt offers nothing newer here: "
            "update the machine's package lists (apt-get update) or install a newer chromium")


def ensure_chromium(apt: Apt | None = None, say: Callable[[str], None] | None = None) -> str:
    """The path of a Chromium at or above the floor, installed or upgraded through apt first if needed."""
    apt = apt or Apt()
    say = say or (lambda line: print(line, file=sys.stderr))
    found = apt.installed()
    if found is not None and major(found) >= CHROMIUM_MIN_MAJOR:
        say(f"install_chromium: using Chromium {found} at {apt.path} (floor {CHROMIUM_MIN_MAJOR}, "
            f"Playwright built for {playwright_chromium()})")
        return apt.path
    if not apt.present():
        raise InstallError(f"no apt-get: install Chromium {CHROMIUM_MIN_MAJOR} or newer at {apt.path} "
                           "by other means to run the browser tests")
    if apt.candidate() is None:
        apt.update()
    answer = apt.install()
    if answer.returncode != 0:  # the lists named a build the archive has since replaced: read them again
        apt.update()
        answer = apt.install()
        if answer.returncode != 0:
            raise InstallError(f"apt-get install chromium failed ({answer.returncode}):\n{answer.stderr[-2000:]}")
    got = apt.installed()
    if got is None:
        raise InstallError(f"apt-get installed chromium, but {apt.path} --version reports no version")
    if major(got) < CHROMIUM_MIN_MAJOR:
        raise InstallError(_floor_message(got))
    say(f"install_chromium: installed Chromium {got} at {apt.path} (floor {CHROMIUM_MIN_MAJOR}, "
        f"Playwright built for {playwright_chromium()})")
    return apt.path


if __name__ == "__main__":
    try:
        print(ensure_chromium())
    except InstallError as exc:
        print(f"install_chromium: {exc}", file=sys.stderr)
        sys.exit(1)
