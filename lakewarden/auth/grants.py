"""Grants: a role on a scope. Pure: no I/O.

A grant is written `role[@catalog[/namespace-glob]]`: `viewer` (everything),
`operator@lake` (every namespace of catalog `lake`), `admin@lake/sales_*` (namespaces of
`lake` matching the glob). Roles are ordered: an admin may do what an operator may, and
an operator what a viewer may.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class Role(IntEnum):
    viewer = 1  # reads
    operator = 2  # trigger, cancel, retry, blockers, ack alerts, non-destructive policy
    admin = 3  # anything, including destructive settings, unregistering and tokens

    def __str__(self) -> str:
        return self.name


class InvalidGrant(ValueError):
    pass


# A catalog name or a namespace glob: identifier characters, dots (multi-level namespaces)
# and the glob's * and ?. No [classes]: a glob must translate exactly to a SQL LIKE, so a
# scoped list is filtered (and paged) in the database.
_SCOPE_PART = re.compile(r"\A[A-Za-z0-9_.*?-]{1,128}\Z")


@dataclass(frozen=True)
class Grant:
    role: Role
    catalog: str = "*"
    namespace: str = "*"

    @classmethod
    def parse(cls, text: str) -> Grant:
        """`role[@catalog[/namespace-glob]]`, or InvalidGrant saying what is wrong."""
        role_text, _, scope = text.strip().partition("@")
        try:
            role = Role[role_text.strip()]
        except KeyError:
            raise InvalidGrant(
                f"unknown role {role_text!r} in grant {text!r}: one of viewer, operator, admin"
            ) from None
        catalog, _, namespace = scope.partition("/")
        grant = cls(role, catalog or "*", namespace or "*")
        grant.check()
        return grant

    @classmethod
    def of(cls, data: dict[str, Any]) -> Grant:
        """From its stored JSON form."""
        grant = cls(Role[data["role"]], data.get("catalog", "*"), data.get("namespace", "*"))
        grant.check()
        return grant

    def check(self) -> None:
        for what, part in (("catalog", self.catalog), ("namespace", self.namespace)):
            if not _SCOPE_PART.match(part):
                raise InvalidGrant(
                    f"invalid {what} {part!r} in a grant: letters, digits, _ - . and the glob "
                    "characters * and ?, 1 to 128 of them"
                )

    def as_json(self) -> dict[str, str]:
        return {"role": self.role.name, "catalog": self.catalog, "namespace": self.namespace}

    def __str__(self) -> str:
        if self.catalog == "*" and self.namespace == "*":
            return self.role.name
        if self.namespace == "*":
            return f"{self.role.name}@{self.catalog}"
        return f"{self.role.name}@{self.catalog}/{self.namespace}"

    def covers(self, role: Role, catalog: str, namespace: str) -> bool:
        """Whether this grant allows `role` on a table of `catalog`.`namespace`."""
        return (
            self.role >= role
            and fnmatch.fnmatchcase(catalog, self.catalog)
            and fnmatch.fnmatchcase(namespace, self.namespace)
        )

    def includes(self, other: Grant) -> bool:
        """Whether everything `other` allows, this allows too (so a holder of this grant may
        hand `other` out). Conservative: a glob includes only itself or a narrower literal."""

        def part(mine: str, theirs: str) -> bool:
            return mine in ("*", theirs) or (
                not any(c in theirs for c in "*?") and fnmatch.fnmatchcase(theirs, mine)
            )

        return (
            self.role >= other.role
            and part(self.catalog, other.catalog)
            and part(self.namespace, other.namespace)
        )


@dataclass(frozen=True)
class Caller:
    """Who is calling, and what they may do."""

    subject: str  # "token:<name>" or "oidc:<sub>"
    grants: tuple[Grant, ...]
    token_id: int | None = None  # set for API tokens: rate limits and "revoke my own"
    via: str = "token"  # "token" or "oidc"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def may(self, role: Role, catalog: str, namespace: str) -> bool:
        return any(g.covers(role, catalog, namespace) for g in self.grants)

    def may_somewhere(self, role: Role) -> bool:
        return any(g.role >= role for g in self.grants)

    def may_everywhere(self, role: Role) -> bool:
        return any(g.role >= role and g.catalog == "*" and g.namespace == "*" for g in self.grants)

    def may_grant(self, grant: Grant) -> bool:
        return any(g.role == Role.admin and g.includes(grant) for g in self.grants)

    def grants_text(self) -> str:
        return ", ".join(str(g) for g in self.grants) or "no grants"


def parse_grants(texts: list[str] | tuple[str, ...]) -> tuple[Grant, ...]:
    if not texts:
        raise InvalidGrant("at least one grant is needed, e.g. viewer or operator@lake/sales")
    return tuple(Grant.parse(t) for t in texts)


def glob_to_like(glob: str) -> str:
    """A grant's glob as the equivalent SQL LIKE pattern (escape character: backslash)."""
    escaped = glob.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")
