"""The operator CLI against a live API: one real uvicorn process (`lakewarden api`) on a
real Postgres for the module. Every command runs in `-o json` (compared with what the API
itself answers) and in the table form (it renders); and the failures an operator meets: a
wrong URL, no token, a task that does not exist, a bad `-o`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from conftest import TEMPLATE, _admin, _with_db, make_test_runtime
from helpers import api_process, append_batches, bearer, free_port, issue_token, make_table
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import text
from typer.testing import CliRunner

from cli.main import app
from lakewarden import holds
from lakewarden.alerts import store
from lakewarden.db.locks import DBLocks
from lakewarden.db.models import Task
from lakewarden.db.session import transaction
from lakewarden.leader import acquire_or_renew
from lakewarden.runtime import Runtime
from lakewarden.tasks import repo

TABLES = ("orders", "returns", "items", "refunds")
# A signal as the health watch stores it (health.model.Signal).
SIGNAL = {
    "kind": "compaction",
    "metric": "reducible_files",
    "value": 20.0,
    "threshold": 12.0,
    "reason": "20 files more than the bytes need",
}


@dataclass
class Live:
    url: str
    rt: Runtime
    token: str  # an admin's
    http: httpx.Client  # the API called directly, as the admin

    def cli(self, *argv: str, token: str | None = None, url: str | None = None) -> Any:
        """`lakewarden ARGV` against this API; its CliRunner result."""
        env = {"LAKEWARDEN_URL": url or self.url, "LAKEWARDEN_TOKEN": token or self.token}
        env["COLUMNS"] = "200"  # rich's width off a terminal: cells unfolded, for the asserts
        return CliRunner().invoke(app, list(argv), env=env)

    def json(self, *argv: str) -> Any:
        result = self.cli(*argv, "-o", "json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def get(self, path: str, **params: Any) -> Any:
        response = self.http.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def live(
    server_url: str, template_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    db = f"lw_test_cli_{uuid.uuid4().hex[:10]}"
    with _admin(server_url) as conn:
        conn.execute(f'CREATE DATABASE "{db}" TEMPLATE "{TEMPLATE}"')
    db_url = _with_db(server_url, db)
    tmp = tmp_path_factory.mktemp("cli")
    rt = make_test_runtime(db_url, tmp)
    for name in TABLES:
        append_batches(make_table(rt, namespace="sales", name=name), 2)
    token = issue_token(rt, name="cli-admin")
    try:
        with (
            api_process(db_url, tmp) as url,
            httpx.Client(base_url=url, headers=bearer(token), timeout=60) as http,
        ):
            for name in TABLES:
                r = http.post("/api/v1/tables", json={"namespace": "sales", "name": name})
                assert r.status_code == 201, r.text
            with transaction(rt.engine) as session:  # a scheduler leads, for `check`
                acquire_or_renew(session, DBLocks.SCHEDULER_LEASE, "scheduler-test", 3600)
            yield Live(url, rt, token, http)
    finally:
        rt.engine.dispose()
        if isinstance(rt.catalog, SqlCatalog):
            rt.catalog.engine.dispose()
        with _admin(server_url) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def _table_mode(live: Live, *argv: str) -> str:
    """The command's table form: it succeeds and prints something; the token is not in it."""
    result = live.cli(*argv)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() and live.token not in result.output
    return str(result.stdout)


def test_tables_worst_first_with_scores(live: Live) -> None:
    with live.rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE managed_tables SET health_score = 42, health_measured_at = now(), "
                "health_signals = CAST(:signals AS jsonb) WHERE name = 'returns'"
            ),
            {"signals": json.dumps([SIGNAL])},
        )
    assert live.json("tables") == live.get("/api/v1/tables", sort="registered", limit=50)
    worst = live.json("tables", "--worst", "--namespace", "sal*")
    assert worst == live.get("/api/v1/tables", sort="health", namespace="sal*", limit=50)
    assert worst["items"][0]["name"] == "returns" and worst["items"][0]["health_score"] == 42
    shown = _table_mode(live, "tables", "--worst")
    assert "sales.returns" in shown and "42" in shown and f"4 of {len(TABLES)} tables" in shown
    assert "compaction: reducible files" in shown  # the signals that fire, by short label
    assert yaml.safe_load(live.cli("tables", "-o", "yaml").stdout) == live.json("tables")


