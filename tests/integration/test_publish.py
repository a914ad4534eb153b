"""Write-audit-publish (issue 33 §1): writers commit to the audit branch; the leader's
round audits each new branch head once (from the manifests) and fast-forwards main when
every check passes; a failed check leaves main alone and alerts until a later commit
passes; main moving on its own is refused, never merged. Checked with pyiceberg."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from fastapi.testclient import TestClient
from helpers import lead
from pyiceberg.table import Table
from sqlalchemy import select

from lakewarden.alerts.rules import evaluate_task_rules
from lakewarden.db.models import Alert
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from services.scheduler.publish import publish_round

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
POLICY = {
    "publish": {
        "enabled": True,
        "branch": "audit",
        "min_rows": 1,
        "max_null_rate": {"v": 0.5},
    }
}


def _batch(ids: list[int], null: bool = False) -> pa.Table:
    return pa.table({"id": ids, "v": [None if null else f"v{i}" for i in ids]}, schema=SCHEMA)


def _publishing(client: TestClient, rt: Runtime, name: str, policy: dict[str, Any]) -> Table:
    """sales.<name> with rows 1 and 2 on main, registered under `policy`, and its audit
    branch at main's head."""
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table(f"sales.{name}", schema=SCHEMA)
    table.append(_batch([1, 2]))
    r = client.post("/api/v1/tables", json={"namespace": "sales", "name": name})
    assert r.status_code == 201, r.text
    r = client.put(f"/api/v1/tables/sales/{name}/policy", json=policy)
    assert r.status_code == 200, r.text
    table = table.refresh()
    head = table.current_snapshot()
    assert head is not None
    table.manage_snapshots().create_branch(head.snapshot_id, "audit").commit()
    return table.refresh()


def _main_rows(table: Table) -> list[int]:
    return sorted(r["id"] for r in table.refresh().scan().to_arrow().to_pylist())


def _alerts(rt: Runtime) -> list[str]:
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, datetime.now(UTC))
    with transaction(rt.engine) as s:
        return list(
            s.scalars(
                select(Alert.summary).where(
                    Alert.rule == "publish_refused", Alert.state == "firing"
                )
            )
        )


def test_audited_batches_are_published_and_bad_ones_never_reach_main(
    client: TestClient, rt: Runtime
) -> None:
    table = _publishing(client, rt, "wap", POLICY)
    fence = lead(rt, "test-leader")

    # A good batch on the branch: explain says the next round audits it; main fast-forwarded.
    table.refresh().append(_batch([3, 4, 5]), branch="audit")
    audited = table.refresh().metadata.refs["audit"].snapshot_id
    explained = client.get("/api/v1/tables/sales/wap/explain").json()["publish"]
    assert explained["due"] and explained["branch_snapshot_id"] == audited
    assert explained["checks"] == ["fast_forward", "rows", "null_rate.v", "schema"]
    assert publish_round(rt, fence) != []
    assert _main_rows(table) == [1, 2, 3, 4, 5]
    assert publish_round(rt, fence) == []  # judged once
    explained = client.get("/api/v1/tables/sales/wap/explain").json()["publish"]
    assert not explained["due"] and "main is at the head of 'audit'" in explained["reason"]
    assert explained["last_audit"]["published"]

    # A batch whose v is all null: main untouched, the alert says why.
    table.refresh().append(_batch([6, 7], null=True), branch="audit")
    assert len(publish_round(rt, fence)) == 1
    assert _main_rows(table) == [1, 2, 3, 4, 5]
    (alert,) = _alerts(rt)
    assert "null_rate.v: v null in 2 of 2 rows (100.0%, at most 50.0%)" in alert
    audits: list[dict[str, Any]] = client.get("/api/v1/tables/sales/wap/publish").json()["audits"]
    assert [(a["passed"], a["published"]) for a in audits] == [(False, False), (True, True)]
    assert audits[0]["checks"]["fast_forward"]["passed"]

    # The writer fixes it on the branch (a later commit dilutes the nulls): published.
    table.refresh().append(_batch([8, 9, 10]), branch="audit")
    publish_round(rt, fence)
    assert _main_rows(table) == list(range(1, 11))
    assert _alerts(rt) == []

    # A writer commits to main on its own: the branch cannot fast-forward; refused.
    table.refresh().append(_batch([11]))
    table.refresh().append(_batch([12]), branch="audit")
    publish_round(rt, fence)
    assert 12 not in _main_rows(table)
    (alert,) = _alerts(rt)
    assert "main moved on its own" in alert and "cherry-pick" in alert


