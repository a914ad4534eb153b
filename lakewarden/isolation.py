"""One bad table never stops the rest.

Every loop over managed tables (the leader's sweep, the health watch, the poller, the
alert rules) runs each table's work inside `PerTable.table(...)`: an exception is
logged with its stack trace, remembered, and the loop goes on with the next table.
Given a session, the table's work also runs in a SAVEPOINT, so that its partial writes
are rolled back without touching the other tables' writes in the same transaction.

`PerTable.record(session)` then makes the outcome visible to the operator through the
alert store: one `table_unreadable` alert per failing table, whose summary names every
loop that fails on it and the first line of each error, resolved once each of those
loops has succeeded on that table again (or the table is no longer managed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden.alerts.store import fire, resolve_absent
from lakewarden.db.locks import DBLocks, xact_lock
from lakewarden.db.models import Alert, ManagedTable
from lakewarden.errors import headline
from lakewarden.leader import FencedOut
from lakewarden.redact import redact
from lakewarden.states import AlertState

log = logging.getLogger(__name__)

RULE = "table_unreadable"
SEVERITY = "warning"
RUNBOOK = (
    "A periodic loop (sweep, health watch, poller or alert rules) fails on this table "
    "and skips it; the other tables are still served. The summary says which loop and "
    "the error's first line; the stack trace is in that process's log. Typical causes: "
    "a stored policy (the table's or its namespace defaults) that no longer validates, "
    "or table metadata the catalog cannot read. Check GET /api/v1/tables/{ns}/{name} "
    "and the catalog; fix the policy (PUT …/policy) or the table, or unregister it. "
    "Resolves when every failing loop has succeeded on the table again."
)

_MAX_ERROR = 300


def error_line(exc: BaseException) -> str:
    """`Type: what happened` (`errors.headline`: for an error from the JVM, the Java
    exception's line), without stack trace or credentials (the line may still carry a URL
    with them: `redact`), shortened."""
    line = redact(headline(exc))
    return line if len(line) <= _MAX_ERROR else line[: _MAX_ERROR - 1] + "…"


class PerTable:
    """Failures and successes of one loop (`loop`: what the operator reads) per table."""

    def __init__(self, loop: str) -> None:
        self.loop = loop
        self.failed: dict[str, str] = {}  # table -> error line
        self.ok: set[str] = set()

    @contextmanager
    def table(self, name: str, session: Session | None = None) -> Iterator[None]:
        """Run one table's work (`name`: `namespace.name`); an exception is logged and
        recorded, not raised (a lost leadership is: it concerns every table)."""
        try:
            if session is None:
                yield
            else:
                with session.begin_nested():
                    yield
        except FencedOut:
            raise
        except Exception as exc:
            log.exception("%s failed on table %s; going on with the others", self.loop, name)
            self.failed[name] = error_line(exc)
            self.ok.discard(name)
        else:
            if name not in self.failed:
                self.ok.add(name)

    def record(self, session: Session) -> None:
        """Fire (or refresh) the alert of each table that failed; take this loop off the
        alert of each table that succeeded, resolving it when no loop fails any more.
        Never raises: bookkeeping must not undo the loop's work."""
        try:
            with session.begin_nested():
                self._record(session)
        except FencedOut:
            raise
        except Exception:
            log.exception("%s: could not record per-table failures", self.loop)

    def _record(self, session: Session) -> None:
        def open_alerts() -> dict[str, dict[str, Any]]:
            rows = session.execute(
                select(Alert.key, Alert.details).where(
                    Alert.rule == RULE, Alert.state != AlertState.RESOLVED
                )
            )
            return {key: details or {} for key, details in rows}

        if not self.failed and not open_alerts():
            return  # the usual case: nothing to fire, nothing to resolve
        # Loops in other processes update the same alerts: read-modify-write one at a time.
        xact_lock(session, DBLocks.ALERT_RULE, RULE)
        current = open_alerts()
        managed = set(
            session.scalars(
                select(ManagedTable.namespace + "." + ManagedTable.name).where(
                    ManagedTable.retired_at.is_(None)
                )
            )
        )
        keep: set[str] = set()
        for name in set(current) | set(self.failed):
            loops: dict[str, str] = dict(current.get(name, {}).get("loops") or {})
            if name in self.failed:
                loops[self.loop] = self.failed[name]
            elif name in self.ok:
                loops.pop(self.loop, None)
            if not loops or name not in managed:
                continue  # resolved below
            keep.add(name)
            if name in self.failed or loops != current.get(name, {}).get("loops"):
                fire(
                    session,
                    RULE,
                    name,
                    severity=SEVERITY,
                    summary=f"{name} is skipped: "
                    + "; ".join(f"{loop} failed: {error}" for loop, error in sorted(loops.items())),
                    # `name` is the loop's label of the table: namespace.name
                    details={"table": name, "namespace": name.rpartition(".")[0], "loops": loops},
                    runbook=RUNBOOK,
                )
        if set(current) - keep:
            resolve_absent(session, RULE, keep)
