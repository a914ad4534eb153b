"""/metrics on a live app over real rows: the exposition parses (prometheus_client's own
parser), label values are escaped, counters are counters, histograms cumulative, and the
per-table series honour the cardinality guard."""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import yaml
from conftest import make_test_runtime, serve
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from sqlalchemy import text

from lakewarden.runtime import Runtime
from lakewarden.settings import PoolCapacity
from lakewarden.states import OPEN_TASK_STATES
from services.api.app import GC_YOUNG_THRESHOLD, create_app

ODD_NAME = 'we"ird\\name\nx'  # a quote, a backslash and a newline: each must be escaped
MONITORING = Path(__file__).resolve().parents[2] / "charts" / "lakewarden" / "files"


def seed(rt: Runtime) -> None:
    """Three live tables (one with an odd name, one never measured), one retired; finished,
    waiting and running tasks with known latencies; ended and running job runs; an open
    alert; a fresh, a stale and a long-dead process."""
    with rt.engine.begin() as c:
        ids = {}
        for name, score, retired in (
            ("plain", 90, False),
            (ODD_NAME, 10, False),
            ("unmeasured", None, False),
            ("gone", 0, True),
        ):
            ids[name] = c.execute(
                text(
                    "INSERT INTO managed_tables (catalog, namespace, name, policy, health_score,"
                    " retired_at) VALUES ('lake', 'ns', :n, '{}', :s,"
                    " CASE WHEN :r THEN now() END) RETURNING id"
                ),
                {"n": name, "s": score, "r": retired},
            ).scalar_one()
        # (table, kind, state, seconds ago created, latency in seconds)
        for table, kind, state, ago, latency in (
            ("plain", "compaction", "succeeded", 100, 60),
            ("plain", "compaction", "failed", 50, 2),
            ("plain", "expire_snapshots", "pending", 300, 0),
            (ODD_NAME, "compaction", "succeeded", 5000, 4000),
            (ODD_NAME, "expire_snapshots", "running", 20, 0),
        ):
            c.execute(
                text(
                    "INSERT INTO tasks (table_id, kind, state, trigger, created_at, updated_at)"
                    " VALUES (:t, :k, :s, '{}', now() - make_interval(secs => :ago),"
                    " now() - make_interval(secs => :ago - :lat))"
                ),
                {"t": ids[table], "k": kind, "s": state, "ago": ago, "lat": latency},
            )
        c.execute(
            text(
                "INSERT INTO job_runs (task_id, attempt, state, scheduler_id, leader_epoch,"
                " duration_ms) SELECT id, 1, CASE state WHEN 'pending' THEN 'failed'"
                " ELSE state END, 's', 1, CASE WHEN state = 'running' THEN NULL"
                " ELSE 20000 END FROM tasks WHERE state <> 'failed'"
            )
        )
        c.execute(
            text(
                "INSERT INTO alerts (rule, key, severity, state, summary, details)"
                " VALUES ('task_failed', 'ns.plain:compaction', 'critical', 'firing', 's', '{}')"
            )
        )
        for process_id, role, ago in (
            ("w-1", "worker", 1),
            ("s-1", "scheduler", 100),
            ("s-0", "scheduler", 7200),
        ):
            c.execute(
                text(
                    "INSERT INTO process_heartbeats (process_id, role, hostname, pid, last_seen)"
                    " VALUES (:p, :r, 'h', 1, now() - make_interval(secs => :ago))"
                ),
                {"p": process_id, "r": role, "ago": ago},
            )


def scrape(client: TestClient) -> dict[str, list[Sample]]:
    """Samples by family name, parsed from /metrics."""
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=")
    return {f.name: f.samples for f in text_string_to_metric_families(r.text)}


def types_of(body: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(body)}


def one(samples: Iterable[Sample], **labels: str) -> float:
    (value,) = [s.value for s in samples if labels.items() <= s.labels.items()]
    return value


@pytest.fixture
def seeded(rt: Runtime) -> Runtime:
    seed(rt)
    return rt


