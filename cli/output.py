"""How the operator CLI prints an answer: `-o table` (rich, for people), `-o json` (the
API's own JSON, unchanged, for scripts) or `-o yaml` (the same data). rich and yaml are
imported when something is printed, not when the CLI starts."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


Render = Callable[[Any], Iterable["RenderableType"]]


def emit(data: Any, fmt: Format, render: Render) -> None:
    """Print `data` in `fmt`; `render` turns it into rich renderables for the table form."""
    if fmt is Format.json:
        typer.echo(json.dumps(data, indent=2, default=str))
    elif fmt is Format.yaml:
        import yaml

        typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)
    else:
        from rich.console import Console

        console = Console(soft_wrap=False)
        for renderable in render(data):
            console.print(renderable)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A rich table of `rows` (each a sequence of values, shown with `cell`)."""
    from rich.table import Table

    out = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        out.add_column(column, overflow="fold")
    for row in rows:
        out.add_row(*(cell(value) for value in row))
    return out


def fields(title: str | None, pairs: Iterable[tuple[str, Any]]) -> Table:
    """A two-column table: a label and its value."""
    from rich.table import Table

    out = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 2))
    out.add_column(style="bold")
    out.add_column(overflow="fold")
    for label, value in pairs:
        out.add_row(label, cell(value))
    return out


def cell(value: Any) -> str:
    """A value as a table shows it: '-' for none, times as their age, JSON compact. rich
    markup in the data (a table name, a reason) is shown as typed, never interpreted."""
    from rich.markup import escape

    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return escape(json.dumps(value, default=str, separators=(", ", ": ")))
    text = str(value)
    when = _timestamp(text)
    return escape(ago(when) if when is not None else text)


def ago(when: datetime) -> str:
    """`2025-01-01T10:00:00Z` as `5m ago` (or `in 3m` for a time to come)."""
    seconds = (datetime.now(UTC) - when).total_seconds()
    span = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if span >= size:
            amount = f"{int(span // size)}{unit}"
            break
    else:
        amount = f"{int(span)}s"
    return f"{amount} ago" if seconds >= 0 else f"in {amount}"


def _timestamp(text: str) -> datetime | None:
    """An ISO timestamp with a time zone, as the API writes them; else None."""
    if len(text) < 20 or text[4] != "-" or text[10] != "T":
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None
