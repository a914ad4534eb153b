"""Auto-management on a real Postgres: management rules through the API (CRUD, refusals,
access), opting a table out, and `lakewarden.catalogs.adoption.adopt` on listings of
thousands of fake tables (adoption never loads a table, so no Iceberg table is needed):
what it adopts, excludes, holds back, retires and renames; run twice, and run at once from
two threads."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import bearer, issue_token
from sqlalchemy import func, select

from lakewarden.catalogs.adoption import DROPPED, OPT_OUT_CLEARED, OPTED_OUT, AdoptResult, adopt
from lakewarden.db.models import (
    AuditEntry,
    ManagedTable,
    ManagementRule,
    PolicyVersion,
    Task,
    TaskTransition,
)
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from lakewarden.tables import set_namespace_defaults

Listing = list[tuple[str, str, str | None]]


def add_rule(rt: Runtime, namespace: str = "*", **fields: Any) -> int:
    with transaction(rt.engine) as s:
        rule = ManagementRule(
            catalog=fields.pop("catalog", rt.settings.catalog_name), namespace=namespace, **fields
        )
        s.add(rule)
        s.flush()
        return rule.id


def run_adopt(rt: Runtime, listing: Listing, **kw: Any) -> AdoptResult:
    with transaction(rt.engine) as s:
        return adopt(s, kw.pop("catalog", rt.settings.catalog_name), listing, actor="test", **kw)


def rows(rt: Runtime) -> dict[tuple[str, str], ManagedTable]:
    with transaction(rt.engine) as s:
        return {(r.namespace, r.name): r for r in s.scalars(select(ManagedTable))}


def fleet(n: int, namespaces: int = 20) -> Listing:
    """n fake tables spread over `namespaces` namespaces, every 10th a tmp_ table."""
    return [
        (
            f"ns{i % namespaces}" if i % 3 else f"deep.ns{i % namespaces}.x",
            f"{'tmp' if i % 10 == 0 else 't'}_{i}",
            f"s3://wh/{i}/metadata/00001.metadata.json",
        )
        for i in range(n)
    ]


# --- adopt() ---------------------------------------------------------------------------


def test_adopt_manages_what_the_rules_cover_with_their_policy(rt: Runtime) -> None:
    compact = {"compaction": {"min_small_files": 7}}
    wide = add_rule(rt, "*", exclude=["tmp_*"], policy={})
    deep = add_rule(rt, "deep.*", policy=compact)
    off = add_rule(rt, "ns1", enabled=False)
    listing = fleet(2_000)
    result = run_adopt(rt, listing)

    expected = {(ns, n) for ns, n, _ in listing if not n.startswith("tmp_")}
    # deep.* has no exclude: its tmp_ tables are adopted too
    expected |= {(ns, n) for ns, n, _ in listing if ns.startswith("deep.")}
    found = rows(rt)
    assert set(found) == expected and len(result.adopted) == len(expected)
    assert result.counts == {
        "adopted": len(expected),
        "revived": 0,
        "renamed": 0,
        "retired": 0,
    }
    assert result.held_back == 0
    for (ns, _), row in found.items():
        rule = deep if ns.startswith("deep.") else wide
        assert row.managed_by == f"rule:{rule}" != f"rule:{off}"
        assert row.policy == (compact if rule == deep else {})
        assert row.policy_version == 1 and row.retired_at is None and not row.opt_out
        assert row.metadata_location is None  # the first refresh loads and ingests it
    with transaction(rt.engine) as s:
        versions = s.execute(select(PolicyVersion.table_id, PolicyVersion.author)).all()
    assert sorted(versions) == sorted((r.id, r.managed_by) for r in found.values())
    assert sorted(result.changed) == sorted(r.id for r in found.values())

    # Run again with the same listing: nothing to do.
    again = run_adopt(rt, listing)
    assert again.counts == dict.fromkeys(again.counts, 0)
    assert rows(rt).keys() == found.keys()


def test_only_tables_in_some_rule_scope_are_adopted(rt: Runtime) -> None:
    assert run_adopt(rt, fleet(50)).adopted == []  # no rule at all
    add_rule(rt, "ns2", include=["t_*"], catalog="other")  # another catalog's rule
    add_rule(rt, "ns1", include=["t_1", "t_21"])
    result = run_adopt(rt, fleet(50))
    assert set(rows(rt)) == {("ns1", "t_1")}  # t_21 is deep.ns1.x's
    assert len(result.adopted) == 1


def test_opted_out_and_unregistered_tables_stay_unmanaged(rt: Runtime) -> None:
    add_rule(rt, "*")
    listing = fleet(30)
    run_adopt(rt, listing)
    before = rows(rt)
    with transaction(rt.engine) as s:
        for key, reason, opt_out in (
            (("ns1", "t_1"), OPTED_OUT, True),
            (("ns2", "t_2"), None, False),  # unregistered through the API
            (("ns4", "t_4"), "maintained by Amoro", False),
        ):
            row = s.get(ManagedTable, before[key].id)
            assert row is not None
            row.retired_at, row.retired_reason, row.opt_out = func.now(), reason, opt_out
    result = run_adopt(rt, listing)
    assert result.counts["adopted"] == result.counts["revived"] == 0
    assert result.held_back == 3
    after = rows(rt)
    assert after[("ns1", "t_1")].retired_at is not None and after[("ns1", "t_1")].opt_out
    assert after[("ns2", "t_2")].retired_at is not None
    assert after[("ns4", "t_4")].retired_reason == "maintained by Amoro"
    # Clearing the opt-out (the reason says so) lets the rule take it back.
    with transaction(rt.engine) as s:
        row = s.get(ManagedTable, before[("ns1", "t_1")].id)
        assert row is not None
        row.opt_out, row.retired_reason = False, OPT_OUT_CLEARED
    result = run_adopt(rt, listing)
    assert result.revived == [before[("ns1", "t_1")].id] and result.held_back == 2
    assert rows(rt)[("ns1", "t_1")].retired_at is None


def test_dropped_tables_are_retired_with_their_history_and_tasks_cancelled(rt: Runtime) -> None:
    add_rule(rt, "*")
    listing = fleet(100)
    run_adopt(rt, listing)
    # an explicitly registered table of the catalog, not in any listing
    with transaction(rt.engine) as s:
        api = ManagedTable(catalog=rt.settings.catalog_name, namespace="ops", name="reg", policy={})
        s.add(api)
        s.flush()
        gone = rows(rt)[("ns1", "t_1")]
        for table_id, state in ((gone.id, TaskState.PENDING), (api.id, TaskState.PLANNED)):
            s.add(Task(table_id=table_id, kind="compaction", state=state, trigger={}))
        s.add(Task(table_id=gone.id, kind="clean", state=TaskState.SUCCEEDED, trigger={}))
        api_id = api.id
    remaining = [t for t in listing if (t[0], t[1]) != ("ns1", "t_1")]
    result = run_adopt(rt, remaining)
    assert sorted(result.retired) == sorted([gone.id, api_id])
    assert len(result.cancelled_tasks) == 2
    found = rows(rt)
    for key in (("ns1", "t_1"), ("ops", "reg")):
        assert found[key].retired_at is not None and found[key].retired_reason == DROPPED
    with transaction(rt.engine) as s:
        states = dict(s.execute(select(Task.id, Task.state)).all())
        assert sorted(states.values()) == ["cancelled", "cancelled", "succeeded"]
        history = s.execute(
            select(TaskTransition.from_state, TaskTransition.to_state, TaskTransition.actor)
        ).all()
        assert sorted(history) == [
            ("pending", "cancelled", "test"),
            ("planned", "cancelled", "test"),
        ]
    # A partial listing (a notification) retires nothing.
    assert run_adopt(rt, remaining[:3], complete=False).retired == []
    # Listed again (created anew): taken back, the registered one with its own policy.
    result = run_adopt(rt, [*listing, ("ops", "reg", "s3://wh/reg/2.json")])
    assert sorted(result.revived) == sorted([gone.id, api_id]) and result.adopted == []
    found = rows(rt)
    assert found[("ops", "reg")].retired_at is None and found[("ops", "reg")].managed_by == "api"
    assert found[("ns1", "t_1")].retired_at is None and found[("ns1", "t_1")].policy_version == 2


def test_a_rename_keeps_the_row_and_its_history(rt: Runtime) -> None:
    add_rule(rt, "*")
    listing = fleet(40)
    run_adopt(rt, listing)
    before = rows(rt)
    # The first refresh stored each table's pointer (as the poller would).
    with transaction(rt.engine) as s:
        for ns, n, loc in listing:
            s.get(ManagedTable, before[(ns, n)].id).metadata_location = loc  # type: ignore[union-attr]
    old = ("ns1", "t_1")
    old_loc = next(loc for ns, n, loc in listing if (ns, n) == old)
    renamed = [t for t in listing if (t[0], t[1]) != old] + [("ns7", "orders", old_loc)]
    result = run_adopt(rt, renamed)
    assert result.renamed == [before[old].id]
    assert result.adopted == result.retired == []
    found = rows(rt)
    assert old not in found and found[("ns7", "orders")].id == before[old].id
    assert found[("ns7", "orders")].retired_at is None

    # A rename seen as a drop first (e.g. two notifications), then the new name.
    t2 = ("ns2", "t_2")
    t2_loc = next(loc for ns, n, loc in listing if (ns, n) == t2)
    without = [t for t in renamed if (t[0], t[1]) != t2]
    assert run_adopt(rt, without).retired == [before[t2].id]
    result = run_adopt(rt, [("ns2", "t_2_new", t2_loc)], complete=False)
    assert result.renamed == [before[t2].id] and result.adopted == []
    assert rows(rt)[("ns2", "t_2_new")].retired_at is None

    # Two vanished rows at one location: ambiguous, so a drop and a new table.
    with transaction(rt.engine) as s:
        for key in (("ns4", "t_4"), ("ns5", "t_5")):
            s.get(ManagedTable, before[key].id).metadata_location = "s3://same"  # type: ignore[union-attr]
    listing3 = [t for t in without if (t[0], t[1]) not in {("ns4", "t_4"), ("ns5", "t_5")}]
    result = run_adopt(rt, [*listing3, ("ns2", "t_2_new", t2_loc), ("ns3", "x", "s3://same")])
    assert result.renamed == [] and len(result.adopted) == 1 and len(result.retired) == 2


def test_a_rule_policy_invalid_over_a_namespace_default_is_not_adopted(rt: Runtime) -> None:
    # Valid alone; over ns1's defaults (TTL on, no column) it is not.
    add_rule(rt, "*", policy={"ttl": {"retention_days": 30}})
    with transaction(rt.engine) as s:
        set_namespace_defaults(s, rt.settings.catalog_name, "ns1", {"ttl": {"enabled": True}})
    result = run_adopt(rt, fleet(40))
    assert ("ns1", "t_1") not in rows(rt) and ("ns2", "t_2") in rows(rt)
    assert any("namespace 'ns1'" in p for p in result.problems), result.problems


def test_names_that_cannot_be_managed_are_skipped(rt: Runtime) -> None:
    add_rule(rt, "*")
    result = run_adopt(rt, [("ns", "ok", None), ("ns", "bad-name", None), ("a..b", "t", None)])
    assert set(rows(rt)) == {("ns", "ok")}
    assert "2 listed table(s)" in result.problems[0]


def at_once(rt: Runtime, listing: Listing, replicas: int = 2) -> list[AdoptResult]:
    """`adopt` of one listing by `replicas` threads at the same moment, each in its own
    transaction (as API replicas would)."""
    barrier = threading.Barrier(replicas)
    results: list[AdoptResult] = []
    errors: list[BaseException] = []

    def replica() -> None:
        try:
            with transaction(rt.engine) as s:
                barrier.wait()
                results.append(adopt(s, rt.settings.catalog_name, listing, actor="replica"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=replica) for _ in range(replicas)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return results


def test_two_replicas_adopting_at_once_adopt_each_table_once(rt: Runtime) -> None:
    add_rule(rt, "*")
    results = at_once(rt, fleet(3_000))
    assert sorted(len(r.adopted) for r in results) == [0, 3_000]
    with transaction(rt.engine) as s:
        assert s.scalar(select(func.count()).select_from(ManagedTable)) == 3_000
        assert s.scalar(select(func.count()).select_from(PolicyVersion)) == 3_000


def test_retiring_and_reviving_at_once_does_each_once(rt: Runtime) -> None:
    add_rule(rt, "*")
    listing = fleet(500)
    run_adopt(rt, listing)
    retired = at_once(rt, listing[::2])
    assert sorted(len(r.retired) for r in retired) == [0, 250]
    revived = at_once(rt, listing)
    assert sorted(len(r.revived) for r in revived) == [0, 250]
    with transaction(rt.engine) as s:
        # one new policy version per revived table, not two
        assert s.scalar(select(func.count()).select_from(PolicyVersion)) == 750


def test_replicas_with_different_listings_never_deadlock(rt: Runtime) -> None:
    """Four replicas adopt at once, each from its own view of the catalog (complete or
    partial, some tables missing, some renamed), round after round: no deadlock, no
    conflict error, and the result is the last listing's."""
    add_rule(rt, "*")
    listing = fleet(1_000)
    with transaction(rt.engine) as s:
        for ns, n, _ in listing[:500]:  # half known already, with their pointers
            s.add(
                ManagedTable(
                    catalog=rt.settings.catalog_name,
                    namespace=ns,
                    name=n,
                    policy={},
                    managed_by="rule:1",
                    metadata_location=f"s3://wh/{ns}.{n}",
                )
            )
    errors: list[BaseException] = []

    def replica(seed: int) -> None:
        rng = random.Random(seed)
        for round_ in range(6):
            view = [
                (ns, f"{n}_r" if rng.random() < 0.05 else n, f"s3://wh/{ns}.{n}")
                for ns, n, _ in listing
                if rng.random() < 0.9
            ]
            rng.shuffle(view)
            try:
                with transaction(rt.engine) as s:
                    adopt(
                        s,
                        rt.settings.catalog_name,
                        view,
                        actor=f"r{seed}",
                        complete=round_ % 2 == 0,
                    )
            except BaseException as exc:  # reported below
                errors.append(exc)

    threads = [threading.Thread(target=replica, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    run_adopt(rt, listing)
    live = {k for k, r in rows(rt).items() if r.retired_at is None}
    assert live == {(ns, n) for ns, n, _ in listing}


def test_adoption_speed_10k(rt: Runtime, capsys: pytest.CaptureFixture[str]) -> None:
    """10,000 tables in one call, policy versions included: >= 1,000 tables/s."""
    add_rule(rt, "*", policy={"compaction": {"min_small_files": 50}})
    add_rule(rt, "deep.*", exclude=["tmp_*"])
    listing = fleet(10_000, namespaces=100)
    started = time.perf_counter()
    result = run_adopt(rt, listing)
    elapsed = time.perf_counter() - started
    adopted = len(result.adopted)
    started = time.perf_counter()
    again = run_adopt(rt, listing)
    idle = time.perf_counter() - started
    with capsys.disabled():
        print(
            f"\nadopt: {adopted} tables in {elapsed:.2f}s = {adopted / elapsed:,.0f} tables/s; "
            f"again with nothing to do: {idle:.2f}s"
        )
    assert adopted > 9_000 and again.adopted == []
    assert elapsed < 10


# --- The rules API -----------------------------------------------------------------------


def rules_path(rt: Runtime, catalog: str | None = None) -> str:
    return f"/api/v1/catalogs/{catalog or rt.settings.catalog_name}/rules"


def test_rules_crud(client: TestClient, rt: Runtime) -> None:
    path = rules_path(rt)
    assert client.get(path).json() == []
    r = client.post(path, json={})  # every field has a default: the whole catalog
    assert r.status_code == 201, r.text
    wide = r.json()
    assert (wide["namespace"], wide["include"], wide["exclude"]) == ("*", ["*"], [])
    assert wide["enabled"] and wide["policy"] == {} and wide["managed_tables"] == 0
    assert wide["created_by"] == "token:test-admin"
    body = {
        "namespace": "sales.*",
        "include": ["orders*", "clicks"],
        "exclude": ["sales.eu.tmp_*"],
        "policy": {"compaction": {"min_small_files": 20}},
    }
    r = client.post(path, json=body)
    assert r.status_code == 201, r.text
    rule = r.json()
    assert rule["policy"] == {"compaction": {"min_small_files": 20}}  # only what was set
    assert [x["id"] for x in client.get(path).json()] == [wide["id"], rule["id"]]
    assert client.get(f"{path}/{rule['id']}").json() == rule

    r = client.patch(f"{path}/{rule['id']}", json={"enabled": False, "exclude": []})
    assert r.status_code == 200, r.text
    changed = r.json()
    assert not changed["enabled"] and changed["exclude"] == []
    assert changed["include"] == body["include"] and changed["policy"] == rule["policy"]
    r = client.patch(f"{path}/{rule['id']}", json={"policy": {}})
    assert r.json()["policy"] == {}

    # adopted tables are counted on their rule
    run_adopt(rt, [("hr", "people", None), ("hr", "pay", None)])
    assert client.get(f"{path}/{wide['id']}").json()["managed_tables"] == 2

    assert client.delete(f"{path}/{rule['id']}").status_code == 204
    assert client.get(f"{path}/{rule['id']}").status_code == 404
    assert [x["id"] for x in client.get(path).json()] == [wide["id"]]
    # Rule changes are audited with what changed.
    with transaction(rt.engine) as s:
        actions = s.execute(
            select(AuditEntry.action, AuditEntry.target).order_by(AuditEntry.id)
        ).all()
    assert [a for a, _ in actions] == [
        "createRule",
        "createRule",
        "updateRule",
        "updateRule",
        "deleteRule",
    ]
    assert actions[-1][1] == f"rule:{rule['id']}"


def test_removing_a_rule_with_its_tables_retires_them(client: TestClient, rt: Runtime) -> None:
    path = rules_path(rt)
    sales = client.post(path, json={"namespace": "ns1"}).json()
    keep = client.post(path, json={"namespace": "ns2"}).json()
    listing = fleet(60)
    run_adopt(rt, listing)
    adopted = {k for k, r in rows(rt).items() if r.managed_by == f"rule:{sales['id']}"}
    assert len(adopted) == 2
    assert client.delete(f"{path}/{keep['id']}").status_code == 204  # tables stay
    r = client.delete(f"{path}/{sales['id']}", params={"retire_tables": "true"})
    assert r.status_code == 204, r.text
    found = rows(rt)
    assert all(found[k].retired_at is not None for k in adopted)
    assert all(r.retired_at is None for k, r in found.items() if k not in adopted)
    # no rule covers them now; a new one does, and takes them back
    assert run_adopt(rt, listing).counts["revived"] == 0
    client.post(path, json={"namespace": "ns*"})
    assert len(run_adopt(rt, listing).revived) == 2


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"namespace": "sales;drop"}, 422, "invalid namespace glob"),
        ({"namespace": ""}, 422, "invalid namespace glob"),
        ({"include": []}, 422, "include"),
        ({"include": [""]}, 422, "invalid include glob"),
        ({"exclude": ["[ab]*"]}, 422, "invalid exclude glob"),
        ({"exclude": ["a%"]}, 422, "invalid exclude glob"),
        ({"include": "orders"}, 422, "include"),
        ({"nope": 1}, 422, "nope"),
        ({"policy": {"compaction": {"min_small_files": -1}}}, 422, "min_small_files"),
        ({"policy": {"ttl": {"enabled": True}}}, 422, "ttl"),
        ({"namespace": "x" * 256}, 422, "namespace"),
        ({"enabled": "yes"}, 422, "enabled"),
    ],
)
def test_invalid_rules_are_refused_saying_what_to_fix(
    client: TestClient, rt: Runtime, body: dict[str, Any], status: int, says: str
) -> None:
    r = client.post(rules_path(rt), json=body)
    assert r.status_code == status, r.text
    assert says in r.text
    assert client.get(rules_path(rt)).json() == []