def test_table_shows_health_and_explain(live: Live) -> None:
    data = live.json("table", "sales.orders")
    assert data["table"] == live.get("/api/v1/tables/sales/orders")
    assert data["health"]["table"] == "sales.orders" and data["health"]["data_files"] > 0
    assert set(data["explain"]["kinds"]) >= {"compaction"}
    default = data["table"]["catalog"]
    assert live.json("table", "sales.orders", "--catalog", default)["table"] == data["table"]
    shown = _table_mode(live, "table", "sales.orders")
    assert f"{data['health']['score']}/100" in shown and "what would run now" in shown


def test_trigger_task_cancel_retry(live: Live) -> None:
    created = live.json("trigger", "sales.orders", "compaction")
    task_id = created["id"]
    assert created["kind"] == "compaction" and created["table"] == "sales.orders"
    listed = live.json("tasks", "--table", "sales.orders")
    assert listed == live.get("/api/v1/tasks", table="sales.orders", limit=50)
    assert task_id in [t["id"] for t in listed["items"]]
    assert live.json("task", str(task_id)) == live.get(f"/api/v1/tasks/{task_id}")
    shown = _table_mode(live, "task", str(task_id))
    assert f"task {task_id}: compaction of sales.orders" in shown and "transitions" in shown

    cancelled = live.json("cancel", str(task_id))
    assert cancelled["state"] == "cancelled"
    assert [t["id"] for t in live.json("tasks", "--state", "cancelled")["items"]] == [task_id]
    again = live.json("retry", str(task_id))
    assert again["id"] != task_id and again["kind"] == "compaction"
    assert again == live.get(f"/api/v1/tasks/{again['id']}")
    # The same in the table form: cancel, retry, then a trigger while the retry is open.
    assert "cancelled" in _table_mode(live, "cancel", str(again["id"]))
    retried = _table_mode(live, "retry", str(again["id"]))
    (pending,) = live.json("tasks", "--state", "pending")["items"]
    assert f"task {pending['id']}: compaction of sales.orders" in retried
    assert "sales.orders" in _table_mode(live, "tasks", "--kind", "compaction")
    refused = live.cli("trigger", "sales.orders", "compaction")
    assert (
        refused.exit_code == 1
        and "409" in refused.stderr
        and "already has an open" in refused.stderr
    )


def test_pause_and_resume_a_table_and_everything(live: Live) -> None:
    paused = live.json("pause", "sales.returns", "--reason", "incident 7")
    assert paused["paused"]["reason"] == "incident 7"
    assert paused == live.get("/api/v1/tables/sales/returns")
    assert "incident 7" in _table_mode(live, "tables")
    assert "active" in _table_mode(live, "resume", "sales.returns")
    assert live.get("/api/v1/tables/sales/returns")["paused"] is None
    try:
        frozen = live.json("pause", "--reason", "storage outage")
        assert frozen["frozen"] and frozen["reason"] == "storage outage"
        assert frozen == live.get("/api/v1/maintenance")
        fleet = live.json("check")
        assert "frozen by" in _check(fleet, "maintenance")["detail"]  # reported, not failed
    finally:
        assert "not frozen" in _table_mode(live, "resume")
    assert not live.get("/api/v1/maintenance")["frozen"]
    assert "maintenance: frozen" in _table_mode(live, "pause")
    assert live.json("resume")["frozen"] is False


