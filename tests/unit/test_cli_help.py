"""Every command's --help renders: typer reads help texts as rich markup, so a bracket in
one (`role[@catalog[/namespace-glob]]`) turned `token create --help` into a traceback."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from cli.main import app


def _paths(group: typer.core.TyperGroup, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, cmd in group.commands.items():
        if isinstance(cmd, typer.core.TyperGroup):
            out += _paths(cmd, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


def test_every_command_has_a_help_page() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    paths = _paths(root)
    assert ("token", "create") in paths and ("tables",) in paths
    runner = CliRunner()
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output, result.exception)
        assert "Usage" in result.output, path