def test_a_rule_policy_is_checked_over_the_namespace_defaults_it_covers(
    client: TestClient, rt: Runtime
) -> None:
    # sales_eu's defaults go below the TTL floor on purpose; a rule that says not to is
    # valid alone, and invalid over them
    below = {"ttl": {"retention_days": 0.5, "allow_below_safety_floors": True}}
    with transaction(rt.engine) as s:
        set_namespace_defaults(s, rt.settings.catalog_name, "sales_eu", below)
    strict = {"ttl": {"allow_below_safety_floors": False}}
    path = rules_path(rt)
    r = client.post(path, json={"namespace": "sales_eu", "policy": strict})
    assert r.status_code == 422 and "safety floor" in r.json()["detail"], r.text
    r = client.post(path, json={"namespace": "sales*", "policy": strict})  # covers sales_eu
    assert r.status_code == 422 and "'sales_eu'" in r.json()["detail"], r.text
    r = client.post(path, json={"namespace": "hr", "policy": strict})
    assert r.status_code == 201, r.text
    r = client.patch(f"{path}/{r.json()['id']}", json={"namespace": "sales_?u"})
    assert r.status_code == 422
    assert [x["namespace"] for x in client.get(path).json()] == ["hr"]


def test_unknown_catalogs_and_rules_are_404s(client: TestClient, rt: Runtime) -> None:
    for method, path in (
        ("GET", rules_path(rt, "nosuch")),
        ("POST", rules_path(rt, "nosuch")),
        ("GET", rules_path(rt) + "/7"),
        ("PATCH", rules_path(rt) + "/7"),
        ("DELETE", rules_path(rt) + "/7"),
        ("PUT", "/api/v1/catalogs/nosuch/tables/sales/orders/opt-out"),
    ):
        r = client.request(method, path, json={} if method in ("POST", "PATCH") else None)
        assert r.status_code == 404, (method, path, r.text)
    assert client.get(rules_path(rt) + "/0").status_code == 422
    assert client.get(rules_path(rt) + "/x").status_code == 422


