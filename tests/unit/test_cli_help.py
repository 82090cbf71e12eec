"""Every `ostinato` command's `--help` renders. Typer reads option help as Rich markup, so a bracket in a help
text (`s3://bucket[/prefix]`) made `ostinato server --help` end in a MarkupError traceback instead of the help."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from ostinato.services.cli.main import app


def _paths(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    if hasattr(command, "commands"):  # a group (Typer carries its own click: no isinstance on click's classes)
        for name, sub in sorted(command.commands.items()):
            found += _paths(sub, (*path, name))
    return found


PATHS = _paths(typer.main.get_command(app))


def test_the_command_tree_is_found() -> None:
    assert ("server",) in PATHS and ("worker",) in PATHS and len(PATHS) > 20


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "ostinato")
def test_help_renders(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=120)
    assert result.exit_code == 0, f"{' '.join(path)} --help:\n{result.output}\n{result.exception!r}"
    assert "Usage" in result.output
