"""The sort order an Iceberg table declares (its `write.sort-order`), as lakewarden's kinds
use it (issue 32 §6): compaction writes into it, clustering sorts by it when the policy
names no columns.

Only identity fields can be written as the layout plans' `sort_order` text (`col ASC NULLS
LAST, ...`) and measured by files per lookup; a field with a transform (`bucket`,
`truncate`, `day`, ...) is described, and a caller that needs the text says why it cannot.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table import Table
from pyiceberg.table.sorting import NullOrder, SortDirection
from pyiceberg.transforms import IdentityTransform

from lakewarden.spark import sql


@dataclass(frozen=True)
class DeclaredOrder:
    """The table's declared sort order. `description`: every field as the table states
    it; `columns` and `text`: the identity form (None when a field has a transform or
    names a dropped column, `problem` then says which)."""

    description: str
    columns: list[str] | None
    text: str | None
    problem: str | None


def declared_order(table: Table) -> DeclaredOrder | None:
    """The table's current sort order, or None if it declares none (unsorted)."""
    order = table.sort_order()
    if not order.fields:
        return None
    schema = table.schema()
    parts, columns, texts = [], [], []
    problem = None
    for field in order.fields:
        direction = "ASC" if field.direction == SortDirection.ASC else "DESC"
        nulls = "FIRST" if field.null_order == NullOrder.NULLS_FIRST else "LAST"
        try:
            name = schema.find_field(field.source_id).name
        except ValueError:
            name = f"<dropped column {field.source_id}>"
            problem = problem or f"the sort order names a dropped column ({field.source_id})"
        transform = field.transform
        shown = name if isinstance(transform, IdentityTransform) else f"{transform}({name})"
        parts.append(f"{shown} {direction} NULLS {nulls}")
        if not isinstance(transform, IdentityTransform):
            problem = problem or f"the sort order sorts by a transform ({shown})"
        elif not sql.IDENTIFIER.match(name):
            problem = problem or f"the sort order sorts by a nested column ({name})"
        else:
            columns.append(name)
            texts.append(f"{sql.column(name)} {direction} NULLS {nulls}")
    description = ", ".join(parts)
    if problem is not None:
        return DeclaredOrder(description, None, None, problem)
    return DeclaredOrder(description, columns, ", ".join(texts), None)