def test_a_held_kind_is_shown_and_resumed(live: Live) -> None:
    """A kind the scheduler held (lakewarden.holds) in `tables`, `table` and `resume`."""
    with transaction(live.rt.engine) as s:
        fence = acquire_or_renew(s, DBLocks.SCHEDULER_LEASE, "scheduler-test", 3600)
        assert fence is not None
        table_id = s.scalar(text("SELECT id FROM managed_tables WHERE name = 'items'"))
        task_id = repo.create_task(
            s, table_id=table_id, kind="zorder", trigger={"reason": "test"}, actor="test"
        )
        assert task_id is not None
        task = s.get(Task, task_id)
        assert task is not None
        holds.hold(s, fence, task, holds.Cause(holds.VALIDATION_RULE, "rewrite failed"))
    assert "zorder" in _table_mode(live, "tables")
    shown = _table_mode(live, "table", "sales.items")
    assert "zorder held since" in shown and "rewrite failed" in shown
    refused = live.cli("resume", "--kind", "zorder")
    assert refused.exit_code != 0 and "needs the table" in refused.output
    resumed = live.json("resume", "sales.items", "--kind", "zorder")
    assert resumed["held"] == [] and resumed == live.get("/api/v1/tables/sales/items")


def _check(report: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in report["checks"] if c["name"] == name]
    return found


def test_alerts_ack_and_check(live: Live) -> None:
    with transaction(live.rt.engine) as session:
        store.fire(
            session,
            "test_rule",
            "sales.refunds",
            severity="critical",
            summary="refunds are on fire",
            details={},
            runbook="docs/operations.md#alerts",
        )
    listed = live.json("alerts")
    assert listed == live.get("/api/v1/alerts", limit=50)
    (alert,) = [a for a in listed["items"] if a["rule"] == "test_rule"]
    assert "refunds are on fire" in _table_mode(live, "alerts")

    failing = live.cli("check", "-o", "json")
    assert failing.exit_code == 1, failing.output
    report = json.loads(failing.stdout)
    assert not report["healthy"] and "refunds are on fire" in _check(report, "alerts")["detail"]
    assert _check(report, "leader")["ok"] and _check(report, "api")["ok"]
    assert "UNHEALTHY" in live.cli("check").stdout

    acked = live.json("alerts", "ack", str(alert["id"]), "--by", "oncall-ann")
    assert acked["state"] == "acknowledged" and acked["acked_by"] == "oncall-ann"
    assert "acknowledged by" in _table_mode(live, "alerts", "ack", str(alert["id"]))
    assert [a["id"] for a in live.json("alerts", "--state", "acknowledged")["items"]] == [
        alert["id"]
    ]
    assert live.json("check")["healthy"]  # acknowledged: someone is on it
    assert "healthy" in _table_mode(live, "check")


def test_policy_get_set_history(live: Live, tmp_path: Path) -> None:
    changed = live.json("policy", "set", "sales.items", "compaction.min_small_files=7")
    assert changed["table_settings"] == {"compaction": {"min_small_files": 7}}
    assert changed["policy"]["compaction"]["min_small_files"] == 7
    got = live.json("policy", "get", "sales.items")
    assert got == changed and got["policy"] == live.get("/api/v1/tables/sales/items")["policy"]
    shown = _table_mode(live, "policy", "get", "sales.items")
    assert "compaction.min_small_files" in shown and "table" in shown and "default" in shown

    # A file replaces the table's own settings; pairs given with it apply over it.
    settings = tmp_path / "policy.yaml"
    settings.write_text("compaction:\n  max_attempts: 2\n")
    replaced = live.json("policy", "set", "sales.items", "-f", str(settings), "ttl.enabled=false")
    assert replaced["table_settings"] == {
        "compaction": {"max_attempts": 2},
        "ttl": {"enabled": False},
    }

    history = live.json("policy", "history", "sales.items")
    assert history == live.get("/api/v1/tables/sales/items/policy/versions")
    assert [v["version"] for v in history][:2] == [3, 2] and history[0]["current"]
    assert "version" in _table_mode(live, "policy", "history", "sales.items")