def test_a_publish_policy_is_checked(client: TestClient, rt: Runtime) -> None:
    rt.catalog.create_namespace_if_not_exists("sales")
    rt.catalog.create_table("sales.wap2", schema=SCHEMA)
    assert (
        client.post("/api/v1/tables", json={"namespace": "sales", "name": "wap2"}).status_code
        == 201
    )
    for bad, says in (
        ({"publish": {"branch": "main"}}, "must not be main"),
        ({"publish": {"enabled": True, "max_null_rate": {"v": 2}}}, "less than or equal to 1"),
        ({"publish": {"enabled": True, "max_null_rate": {"zzz": 0.1}}}, "zzz"),
        ({"publish": {"min_rows": 5, "max_rows": 1}}, "must not exceed"),
        ({"publish": {"sql_assertions": {"neg": "DELETE FROM batch"}}}, "must be a SELECT"),
        ({"publish": {"sql_assertions": {"neg": "SELEC 1"}}}, "sql_assertions.neg does not"),
        ({"publish": {"sql_assertions": {"two": "SELECT 1; SELECT 2"}}}, "one SELECT"),
        ({"publish": {"sql_assertions": {"bad name!": "SELECT 1"}}}, "bad name!"),
    ):
        r = client.put("/api/v1/tables/sales/wap2/policy", json=bad)
        assert r.status_code == 422 and says in r.text, (bad, r.text)


def test_sql_assertions_judge_the_batch_alone_in_a_sandbox(client: TestClient, rt: Runtime) -> None:
    assertions = {
        "no_negative_ids": "SELECT * FROM batch WHERE id < 0",
        "unique_ids": "SELECT id, count(*) FROM batch GROUP BY id HAVING count(*) > 1",
        "no_files": "SELECT * FROM read_csv('/etc/passwd')",
    }
    policy: dict[str, Any] = {"publish": {"enabled": True, "sql_assertions": assertions}}
    table = _publishing(client, rt, "wap3", policy)
    fence = lead(rt, "test-leader")

    # The batch repeats main's ids 1 and 2 (main is not in `batch`) and one of its own.
    table.refresh().append(_batch([1, 2, -3, 4, 4]), branch="audit")
    assert len(publish_round(rt, fence)) == 1
    assert _main_rows(table) == [1, 2]
    (audit,) = client.get("/api/v1/tables/sales/wap3/publish").json()["audits"]
    checks = audit["checks"]
    assert checks["sql.no_negative_ids"] == {
        "passed": False,
        "detail": "returned 1 row(s), the first {'id': -3, 'v': 'v-3'}",
    }
    assert not checks["sql.unique_ids"]["passed"]
    assert "returned 1 row(s)" in checks["sql.unique_ids"]["detail"]
    assert "'id': 4" in checks["sql.unique_ids"]["detail"]
    # The owner's SQL cannot read the leader's files.
    assert not checks["sql.no_files"]["passed"]
    assert "file system operations are disabled" in checks["sql.no_files"]["detail"]

    # Assertions that hold on the next batch: published.
    del assertions["no_files"]
    r = client.put("/api/v1/tables/sales/wap3/policy", json=policy)
    assert r.status_code == 200, r.text
    table.refresh().append(_batch([5, 6]), branch="audit")
    publish_round(rt, fence)
    # The branch holds the rejected batch too, so its -3 and 4s still fail the checks.
    assert _main_rows(table) == [1, 2]
    table.refresh().delete("id < 0 or id = 4", branch="audit")
    publish_round(rt, fence)
    assert _main_rows(table) == [1, 1, 2, 2, 5, 6]
    audit = client.get("/api/v1/tables/sales/wap3/publish").json()["audits"][0]
    assert audit["published"]
    assert audit["checks"]["sql.unique_ids"] == {"passed": True, "detail": "returned no rows"}

    # A batch too large to read into the leader fails its assertions, unread.
    policy["publish"]["sql_max_batch_mb"] = 0.000001
    assert client.put("/api/v1/tables/sales/wap3/policy", json=policy).status_code == 200
    table.refresh().append(_batch([7]), branch="audit")
    publish_round(rt, fence)
    assert 7 not in _main_rows(table)
    audit = client.get("/api/v1/tables/sales/wap3/publish").json()["audits"][0]
    assert "not run: the batch's data files hold" in audit["checks"]["sql.unique_ids"]["detail"]
