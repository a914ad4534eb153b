"""Write-audit-publish (issue 33 §1, Tencent Ads' workflow), with pyiceberg (no JVM).

Writers commit to the table's audit branch (`publish.branch`). The batch is what the branch
holds beyond main: the data files live on the branch head and not on main. Its checks read
the manifests (record and null counts per file), all but the SQL assertions:

- `rows`: the batch's rows within `min_rows` .. `max_rows`;
- `row_ratio`: within [1/x, x] of the last published batch's rows (`max_row_ratio`);
- `null_rate`: per column, the batch's null rows at most `max_null_rate`;
- `schema`: the branch head's schema is main's (`schema_unchanged`);
- `fast_forward`: main's head is an ancestor of the branch head (main did not move on its
  own), so publishing is a fast-forward, never a merge;
- `sql.<name>`: the owner's SQL assertions, run by DuckDB on the batch's rows (the one
  check that reads rows: only the batch's data files, with the branch's deletes applied).

When every check passes, main is set to the branch head in one commit that asserts main
has not moved since it was read. A failed check publishes nothing; the leader records the
audit and the `publish_refused` alert says which check failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

from lakewarden import sql_assertions
from lakewarden.db.models import PublishAudit
from lakewarden.policy.model import MiB, PublishPolicy
from lakewarden.refs import require_writable
from lakewarden.repair import live_files


@dataclass
class Audit:
    """One audit of the branch head: each check's verdict, and the batch it read."""

    branch_snapshot_id: int
    main_snapshot_id: int | None
    rows: int
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c["passed"] for c in self.checks.values())

    def check(self, name: str, passed: bool, detail: str) -> None:
        self.checks[name] = {"passed": passed, "detail": detail}

    def reason(self) -> str:
        failed = [f"{n}: {c['detail']}" for n, c in self.checks.items() if not c["passed"]]
        if failed:
            return "not published: " + "; ".join(failed)
        return f"published: {self.rows} rows, " + "; ".join(
            c["detail"] for c in self.checks.values()
        )


def branch_head(table: Table, branch: str) -> int | None:
    ref = table.metadata.refs.get(branch)
    return ref.snapshot_id if ref is not None and ref.snapshot_ref_type == "branch" else None


def audit(table: Table, policy: PublishPolicy, previous_rows: int | None = None) -> Audit | None:
    """The audit of the branch head, or None when there is nothing to publish (no such
    branch, or main is already at its head)."""
    head_id = branch_head(table, policy.branch)
    main = table.current_snapshot()
    if head_id is None or (main is not None and main.snapshot_id == head_id):
        return None
    head = table.snapshot_by_id(head_id)
    assert head is not None
    on_branch = live_files(table, head).data
    on_main = live_files(table, main).data if main is not None else {}
    batch = [f for path, f in on_branch.items() if path not in on_main]
    rows = sum(f.record_count for f in batch)
    result = Audit(head_id, main.snapshot_id if main else None, rows)

    history = {s.snapshot_id for s in ancestors_of(head, table.metadata)}
    if main is None or main.snapshot_id in history:
        result.check("fast_forward", True, "main is an ancestor of the branch head")
    else:
        result.check(
            "fast_forward",
            False,
            f"main moved on its own (snapshot {main.snapshot_id} is not in the branch's "
            f"history): rebase the branch on main, or cherry-pick its commits "
            "(POST …/cherry-pick)",
        )
    gone = [p for p in on_main if p not in on_branch]
    if gone:
        result.check(
            "batch",
            True,
            f"{len(batch)} data file(s) added, {len(gone)} of main's removed on the branch",
        )
    low, high = policy.min_rows, policy.max_rows
    inside = low <= rows <= high
    result.check("rows", inside, f"{rows} rows {'within' if inside else 'outside'} [{low}, {high}]")
    if policy.max_row_ratio is not None and previous_rows:
        ratio, most = rows / previous_rows, policy.max_row_ratio
        inside = 1 / most <= ratio <= most
        result.check(
            "row_ratio",
            inside,
            f"{rows} rows, {ratio:.2f} times the last published batch's {previous_rows} "
            f"({'within' if inside else 'outside'} 1/{most:g}..{most:g})",
        )
    schema = table.schema()
    for column, limit in sorted(policy.max_null_rate.items()):
        try:
            field_id = schema.find_field(column).field_id
        except ValueError:
            result.check(f"null_rate.{column}", False, f"the table has no column {column!r}")
            continue
        known = [f for f in batch if f.null_value_counts and field_id in f.null_value_counts]
        if len(known) < len(batch):
            result.check(
                f"null_rate.{column}",
                False,
                f"{len(batch) - len(known)} data file(s) carry no null count for {column!r} "
                "(metrics mode none): the rate cannot be judged",
            )
            continue
        nulls = sum(f.null_value_counts[field_id] for f in known)
        rate = nulls / rows if rows else 0.0
        result.check(
            f"null_rate.{column}",
            rate <= limit,
            f"{column} null in {nulls} of {rows} rows ({rate:.1%}, at most {limit:.1%})",
        )
    if policy.schema_unchanged and main is not None:
        same = head.schema_id == main.schema_id
        result.check(
            "schema",
            same,
            "the branch head's schema is main's"
            if same
            else f"the branch head has schema {head.schema_id}, main {main.schema_id}",
        )
    if policy.sql_assertions:
        _assert_sql(table, head_id, {f.file_path for f in batch}, policy, result)
    return result