def test_rules_need_admin_on_their_scope_to_change_and_viewer_to_read(
    client: TestClient, rt: Runtime
) -> None:
    path = rules_path(rt)
    cat = rt.settings.catalog_name
    sales = client.post(path, json={"namespace": "sales"}).json()
    wide = client.post(path, json={"namespace": "*"}).json()
    glob = client.post(path, json={"namespace": "sales_*"}).json()

    def as_(*grants: str) -> dict[str, str]:
        return bearer(issue_token(rt, *grants, name=f"t{len(grants)}{grants[0]}"))

    operator = as_("operator")
    assert client.post(path, json={}, headers=operator).status_code == 403
    assert client.delete(f"{path}/{sales['id']}", headers=operator).status_code == 403
    assert client.get(path, headers=operator).status_code == 200  # reading: viewer

    sales_admin = as_(f"admin@{cat}/sales", f"admin@{cat}/sales_*")
    assert client.post(path, json={"namespace": "sales"}, headers=sales_admin).is_success
    assert client.post(path, json={"namespace": "sales_*"}, headers=sales_admin).is_success
    # a wider glob, or all of the catalog, is beyond those grants
    r = client.post(path, json={"namespace": "sal*"}, headers=sales_admin)
    assert r.status_code == 403 and "every namespace 'sal*' covers" in r.json()["detail"]
    # a rule it may not see: as if there were none (a 403 named its namespace)
    assert client.patch(f"{path}/{wide['id']}", json={}, headers=sales_admin).status_code == 404
    # moving its own rule out of its scope
    r = client.patch(f"{path}/{sales['id']}", json={"namespace": "hr"}, headers=sales_admin)
    assert r.status_code == 403
    assert client.patch(f"{path}/{glob['id']}", json={}, headers=sales_admin).is_success

    viewer = as_(f"viewer@{cat}/sales")
    seen = [x["namespace"] for x in client.get(path, headers=viewer).json()]
    assert seen == ["sales", "sales"]  # not * nor sales_*
    assert client.get(f"{path}/{wide['id']}", headers=viewer).status_code == 404