def _timeless(listed: dict[str, Any]) -> dict[str, Any]:
    """A refs listing without what moves with the clock (its `at`, each ref's `age_hours`:
    two reads a few seconds apart on a loaded machine differ there)."""
    refs = [{k: v for k, v in r.items() if k != "age_hours"} for r in listed["refs"]]
    return {**{k: v for k, v in listed.items() if k != "at"}, "refs": refs}


def test_refs_and_rollback(live: Live) -> None:
    """Branches and tags as the API lists them; a rollback refused to a viewer, declined at
    the prompt, then done by tag (admin)."""
    table = live.rt.catalog.load_table("sales.refunds")
    first, second = (s.snapshot_id for s in table.snapshots()[:2])
    table.manage_snapshots().create_tag(first, "before-backfill").commit()
    listed = live.json("refs", "sales.refunds")
    assert _timeless(listed) == _timeless(live.get("/api/v1/tables/sales/refunds/refs"))
    assert [(r["name"], r["type"]) for r in listed["refs"]] == [
        ("main", "branch"),
        ("before-backfill", "tag"),
    ]
    shown = _table_mode(live, "refs", "sales.refunds")
    assert (
        "before-backfill" in shown and f"current snapshot {listed['current_snapshot_id']}" in shown
    )

    viewer = issue_token(live.rt, "viewer", name="cli-viewer")
    refused = live.cli(
        "rollback", "sales.refunds", "--to-tag", "before-backfill", "-y", token=viewer
    )
    assert refused.exit_code == 1 and "403" in refused.stderr and viewer not in refused.output
    declined = CliRunner().invoke(
        app,
        ["rollback", "sales.refunds", "--to-snapshot", str(first)],
        env={"LAKEWARDEN_URL": live.url, "LAKEWARDEN_TOKEN": live.token},
        input="n\n",
    )
    assert declined.exit_code == 1 and f"now at snapshot {listed['current_snapshot_id']}" in (
        declined.stderr
    )
    assert live.get("/api/v1/tables/sales/refunds/refs")["current_snapshot_id"] != first
    both = live.cli("rollback", "sales.refunds", "--to-snapshot", "1", "--to-tag", "x")
    assert both.exit_code == 2 and "exactly one" in both.output

    done = live.json("rollback", "sales.refunds", "--to-tag", "before-backfill", "--yes")
    assert done["rolled_back"] and done["to_snapshot_id"] == first
    assert live.get("/api/v1/tables/sales/refunds/refs")["current_snapshot_id"] == first
    again = _table_mode(live, "rollback", "sales.refunds", "--to-snapshot", str(first), "-y")
    assert "already at snapshot" in again
    missing = live.cli("rollback", "sales.refunds", "--to-snapshot", str(second + 1), "-y")
    assert missing.exit_code == 1 and "404" in missing.stderr and "no snapshot" in missing.stderr