def _assert_sql(
    table: Table, head_id: int, batch: set[str], policy: PublishPolicy, result: Audit
) -> None:
    """The owner's SQL assertions (`sql.<name>`) on the batch's rows, deletes applied."""
    scan = table.scan(snapshot_id=head_id)
    tasks = [t for t in scan.plan_files() if t.file.file_path in batch]
    mb = sum(t.file.file_size_in_bytes for t in tasks) / MiB
    if mb > policy.sql_max_batch_mb:
        for name in policy.sql_assertions:
            result.check(
                f"sql.{name}",
                False,
                f"not run: the batch's data files hold {mb:.0f} MB, more than "
                f"sql_max_batch_mb ({policy.sql_max_batch_mb:g}) allows reading into the leader",
            )
        return
    rows = ArrowScan(table.metadata, table.io, scan.projection(), AlwaysTrue()).to_table(tasks)
    verdicts = sql_assertions.run(rows, policy.sql_assertions, policy.sql_timeout_seconds)
    for name, verdict in verdicts.items():
        result.check(f"sql.{name}", verdict.passed, verdict.detail)


def fast_forward(table: Table, result: Audit) -> None:
    """Main to the audited branch head, asserting main is still where the audit read it
    (CommitFailedException otherwise: a writer committed to main meanwhile; FormatUnwritable
    on a table pyiceberg cannot commit to)."""
    require_writable(table, "publishing the audited branch")
    table.manage_snapshots().set_current_snapshot(result.branch_snapshot_id).commit()


def explain(table: Table, policy: PublishPolicy, last: PublishAudit | None) -> dict[str, Any]:
    """What the leader's next publish round would do with the table, from its refs and the
    last audit of the branch."""
    head = branch_head(table, policy.branch)
    main = table.current_snapshot()
    main_id = main.snapshot_id if main is not None else None
    checks = ["fast_forward", "rows"]
    checks += ["row_ratio"] * (policy.max_row_ratio is not None)
    checks += [f"null_rate.{c}" for c in sorted(policy.max_null_rate)]
    checks += ["schema"] * policy.schema_unchanged
    checks += [f"sql.{n}" for n in sorted(policy.sql_assertions)]
    if not policy.enabled:
        due, reason = False, "write-audit-publish is disabled (policy publish.enabled)"
    elif head is None:
        due, reason = False, f"no branch {policy.branch!r} yet: writers create it and commit to it"
    elif head == main_id:
        due, reason = False, f"main is at the head of {policy.branch!r}: nothing to publish"
    elif last is not None and last.branch_snapshot_id == head:
        due, reason = False, f"the branch head {head} was audited already: {last.reason}"
    else:
        due = True
        reason = f"the branch head {head} is new: the next round audits it ({', '.join(checks)})"
    return {
        "enabled": policy.enabled,
        "branch": policy.branch,
        "branch_snapshot_id": head,
        "main_snapshot_id": main_id,
        "checks": checks,
        "due": due,
        "reason": reason,
        "last_audit": last,
    }
