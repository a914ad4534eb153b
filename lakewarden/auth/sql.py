"""A caller's grants as a SQL condition, so scoped lists are filtered (and paged) in Postgres."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, false, or_, true

from lakewarden.auth.grants import Caller, Role, glob_to_like


def in_scope(caller: Caller, role: Role, catalog: Any, namespace: Any) -> ColumnElement[bool]:
    """SQL: rows whose (catalog, namespace) columns the caller may see with `role`."""
    parts = []
    for g in caller.grants:
        if g.role < role:
            continue
        if g.catalog == "*" and g.namespace == "*":
            return true()
        conds = []
        if g.catalog != "*":
            conds.append(catalog.like(glob_to_like(g.catalog), escape="\\"))
        if g.namespace != "*":
            conds.append(namespace.like(glob_to_like(g.namespace), escape="\\"))
        parts.append(and_(*conds))
    return or_(*parts) if parts else false()