def test_revert_dry_run_then_apply(live: Live) -> None:
    """`lakewarden revert`: a dry run says what would change and changes nothing; --apply
    commits that plan; the second append's rows are gone, the first's kept."""
    table = live.rt.catalog.load_table("sales.returns")
    first, second = (s.snapshot_id for s in table.snapshots()[:2])
    rows = table.scan(snapshot_id=first).to_arrow().num_rows
    dry = live.json("revert", "sales.returns", "--from", str(first), "--to", str(second))
    assert dry["dry_run"] and dry["rows_removed"] > 0 and dry["files_removed"]
    assert table.refresh().scan().to_arrow().num_rows == rows + dry["rows_removed"]
    shown = _table_mode(
        live, "revert", "sales.returns", "--from", str(first), "--to", str(second), "--apply", "-y"
    )
    assert "revert committed snapshot" in shown
    assert table.refresh().scan().to_arrow().num_rows == rows
    bad = live.cli("repair", "sales.returns", "--partition", "nofield", "--to-snapshot", "1")
    assert bad.exit_code == 2 and "FIELD=VALUE" in bad.output

    # An audit branch's append, applied to main by `cherry-pick`.
    head = table.refresh().current_snapshot()
    assert head is not None
    table.manage_snapshots().create_branch(head.snapshot_id, "audit").commit()
    table = table.refresh()
    before = table.scan().to_arrow()
    table.append(before.slice(0, 3), branch="audit")
    audited = table.refresh().metadata.refs["audit"].snapshot_id
    picked = live.json("cherry-pick", "sales.returns", "--snapshot", str(audited), "--apply", "-y")
    assert picked["committed_snapshot_id"] and picked["rows_restored"] == 3
    assert table.refresh().scan().to_arrow().num_rows == before.num_rows + 3

    # `publish`: the audits (none: the policy is off) and what the next round would do.
    shown = _table_mode(live, "publish", "sales.returns")
    assert "write-audit-publish disabled, branch audit" in shown
    assert "next round: write-audit-publish is disabled" in shown
    assert live.json("publish", "sales.returns")["audits"] == []


def test_partitions_and_watermark(live: Live) -> None:
    path = "/api/v1/tables/sales/returns"
    assert live.json("partitions", "sales.returns") == live.get(f"{path}/partitions", limit=100)
    assert "readiness is disabled" in _table_mode(live, "partitions", "sales.returns")
    off = live.cli("watermark", "sales.returns", "2026-01-01T00:00:00Z")
    assert off.exit_code == 1 and "409" in off.stderr and "readiness.enabled: true" in off.stderr

    beat_off = live.cli("heartbeat", "sales.returns", "a")
    assert beat_off.exit_code == 1 and "409" in beat_off.stderr
    assert "readiness.enabled: true" in beat_off.stderr

    vague = live.cli("watermark", "sales.returns", "yesterday")
    assert vague.exit_code == 1 and "422" in vague.stderr and "watermark: " in vague.stderr

    # The partitions of the readiness column (region: identity, so the quiet rule), as the
    # leader recorded them.
    set_policy = ("readiness.enabled=true", "readiness.partition=region")
    live.json("policy", "set", "sales.returns", *set_policy)
    quiet = live.cli("watermark", "sales.returns", "2026-01-01T00:00:00Z")
    assert quiet.exit_code == 1 and "rule 'quiet'" in quiet.stderr
    with live.rt.engine.begin() as conn:  # a partition the leader judged ready
        conn.execute(
            text(
                'INSERT INTO partition_readiness (table_id, "column", partition, ready, since, '
                "snapshot_id, reason, tag, last_commit_at, last_commit_snapshot_id) SELECT id, "
                "'region', 'a', true, now(), 1, 'quiet since its end', 'ready-a', now(), 1 "
                "FROM managed_tables WHERE name = 'returns'"
            )
        )
    ready = live.json("partitions", "sales.returns", "--ready")
    assert ready == live.get(f"{path}/partitions", ready="true", limit=100)
    assert [p["partition"] for p in ready["items"]] == ["a"]
    assert live.json("partitions", "sales.returns", "--not-ready")["items"] == []
    shown = _table_mode(live, "partitions", "sales.returns")
    assert "ready-a" in shown and "quiet since its end" in shown

    # The writer ran for region c and wrote nothing; for a, which has data, it changes nothing.
    assert "sales.returns c: recorded" in _table_mode(live, "heartbeat", "sales.returns", "c")
    empty = live.json("heartbeat", "sales.returns", "c")
    assert "becomes ready with no data in the leader's next round" in empty["effect"]
    assert live.json("heartbeat", "sales.returns", "a")["has_data"]
    (waiting,) = live.json("partitions", "sales.returns", "--not-ready")["items"]
    assert (waiting["partition"], waiting["no_data"]) == ("c", True)


