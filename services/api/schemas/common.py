"""What every body of the API shares: the bases (`RequestModel`, `ResponseModel`), the one
error body (`ErrorOut`), the one list shape (`Page`), and the `*_PATTERN`s.

The patterns put into the OpenAPI what the validators enforce (`TableRef`, `InputModel`),
so that clients and fuzzers know it; the validators stay the ones that refuse, with a
message that says what to fix rather than a regular expression."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from lakewarden.db import paging
from lakewarden.policy.model import InputModel

T = TypeVar("T")


# ECMA-262 regular expressions, as JSON Schema wants them.
IDENTIFIER_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,127}$"  # lakewarden.catalogs.catalog.IDENTIFIER
# One or more identifiers joined by dots (lakewarden.catalogs.catalog.TableRef checks each level).
NAMESPACE_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,127}(\\.[A-Za-z_][A-Za-z0-9_]{0,127})*$"
# namespace.name, the namespace of one or more levels
TABLE_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,127}([.][A-Za-z_][A-Za-z0-9_]{0,127})+$"
# Unicode's other controls, as lakewarden.policy.model.CONTROL_CHARACTERS refuses them (C1 with NEL,
# the line and paragraph separators, the bidi marks, embeddings, overrides and isolates).
_UNICODE_CONTROLS = (
    "\\u0080-\\u009f\\u2028\\u2029\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069"
)
TEXT_PATTERN = f"^[^\\u0000-\\u001f\\u007f{_UNICODE_CONTROLS}]*$"  # no control characters
# role[@catalog[/namespace-glob]], as lakewarden.auth.grants.Grant.parse reads it
GRANT_PATTERN = "^(viewer|operator|admin)(@[A-Za-z0-9_.*?-]{1,128}(/[A-Za-z0-9_.*?-]{1,128})?)?$"
FREE_TEXT_PATTERN = (
    f"^[^\\u0000-\\u0008\\u000b-\\u001f\\u007f{_UNICODE_CONTROLS}]*$"  # tabs, newlines
)


def documented_pattern(pattern: str) -> dict[str, Any]:
    """`json_schema_extra` for a string a validator checks: the OpenAPI shows the pattern."""
    return {"pattern": pattern}


class RequestModel(InputModel):
    """Base of every request body: see `lakewarden.policy.model.InputModel`."""


class ResponseModel(BaseModel):
    """Base of every response body: built from a dict, or from a row's attributes."""

    model_config = ConfigDict(from_attributes=True)


class FieldProblem(ResponseModel):
    field: str = Field(
        description="the field, dotted (body fields by name; `query.<name>`, `path.<name>`)"
    )
    problem: str


class ErrorOut(ResponseModel):
    """The body of every error response, 4xx and 5xx."""

    detail: str = Field(description="what went wrong and what to do about it")
    errors: list[FieldProblem] | None = Field(
        default=None, description="an invalid request (422): each field and its problem"
    )
    error_id: str | None = Field(
        default=None,
        description="an unexpected error (500) or a conflict with a concurrent change (409): "
        "the server log has it under this id",
    )


class Page(ResponseModel, Generic[T]):
    """One page of a list (`lakewarden.db.paging`); each list has its own subclass, named
    for what it lists."""

    items: list[T]
    next_cursor: int | None = Field(
        description="pass as `cursor` for the next page; null on the last page"
    )

    @classmethod
    def of(cls, page: paging.Page[Any], item: Callable[[Any], Any] | None = None) -> Self:
        """The core's page, each row mapped by `item` (by default, read by attribute)."""
        items = page.items if item is None else [item(row) for row in page.items]
        return cls(items=items, next_cursor=page.next_cursor)
