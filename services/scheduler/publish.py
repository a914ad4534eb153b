"""The leader's write-audit-publish round (`lakewarden.publish`): each table whose policy
enables `publish` has its audit branch head audited once (`publish_audits`); main is
fast-forwarded to it when every check passes. A table that fails to be read is alerted
alone (`lakewarden.isolation`); the others go on. A commit to the branch is seen within
one round (`PUBLISH_INTERVAL_S`)."""

from __future__ import annotations

import logging

from pyiceberg.exceptions import CommitFailedException
from sqlalchemy import select

from lakewarden import publish
from lakewarden.catalogs.catalog import load_table
from lakewarden.db.models import ManagedTable, PublishAudit
from lakewarden.db.session import transaction
from lakewarden.isolation import PerTable
from lakewarden.leader import Fence, check_fence
from lakewarden.refs import FormatUnwritable
from lakewarden.runtime import Runtime
from lakewarden.tables import effective_policy_for, naming_section, ref_of

log = logging.getLogger(__name__)

PUBLISH_INTERVAL_S = 5.0


def publish_round(rt: Runtime, fence: Fence) -> list[int]:
    """Audit the new branch heads of the tables that publish; returns the audits' ids."""
    isolated = PerTable("publish")
    done: list[int] = []
    for table_id, name in _candidates(rt, fence.region):
        with isolated.table(name):
            audit_id = _round_of_table(rt, fence, table_id)
            if audit_id is not None:
                done.append(audit_id)
    with transaction(rt.engine) as s:
        check_fence(s, fence)
        isolated.record(s)
    return done


def _candidates(rt: Runtime, region: str | None) -> list[tuple[int, str]]:
    with transaction(rt.engine) as s:
        return naming_section(s, "publish", region=region)


def _round_of_table(rt: Runtime, fence: Fence, table_id: int) -> int | None:
    with transaction(rt.engine) as s:
        row = s.get(ManagedTable, table_id)
        if row is None or row.retired_at is not None:
            return None
        policy = effective_policy_for(s, row).publish
        if not policy.enabled:
            return None
        catalog, ref = row.catalog, ref_of(row)
        last = s.scalars(
            select(PublishAudit)
            .where(PublishAudit.table_id == table_id, PublishAudit.branch == policy.branch)
            .order_by(PublishAudit.id.desc())
            .limit(1)
        ).first()
        published = s.scalar(
            select(PublishAudit.rows)
            .where(PublishAudit.table_id == table_id, PublishAudit.published)
            .order_by(PublishAudit.id.desc())
            .limit(1)
        )
    # The catalog and the manifests are read with no transaction open.
    table = load_table(rt.catalogs.load(catalog), ref)
    head = publish.branch_head(table, policy.branch)
    if head is None or (last is not None and last.branch_snapshot_id == head):
        return None  # no branch, or its head judged already
    found = publish.audit(table, policy, published)
    if found is None:
        return None  # main is at the branch head: nothing to publish
    done = False
    reason = found.reason()
    if found.passed:
        try:
            publish.fast_forward(table, found)
            done = True
        except CommitFailedException:
            reason = (
                "not published: main moved while publishing (a writer committed); "
                "judged again next round"
            )
            log.info("%s: %s", ref.dotted, reason)
            return None
        except FormatUnwritable as exc:  # a v3 table: recorded as an audit not published
            reason = f"not published: {exc}"
    with transaction(rt.engine) as s:
        check_fence(s, fence)
        audit_row = PublishAudit(
            table_id=table_id,
            branch=policy.branch,
            branch_snapshot_id=found.branch_snapshot_id,
            main_snapshot_id=found.main_snapshot_id,
            passed=found.passed,
            published=done,
            rows=found.rows,
            checks=found.checks,
            reason=reason,
        )
        s.add(audit_row)
        s.flush()
        log.info("%s@%s: %s", ref.dotted, policy.branch, reason)
        return audit_row.id