def test_costs_by_table_and_kind(live: Live) -> None:
    """`lakewarden costs`: the API's rollup, as a table and as JSON."""
    from lakewarden.db.models import JobRun, ManagedTable

    with transaction(live.rt.engine) as s:
        row = s.query(ManagedTable).filter_by(namespace="sales", name=TABLES[0]).one()
        task = Task(table_id=row.id, kind="clean", state="succeeded", trigger={}, pool="default")
        s.add(task)
        s.flush()
        s.add(
            JobRun(
                task_id=task.id,
                attempt=1,
                state="succeeded",
                scheduler_id="t",
                leader_epoch=1,
                finished_at=datetime.now(UTC),
                duration_ms=2000,
                metrics={"cost": {"executor_cpu_s": 3.25, "executor_run_s": 4.0}},
            )
        )
    shown = _table_mode(live, "costs", "--by", "kind")
    assert "clean" in shown and "3.2" in shown
    found = live.json("costs", "--by", "table")
    assert [(c["key"], c["executor_cpu_s"]) for c in found["items"]] == [
        (f"{live.rt.settings.catalog_name}.sales.{TABLES[0]}", 3.25)
    ]
    result = live.cli("costs", "--by", "planet")
    assert result.exit_code == 1 and "by" in result.output


def test_errors_say_what_to_fix(live: Live) -> None:
    missing = live.cli("task", "987654")
    assert missing.exit_code == 1 and "404" in missing.stderr and "does not exist" in missing.stderr

    anonymous = CliRunner().invoke(
        app, ["tables"], env={"LAKEWARDEN_URL": live.url, "LAKEWARDEN_TOKEN": None}
    )
    assert anonymous.exit_code == 1 and "401" in anonymous.stderr
    assert "LAKEWARDEN_TOKEN" in anonymous.stderr

    nowhere = f"http://127.0.0.1:{free_port()}"
    down = live.cli("check", "-o", "json", url=nowhere)
    assert down.exit_code == 1 and not json.loads(down.stdout)["healthy"]
    assert nowhere in _check(json.loads(down.stdout), "api")["detail"]

    bad_output = live.cli("tables", "-o", "xml")
    assert bad_output.exit_code == 2 and "xml" in bad_output.output

    bad_name = live.cli("table", "orders")
    assert bad_name.exit_code == 2 and "NS.NAME" in bad_name.output

    conflict = live.cli("policy", "set", "sales.items", "compaction.no_such_setting=1")
    assert (
        conflict.exit_code == 1 and "422" in conflict.stderr and live.token not in conflict.output
    )


def test_the_installed_command_fails_cleanly_on_a_wrong_url(live: Live) -> None:
    """As a shell runs it: a process, its exit code, a message and no traceback; and its
    --version and shell completion."""
    nowhere = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, "LAKEWARDEN_URL": nowhere, "LAKEWARDEN_TOKEN": live.token}
    run = subprocess.run(
        [sys.executable, "-m", "cli", "tasks"], env=env, capture_output=True, text=True
    )
    assert run.returncode == 1 and run.stdout == ""
    assert nowhere in run.stderr and "LAKEWARDEN_URL" in run.stderr
    assert "Traceback" not in run.stderr and live.token not in run.stderr
    version = subprocess.run(
        [sys.executable, "-m", "cli", "--version"], capture_output=True, text=True
    )
    assert version.returncode == 0 and version.stdout.startswith("lakewarden ")
    # Shell completion (what `lakewarden --install-completion` installs calls this).
    completion = {"_LAKEWARDEN_COMPLETE": "complete_bash", "COMP_WORDS": "lakewarden ta"}
    completed = subprocess.run(
        [sys.executable, "-m", "cli"],
        env={**os.environ, **completion, "COMP_CWORD": "1"},
        capture_output=True,
        text=True,
    )
    assert completed.stdout.split() == ["tables", "table", "tasks", "task"]
