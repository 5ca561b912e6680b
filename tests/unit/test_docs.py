"""The documentation against the code: the generated references are current, every documented
`dagline ...` command line parses with the real command-line parser, every relative link resolves,
every setting and metric is documented, and the README stays short.

Nothing here runs a command: a line is only parsed (`make_context` on the resolved subcommand), so a
placeholder such as `RUN_ID` or `DAG_ID` is a fine argument.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import click
import pytest

from dagline.cli import main
from dagline.cli.reference import CLI_PAGE, SPEC_PAGE, render_cli, render_spec
from dagline.scheduler.deliveries import CallbackSettings
from dagline.scheduler.settings import SchedulerSettings

REPO = Path(__file__).parents[2]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").rglob("*.md")), REPO / "bench" / "RESULTS.md"]
SHELL_BLOCKS = {"", "sh", "bash", "shell", "console"}
SEPARATORS = {"&&", "||", "|", ";", "&"}
REDIRECTS = {">", ">>", "<", "<<", ">&", "<&"}


def _name(page: Path) -> str:
    return str(page.relative_to(REPO))


# --- (a) the generated references --------------------------------------------------------------------------


@pytest.mark.parametrize(("page", "render"), [(CLI_PAGE, render_cli), (SPEC_PAGE, render_spec)],
                         ids=["cli.md", "spec.md"])
def test_the_generated_reference_is_current(page, render):
    committed = (REPO / page).read_text(encoding="utf-8")
    assert committed == render(), (
        f"{page} is stale: the commands or the spec models changed. Run `make docs` "
        "(python -m dagline.cli.reference) and commit the result.")


# --- (b) documented command lines --------------------------------------------------------------------------


def code_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """(language, line number of the first line, lines) of every fenced code block."""
    blocks, language, start, lines = [], None, 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        fence = re.match(r"^\s*```(\S*)", line)
        if fence and language is None:
            language, start, lines = fence.group(1), number + 1, []
        elif fence:
            blocks.append((language, start, lines))
            language = None
        elif language is not None:
            lines.append(line)
    return blocks


def commands_in(line: str) -> list[list[str]]:
    """The `dagline` invocations of one shell line, as argument lists (without `dagline`): the line is split
    at `&&`, `||`, `|`, `;` and `&`, redirections and `VAR=value` prefixes are dropped, comments ignored."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    segments, current = [], []
    tokens = list(lexer)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token in SEPARATORS:
            segments.append(current)
            current = []
        elif token in REDIRECTS:
            index += 1  # the redirection's target
        else:
            current.append(token)
        index += 1
    segments.append(current)
    found = []
    for words in segments:
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words = words[1:]
        if words and (words[0] == "dagline" or words[0].endswith("/dagline")):
            found.append(words[1:])
    return found


def documented_commands() -> list[tuple[str, list[str]]]:
    """(where, arguments) of every `dagline` line in a shell code block of the README and docs/."""
    found = []
    for page in PAGES:
        for language, start, lines in code_blocks(page.read_text(encoding="utf-8")):
            if language not in SHELL_BLOCKS:
                continue
            joined, first = "", start
            for offset, line in enumerate(lines):
                if not joined:
                    first = start + offset
                if line.rstrip().endswith("\\"):
                    joined += line.rstrip()[:-1] + " "
                    continue
                line, joined = joined + line, ""
                if re.search(r"(^|[\s/;&|])dagline(\s|$)", line):  # other lines need not be valid shell
                    found += [(f"{_name(page)}:{first}", args) for args in commands_in(line)]
    return found


def parse_command_line(args: list[str]) -> click.Context:
    """Parse `dagline ARGS...` as the real command would, down to its subcommand, without running it;
    a bad option, a missing argument or a value of the wrong type raises `click.UsageError`."""
    command, name, ctx, args = main, "dagline", None, list(args)
    while True:
        ctx = command.make_context(name, list(args), parent=ctx, resilient_parsing=False)
        if not isinstance(command, click.Group):
            return ctx
        rest = args[len(args) - len(ctx.args) - 1:]  # a group stops at its subcommand: the rest is a suffix
        name, command, args = command.resolve_command(ctx, rest)


COMMANDS = documented_commands()


@pytest.mark.parametrize(("where", "args"), COMMANDS, ids=[where for where, _ in COMMANDS])
def test_every_documented_command_line_parses(where, args):
    try:
        parse_command_line(args)
    except click.UsageError as exc:
        pytest.fail(f"{where}: `dagline {shlex.join(args)}` does not parse: {exc.format_message()}")


def test_the_command_lines_are_found():
    """The documented lines are really collected (the test above cannot pass on an empty list)."""
    lines = {" ".join(args) for _, args in COMMANDS}
    assert len(COMMANDS) >= 60
    assert "dags apply examples/sales_daily" in lines
    assert any(where.startswith("README.md:") for where, _ in COMMANDS)


