"""Every `dagline` command naming a DAG, a run or a backfill by an argument takes `--namespace NS` (issues 26,
38): walks the whole command tree, so a new command cannot forget it."""

from __future__ import annotations

import click

from dagline.cli import main
from dagline.cli.base import NAMED_DAGS, NAMED_OBJECTS


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


def _naming_commands() -> dict[str, click.Command]:
    return {path: command for path, command in _commands(main)
            if any(isinstance(p, click.Argument) and (p.name in NAMED_OBJECTS or p.name in NAMED_DAGS)
                   for p in command.params)}


def test_every_command_naming_a_dag_run_or_backfill_takes_namespace():
    naming = _naming_commands()
    assert {"dags show", "dags trigger", "runs show", "tasks clear", "backfill cancel"} <= set(naming)
    missing = [path for path, command in naming.items()
               if not any("--namespace" in getattr(p, "opts", ()) for p in command.params)]
    assert missing == []


def test_the_listings_of_backfills_and_signals_and_a_signal_take_namespace():
    commands = dict(_commands(main))
    for path in ("dags apply", "dags list", "runs list", "backfill list", "signals list", "signals show", "signals send",
                 "pools list", "pools delete", "callbacks list", "callbacks redeliver", "db clean"):
        assert any("--namespace" in p.opts for p in commands[path].params), path
