"""The browser installer's choices, against a faked apt (the machine is never changed here).

`FakeDebian` answers `chromium --version`, `apt-cache policy`, `apt-get update` and `apt-get install`
as a Debian machine would: its package lists may be stale (naming a build the security archive has
since replaced), and `install` fetches what the lists name from what the archive still holds.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.tools import install_chromium
from tests.tools.install_chromium import CHROMIUM_MIN_MAJOR, Answer, Apt, InstallError, ensure_chromium

OLD = "156.0.8078.79-1~deb12u1"     # the build pinned before, since withdrawn from bookworm-security
NEW = "156.0.8078.108-1~deb12u1"    # the build that replaced it
MAIN = "150.0.7871.100-1~deb12u1"   # bookworm's main archive: below the floor


@dataclasses.dataclass
class FakeDebian:
    archive: list[str]                 # the builds the mirrors still serve, newest first
    lists: list[str] | None = None     # what the local package lists name (None: never updated)
    installed: str | None = None       # the Debian version of the installed package
    calls: list[list[str]] = dataclasses.field(default_factory=list)

    def run(self, args):
        args = [a for a in args if a != "sudo" and a != "-n"]
        self.calls.append(args)
        if args[1:] == ["--version"]:
            if self.installed is None:
                return Answer(127, "", "No such file or directory")
            return Answer(0, f"Chromium {self.installed.split('-')[0]} built on Debian GNU/Linux 12\n")
        if args[:2] == ["apt-cache", "policy"]:
            candidate = (self.lists or ["(none)"])[0]
            return Answer(0, f"chromium:\n  Installed: {self.installed or '(none)'}\n  Candidate: {candidate}\n")
        if args[:2] == ["apt-get", "update"]:
            self.lists = list(self.archive)
            return Answer(0)
        if args[:2] == ["apt-get", "install"]:
            if not self.lists:
                return Answer(100, "", "E: Unable to locate package chromium")
            wanted = self.lists[0]
            if wanted not in self.archive:
                return Answer(100, "", f"E: Failed to fetch .../chromium_{wanted}_amd64.deb  404  Not Found")
            if self.installed is None or self.installed < wanted:
                self.installed = wanted
            return Answer(0)
        raise AssertionError(f"unexpected command {args}")

    def apt(self) -> Apt:
        return Apt(run=self.run, which=lambda name: f"/usr/bin/{name}")

    def apt_calls(self):
        return [c[:2] for c in self.calls if c[0].startswith("apt")]


def said():
    lines: list[str] = []
    return lines, lines.append


def test_a_fresh_machine_gets_the_build_apt_offers_and_says_which():
    debian = FakeDebian(archive=[NEW, MAIN])
    lines, say = said()
    assert ensure_chromium(debian.apt(), say) == install_chromium.CHROMIUM
    assert debian.installed == NEW
    assert debian.apt_calls() == [["apt-cache", "policy"], ["apt-get", "update"], ["apt-get", "install"]]
    assert "Chromium 156.0.8078.108" in lines[-1]


def test_the_pinned_build_is_gone_the_lists_are_read_again_and_the_new_build_installed():
    debian = FakeDebian(archive=[NEW, MAIN], lists=[OLD, MAIN])  # lists from before the security update
    lines, say = said()
    ensure_chromium(debian.apt(), say)
    assert debian.installed == NEW
    assert debian.apt_calls() == [["apt-cache", "policy"], ["apt-get", "install"], ["apt-get", "update"],
                                  ["apt-get", "install"]]
    assert "156.0.8078.108" in lines[-1]


def test_a_newer_build_offered_is_taken_without_a_pin_to_refuse_it():
    newer = "163.0.9000.12-1~deb12u1"
    debian = FakeDebian(archive=[newer, MAIN], lists=[newer, MAIN])
    lines, say = said()
    ensure_chromium(debian.apt(), say)
    assert debian.installed == newer
    assert "Chromium 163.0.9000.12" in lines[-1]


def test_an_installed_chromium_newer_than_any_known_here_is_used_and_apt_is_not_asked():
    debian = FakeDebian(archive=[NEW], installed="171.0.1.2-1")
    lines, say = said()
    ensure_chromium(debian.apt(), say)
    assert debian.apt_calls() == []
    assert "using Chromium 171.0.1.2" in lines[-1]


def test_an_installed_build_below_the_floor_is_upgraded_to_the_one_offered():
    debian = FakeDebian(archive=[NEW, MAIN], lists=[NEW, MAIN], installed=MAIN)
    ensure_chromium(debian.apt(), said()[1])
    assert debian.installed == NEW


def test_a_build_below_the_floor_is_refused_naming_both_versions():
    debian = FakeDebian(archive=[MAIN], lists=[MAIN])  # a machine without the security archive
    with pytest.raises(InstallError) as refused:
        ensure_chromium(debian.apt(), said()[1])
    message = str(refused.value)
    assert "150.0.7871.100" in message and f"floor {CHROMIUM_MIN_MAJOR}" in message
    assert "Playwright" in message


def test_an_install_that_keeps_failing_says_what_apt_said():
    debian = FakeDebian(archive=[], lists=[OLD])
    with pytest.raises(InstallError, match="Unable to locate package chromium"):
        ensure_chromium(debian.apt(), said()[1])


def test_no_apt_get_is_a_clear_error():
    apt = Apt(run=FakeDebian(archive=[NEW]).run, which=lambda name: None)
    with pytest.raises(InstallError, match=f"Chromium {CHROMIUM_MIN_MAJOR} or newer"):
        ensure_chromium(apt, said()[1])


def test_the_floor_is_not_above_the_chromium_the_pinned_playwright_was_built_for():
    built_for = install_chromium.playwright_chromium()
    assert built_for != "?", "playwright's browsers.json was not found"
    assert CHROMIUM_MIN_MAJOR <= install_chromium.major(built_for)