def test_metrics_parse_with_escaped_labels_counters_and_cumulative_histograms(
    seeded: Runtime, client: TestClient
) -> None:
    body = client.get("/metrics").text
    types = types_of(body)
    assert types["lakewarden_tasks_finished"] == "counter"
    assert types["lakewarden_job_runs"] == "counter"
    assert types["lakewarden_task_latency_seconds"] == "histogram"
    assert types["lakewarden_job_duration_seconds"] == "histogram"
    assert types["lakewarden_tasks"] == "gauge"
    m = scrape(client)

    # The odd name round-trips through the exposition's escaping.
    assert r'table="we\"ird\\name\nx"' in body
    assert one(m["lakewarden_table_health_score"], table=ODD_NAME) == 10
    assert one(m["lakewarden_table_health_score"], table="plain") == 90
    assert {s.labels["table"] for s in m["lakewarden_table_health_score"]} == {"plain", ODD_NAME}
    age = one(m["lakewarden_table_last_success_age_seconds"], table=ODD_NAME, kind="compaction")
    assert 900 <= age < 1100  # created 5000 s ago, finished 4000 s later
    assert one(m["lakewarden_tables"]) == 3 and one(m["lakewarden_tables_omitted"]) == 0

    finished = m["lakewarden_tasks_finished"]
    assert {s.name for s in finished} <= {
        "lakewarden_tasks_finished_total",
        "lakewarden_tasks_finished_created",
    }
    assert one(finished, kind="compaction", outcome="succeeded") == 2
    assert one(finished, kind="compaction", outcome="failed") == 1
    assert one(m["lakewarden_tasks"], kind="expire_snapshots", state="pending") == 1
    # one region: its backlog is every open task (lakewarden_tasks' open rows, summed)
    backlog = {
        (s.labels["region"], s.labels["state"]): s.value for s in m["lakewarden_region_tasks"]
    }
    summed: dict[tuple[str, str], float] = {}
    for s in m["lakewarden_tasks"]:
        if s.labels["state"] in OPEN_TASK_STATES:
            key = ("default", s.labels["state"])
            summed[key] = summed.get(key, 0) + s.value
    assert backlog == summed and backlog
    assert one(m["lakewarden_job_runs"], kind="compaction", state="succeeded") == 2
    assert one(m["lakewarden_job_runs_running"], kind="expire_snapshots") == 1
    assert one(m["lakewarden_alerts_open"], rule="task_failed", severity="critical") == 1
    assert 290 <= one(m["lakewarden_task_oldest_waiting_seconds"], kind="expire_snapshots") < 400

    latency = m["lakewarden_task_latency_seconds"]
    buckets = [
        (float(s.labels["le"]), s.value)
        for s in latency
        if s.name.endswith("_bucket") and s.labels["kind"] == "compaction"
    ]
    counts = [n for _, n in buckets]
    assert counts == sorted(counts), "buckets are cumulative"
    assert dict(buckets)[5.0] == 1 and dict(buckets)[60.0] == 2 and dict(buckets)[3600.0] == 2
    assert buckets[-1] == (float("inf"), 3)
    assert one([s for s in latency if s.name.endswith("_count")], kind="compaction") == 3
    assert one([s for s in latency if s.name.endswith("_sum")], kind="compaction") == pytest.approx(
        4062, abs=1
    )

    up = m["lakewarden_process_up"]
    assert one(up, holder="w-1", role="worker") == 1
    assert one(up, holder="s-1", role="scheduler") == 0  # stale
    assert "s-0" not in {s.labels["holder"] for s in up}  # dead for an hour: forgotten
    assert one(m["lakewarden_process_heartbeat_age_seconds"], holder="s-1") >= 100
    assert one(m["lakewarden_scheduler_leader"]) == 0


@pytest.fixture
def guarded_client(seeded: Runtime, db_url: str, tmp_path: Path) -> Iterator[TestClient]:
    rt = make_test_runtime(db_url, tmp_path, metrics_max_tables=1)
    try:
        with serve(rt) as client:
            yield client
    finally:
        rt.engine.dispose()


def test_the_cardinality_guard_keeps_the_least_healthy_tables(guarded_client: TestClient) -> None:
    m = scrape(guarded_client)
    assert [s.labels["table"] for s in m["lakewarden_table_health_score"]] == [ODD_NAME]
    assert {s.labels["table"] for s in m["lakewarden_table_last_success_age_seconds"]} == {ODD_NAME}
    assert one(m["lakewarden_tables_omitted"]) == 2


# --- The Grafana dashboard and the alerting rules query what /metrics exports -------------------

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS_AND_RANGES = re.compile(r"\{[^}]*\}|\[[^\]]*\]")
_GROUPINGS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*\b(?!\s*\()")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "group_left", "group_right"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are no function,
    keyword, label (inside {...} or a grouping) or range ([...], Grafana's $__ variables)."""
    bare = _GROUPINGS.sub(" ", _MATCHERS_AND_RANGES.sub(" ", _STRINGS.sub(" ", expr)))
    return {name for name in _IDENTIFIER.findall(bare) if name not in _KEYWORDS}


def test_metric_names_of_promql() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (kind, le) (rate(a_bucket{s=~"x|y"}[$__rate_interval])))'
        " / on (kind) group_left b_total > 7 * 86400 and absent(c) or vector(0)"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}


def monitoring_exprs() -> dict[str, str]:
    """Every PromQL expression of the dashboard and the rules, by where it is."""
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    rules = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())
    exprs = {
        f"dashboard {p['title']!r} {t['refId']}": t["expr"]
        for p in dashboard["panels"]
        for t in p.get("targets", [])
    }
    exprs.update({f"rule {r['alert']}": r["expr"] for g in rules["groups"] for r in g["rules"]})
    return exprs


def test_dashboard_and_rules_query_only_exported_metrics(
    seeded: Runtime, client: TestClient
) -> None:
    # An elastic pool: its capacity series exist only where one is configured.
    seeded.settings.pool_capacity = {"default": PoolCapacity(max=2)}
    exported = {s.name for samples in scrape(client).values() for s in samples}
    exprs = monitoring_exprs()
    assert len(exprs) > 20
    used = set()
    for where, expr in exprs.items():
        names = metric_names(expr)
        assert names, f"{where} selects no metric: {expr}"
        assert names <= exported, f"{where} selects {names - exported}, which /metrics lacks"
        used |= names
    assert any(n.endswith("_bucket") for n in used) and any(n.endswith("_total") for n in used)


def test_a_server_freezes_its_startup_heap_and_a_test_app_does_not(rt: Runtime) -> None:
    """A server process (`main`, and `serve_in_thread` as the benchmarks serve) moves its
    startup objects out of the collector's reach: a full collection then scans only what
    came since (B26: 180-300 ms in ~1 scrape of /metrics in 20 before, under 2 ms after).
    A test's app leaves the collector alone (frozen objects are never freed). A server
    also collects its young generation less often (B25: an ingest batch's objects, still
    in use at 700 allocations, set off full collections over and over)."""
    gc.unfreeze()
    threshold = gc.get_threshold()
    try:
        with TestClient(create_app(rt, background=False)):
            assert gc.get_freeze_count() == 0
            assert gc.get_threshold() == threshold
        with TestClient(create_app(rt, background=False, freeze_heap=True)) as client:
            assert gc.get_freeze_count() > 100_000  # the modules, the app, its models
            assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD > threshold[0]
            assert client.get("/healthz").status_code == 200
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