def test_a_shell_line_is_split_into_its_commands():
    line = "DAGLINE_DB_URL=sqlite:///x.db dagline runs list --json | head -3 && .venv/bin/dagline dags list > out # c"
    assert commands_in(line) == [["runs", "list", "--json"], ["dags", "list"]]
    assert commands_in("make install && . .venv/bin/activate") == []


@pytest.mark.parametrize("args", [
    ["dags", "apply"],                              # a missing argument
    ["runs", "list", "--bogus"],                    # an unknown option
    ["dags", "next-runs", "sales-daily", "--count", "many"],  # a value of the wrong type
    ["backfill", "sideways", "sales-daily"],        # an unknown command
    ["scheduler", "--executor", "celery"],          # not a choice
])
def test_a_wrong_command_line_does_not_parse(args):
    with pytest.raises(click.UsageError):
        parse_command_line(args)


# --- (c) links ---------------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans (links there are not links)."""
    text = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors_of(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page (a code span's text counts, its backticks
    do not: `## Web UI grid (`bench/ui_grid.py`)` is `#web-ui-grid-benchui_gridpy`)."""
    text = page.read_text(encoding="utf-8")
    anchors, seen = set(), {}
    in_block = False
    for line in text.splitlines():
        if re.match(r"^\s*```", line):
            in_block = not in_block
            continue
        heading = None if in_block else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """Every relative link of `page` that names no file under `root`, or no heading of the page it names."""
    root, broken = root.resolve(), []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif root not in resolved.parents:
            broken.append(f"{target}: outside the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors_of(resolved):
            broken.append(f"{target}: no heading with the anchor #{anchor}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_resolves(page):
    assert broken_links(page) == [], f"{_name(page)} has broken links"


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Top\n[ok](#top) [gone](missing.md) [bad anchor](#nowhere) `[code](x.md)`\n")
    assert broken_links(page, root=tmp_path) == ["missing.md: no such file",
                                                  "#nowhere: no heading with the anchor #nowhere"]


# --- (d) the README, settings and metrics ------------------------------------------------------------------


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < 200, f"README.md has {lines} lines: move the detail into docs/ (see docs/index.md)"


def test_every_setting_is_documented():
    """Every `DAGLINE_*` variable the code reads, and every field of the scheduler's and callbacks' settings,
    is in docs/reference/settings.md."""
    page = (REPO / "docs" / "reference" / "settings.md").read_text(encoding="utf-8")
    named = set()
    for source in (REPO / "src" / "dagline").rglob("*.py"):
        named |= set(re.findall(r"[\"'`$](DAGLINE_[A-Z0-9_]*[A-Z0-9])", source.read_text(encoding="utf-8")))
    for cls, prefix in ((SchedulerSettings, "DAGLINE_SCHEDULER_"), (CallbackSettings, "DAGLINE_CALLBACK_")):
        named |= {f"{prefix}{field.name.upper()}" for field in dataclasses.fields(cls)
                  if "env" not in field.metadata}  # one read under its own name is found in the source above
    assert sorted(name for name in named if f"`{name}" not in page) == []


def test_every_metric_is_documented():
    page = (REPO / "docs" / "reference" / "metrics.md").read_text(encoding="utf-8")
    names = set(re.findall(r"\"(dagline_[a-z_]+)\"", (REPO / "src" / "dagline" / "metrics.py").read_text()))
    names |= set(re.findall(r"\"(dagline_[a-z_]+)\"", (REPO / "src" / "dagline" / "k8s" / "metrics.py").read_text()))
    assert len(names) > 20
    assert sorted(name for name in names if f"`{name}" not in page) == []


def test_every_variable_a_demo_reads_is_in_the_readme():
    """A `make demo*` script's knobs (`${DEMO_SECONDS:-600}`, `${DAGLINE_DEMO_PORT:-8793}`) are where its
    user looks: the README."""
    readme = README.read_text(encoding="utf-8")
    knobs = set()
    for script in REPO.glob("examples/**/demo.sh"):
        knobs |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]*):-", script.read_text(encoding="utf-8")))
    assert knobs
    assert sorted(knob for knob in knobs if f"`{knob}`" not in readme) == []



def test_the_demos_write_only_inside_their_checkout():
    """`make demo` and `make demo-signals` keep their database, logs and data in the checkout's ignored
    folders (`demo/`, `demo-signals/`): two checkouts never share, or wipe, each other's demo."""
    ignored = (REPO / ".gitignore").read_text(encoding="utf-8").split()
    for script in REPO.glob("examples/**/demo.sh"):
        text = script.read_text(encoding="utf-8")
        assert "/tmp" not in text, f"{_name(script)} writes outside the checkout"
        for folder in re.findall(r'\$PWD/([\w-]+)', text):
            assert f"/{folder}/" in ignored, f"{_name(script)} writes to {folder}/, which git does not ignore"