# --- Opt-out -------------------------------------------------------------------------------


def test_opting_out_retires_the_table_and_keeps_rules_off_it(
    client: TestClient, rt: Runtime
) -> None:
    add_rule(rt, "*")
    listing = fleet(30)
    run_adopt(rt, listing)
    row = rows(rt)[("ns1", "t_1")]
    with transaction(rt.engine) as s:
        s.add(Task(table_id=row.id, kind="compaction", state=TaskState.PENDING, trigger={}))
    cat = rt.settings.catalog_name
    path = f"/api/v1/catalogs/{cat}/tables/ns1/t_1/opt-out"
    r = client.put(path)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "catalog": cat,
        "namespace": "ns1",
        "name": "t_1",
        "table_id": row.id,
        "opt_out": True,
        "managed": False,
        "retired_reason": OPTED_OUT,
        "managed_by": f"rule:{1}",
    }
    with transaction(rt.engine) as s:
        assert s.scalars(select(Task.state)).one() == "cancelled"
    assert client.put(path).json()["opt_out"]  # idempotent
    # the old path is an alias for the default catalog
    assert client.put("/api/v1/tables/ns1/t_1/opt-out").status_code == 200
    assert client.get("/api/v1/tables/ns1/t_1").status_code == 404  # not managed
    assert run_adopt(rt, listing).counts["revived"] == 0

    # A table not adopted yet (or not even created) can be opted out in advance.
    r = client.put(f"/api/v1/catalogs/{cat}/tables/a.b/later/opt-out")
    assert r.status_code == 200 and not r.json()["managed"]
    result = run_adopt(rt, [*listing, ("a.b", "later", None)])
    assert result.adopted == [] and result.held_back == 2

    # Clearing: the rule takes both back at the next adoption.
    assert client.delete(path).json()["opt_out"] is False
    assert client.delete(path).json()["opt_out"] is False  # idempotent
    assert client.delete(f"/api/v1/catalogs/{cat}/tables/ns1/never/opt-out").status_code == 404
    assert client.delete(f"/api/v1/catalogs/{cat}/tables/a.b/later/opt-out").is_success
    result = run_adopt(rt, [*listing, ("a.b", "later", None)])
    assert len(result.revived) == 2
    assert client.get("/api/v1/tables/ns1/t_1").status_code == 200

    # bad names and roles
    assert client.put(f"/api/v1/catalogs/{cat}/tables/ns1/9x/opt-out").status_code == 422
    operator = bearer(issue_token(rt, "operator", name="op"))
    assert client.put(path, headers=operator).status_code == 403
