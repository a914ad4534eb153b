"""S3 that does not answer, or refuses: registering such a catalog is a 422 naming what did
not answer (never quoting a credential, in the response or the audit log); a job whose
storage stops answering mid-job fails with the storage error in its run, is retried as
usual and then commits once; the other catalogs are served meanwhile; an S3 server killed
and restarted mid-job loses nothing and gets nothing committed twice.

The faults are made through a proxy in front of the S3 server (benchmarks/s3_meter.py): it
closes the connection of each request it is told to refuse, or sees the job's first write
and kills the server then."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import serve
from fastapi.testclient import TestClient
from helpers import SCHEMA, append_batches, run_one, task_of, wait_for
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.transforms import IdentityTransform
from sqlalchemy import delete, select, text

from benchmarks.s3_meter import S3Meter, metering
from benchmarks.s3_server import S3Server, free_port, serve_s3
from lakewarden.db.models import Catalog as CatalogRow
from lakewarden.db.models import JobRun, ManagedTable
from lakewarden.db.session import transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.formats.iceberg.markers import ATTEMPT_KEY, TASK_KEY
from lakewarden.runtime import Runtime
from lakewarden.settings import sqlalchemy_pg_url
from lakewarden.states import TaskState
from lakewarden.tasks import repo
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.slow  # the session's S3 server is a JVM

URL_VAR = "LW_SECRET_TEST_S3_FAULT_URL"
ACCESS_VAR = "LW_SECRET_TEST_S3_FAULT_ACCESS"
SECRET_FILE = "s3-fault-secret"
WRONG_SECRET = "wrong-s3-secret-9d7a61c4"


def _properties(server: S3Server, endpoint: str, bucket: str) -> dict[str, Any]:
    return {
        "uri": {"env": URL_VAR},
        "warehouse": f"s3://{bucket}/wh",
        "s3.endpoint": endpoint,
        "s3.region": "us-east-1",
        "s3.access-key-id": {"env": ACCESS_VAR},
        "s3.secret-access-key": {"file": SECRET_FILE},
    }


@pytest.fixture
def refs(rt: Runtime, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """The references of `_properties` set for the test's own database and the S3 server."""
    monkeypatch.setenv(URL_VAR, rt.db_url)
    monkeypatch.setenv(ACCESS_VAR, s3_server.access_key)
    rt.settings.secrets_path.mkdir(parents=True, exist_ok=True)
    (rt.settings.secrets_path / SECRET_FILE).write_text(s3_server.secret_key)
    s3_server.bucket("lw-faults")
    yield s3_server


def _register(client: TestClient, properties: dict[str, Any]) -> Any:
    name = f"s3_{uuid.uuid4().hex[:6]}"
    return client.post(
        "/api/v1/catalogs", json={"name": name, "type": "jdbc", "properties": properties}
    )


def _audit(rt: Runtime) -> list[str]:
    with rt.engine.connect() as conn:
        return [r[0] for r in conn.execute(text("SELECT to_jsonb(a)::text FROM audit_log a"))]


def test_an_s3_catalog_registers_when_its_bucket_answers(
    rt: Runtime, client: TestClient, refs: S3Server
) -> None:
    response = _register(client, _properties(refs, refs.endpoint, "lw-faults"))
    assert response.status_code == 201, response.text
    shown = response.json()["properties"]
    assert shown["s3.secret-access-key"] == {"file": SECRET_FILE}  # the reference, as given


def test_an_endpoint_that_does_not_answer_is_a_422_naming_it(
    rt: Runtime, client: TestClient, refs: S3Server
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    response = _register(client, _properties(refs, nobody, "lw-faults"))
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert repr(nobody) in detail and "did not answer" in detail and "s3.endpoint" in detail


def test_a_missing_bucket_is_a_422_naming_it(
    rt: Runtime, client: TestClient, refs: S3Server
) -> None:
    response = _register(client, _properties(refs, refs.endpoint, "no-such-bucket"))
    assert response.status_code == 422, response.text
    assert "bucket 'no-such-bucket' does not exist" in response.json()["detail"]


def test_wrong_credentials_are_a_422_that_never_quotes_the_secret(
    rt: Runtime, client: TestClient, refs: S3Server
) -> None:
    (rt.settings.secrets_path / SECRET_FILE).write_text(WRONG_SECRET)
    response = _register(client, _properties(refs, refs.endpoint, "lw-faults"))
    assert response.status_code == 422, response.text
    assert "refused these credentials" in response.json()["detail"]
    audit = _audit(rt)
    (row,) = [r for r in audit if '"action": "registerCatalog"' in r]
    assert '"status": 422' in row and "refused these credentials" in row
    for said in (response.text, *audit):
        assert WRONG_SECRET not in said and refs.secret_key not in said


# --- a job whose storage stops answering ----------------------------------------------------


@dataclass
class MeteredLake:
    name: str  # the registered catalog, whose endpoint is the meter
    meter: S3Meter
    client: SqlCatalog  # the test's own reader, straight to the server


@contextmanager
def metered_lake(
    rt: Runtime, server: S3Server, monkeypatch: pytest.MonkeyPatch, **extra: str
) -> Iterator[MeteredLake]:
    """A catalog registered with a meter in front of `server` as its endpoint (and the
    `extra` properties), with a table `sales.flaky` of 6 small files in 2 partitions."""
    name = f"s3f_{uuid.uuid4().hex[:6]}"
    warehouse = f"{server.bucket('lw-faults')}/{name}"
    monkeypatch.setenv(URL_VAR, rt.db_url)
    monkeypatch.setenv(ACCESS_VAR, server.access_key)
    rt.settings.secrets_path.mkdir(parents=True, exist_ok=True)
    (rt.settings.secrets_path / SECRET_FILE).write_text(server.secret_key)
    with metering(server.endpoint) as meter:
        properties = {**_properties(server, meter.endpoint, "lw-faults"), **extra}
        properties["warehouse"] = warehouse
        with transaction(rt.engine) as s:
            s.add(CatalogRow(name=name, type="jdbc", properties=properties, version=1))
        rt.catalogs.forget()
        client = SqlCatalog(
            name,
            uri=sqlalchemy_pg_url(rt.db_url),
            warehouse=warehouse,
            **{
                "s3.endpoint": server.endpoint,
                "s3.region": "us-east-1",
                "s3.access-key-id": server.access_key,
                "s3.secret-access-key": server.secret_key,
            },
        )
        client.create_namespace_if_not_exists("sales")
        table = client.create_table("sales.flaky", schema=SCHEMA)
        with table.update_spec() as spec:
            spec.add_field("region", IdentityTransform(), "region")
        append_batches(client.load_table("sales.flaky"), 3)
        try:
            yield MeteredLake(name, meter, client)
        finally:
            client.engine.dispose()
            with transaction(rt.engine) as s:
                s.execute(delete(CatalogRow).where(CatalogRow.name == name))
            rt.catalogs.forget()


def _compaction(rt: Runtime, lake: MeteredLake) -> int:
    """A compaction task on `sales.flaky`, planned (through the meter)."""
    with transaction(rt.engine) as s:
        row = ManagedTable(
            catalog=lake.name,
            namespace="sales",
            name="flaky",
            policy={"compaction": {"min_small_files": 2, "min_input_files": 2}},
        )
        s.add(row)
        s.flush()
        task_id = repo.create_task(s, table_id=row.id, kind="compaction", trigger={}, actor="t")
    assert task_id is not None
    assert Worker(rt).run_once()
    return task_id


def _committed_once(rt: Runtime, lake: MeteredLake, task_id: int, attempt: int) -> None:
    """What the table holds is the compaction of one attempt: every row, one commit per
    file group (a rewrite commits per group), none from another attempt. A group whose
    commit the outage failed (partial progress: the task succeeds, naming it) keeps its
    files for the next compaction."""
    table = lake.client.load_table("sales.flaky")
    ours = [
        (snap.summary.get(TASK_KEY), snap.summary.get(ATTEMPT_KEY))
        for snap in table.snapshots()
        if snap.summary and snap.summary.operation.value == "replace"
    ]
    assert ours and set(ours) == {(str(task_id), str(attempt))}, ours
    result = task_of(rt, task_id).result or {}
    kept = result.get("failed_data_files", 0) - len(result.get("failed_partitions", []))
    assert fingerprint(table).data_files == 2 + kept, result


def _runs(rt: Runtime, task_id: int) -> list[JobRun]:
    with transaction(rt.engine) as s:
        runs = s.scalars(select(JobRun).where(JobRun.task_id == task_id).order_by(JobRun.attempt))
        out = list(runs.all())
        for run in out:
            s.expunge(run)
        return out


@pytest.mark.spark
def test_a_job_whose_storage_stops_answering_fails_is_retried_and_commits_once(
    scheduler: Scheduler, spark_rt: Runtime, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.api.app import create_app

    # Retries cut short (Iceberg-Java's S3 properties), so the outage fails the job in seconds.
    short = {"s3.retry.num-retries": "1", "s3.retry.min-wait-ms": "100"}
    with metered_lake(spark_rt, s3_server, monkeypatch, **short) as lake:
        before = fingerprint(lake.client.load_table("sales.flaky"))
        task_id = _compaction(spark_rt, lake)

        # Mid-job, the store stops answering: every read of a data file gets its connection
        # closed (the job has loaded the table's metadata by then).
        lake.meter.refuse = lambda method, path: method == "GET" and "/data/" in path
        assert run_one(scheduler) == TaskState.PENDING  # failed, to be retried
        (failed,) = _runs(spark_rt, task_id)
        assert failed.state == "failed" and lake.meter.refused > 0
        error = failed.error or ""
        # the storage's own error, as the S3 client met it
        assert "NoHttpResponseException: The target server failed to respond" in error, error
        assert fingerprint(lake.client.load_table("sales.flaky")) == before  # nothing committed

        # The control plane serves the other catalogs meanwhile.
        with serve(spark_rt, create_app(spark_rt, background=False)) as api:
            listed = api.get("/api/v1/catalogs")
            assert listed.status_code == 200
            assert {spark_rt.settings.catalog_name, lake.name} <= {c["name"] for c in listed.json()}

        # It answers again: the retry compacts, once, every row kept.
        lake.meter.refuse = None
        assert task_of(spark_rt, task_id).attempt == 1
        wait_for(Worker(spark_rt).run_once, 30, "the retry to be planned (after its backoff)")
        assert run_one(scheduler) == TaskState.SUCCEEDED
        after = fingerprint(lake.client.load_table("sales.flaky"))
        assert (after.rows, after.checksum) == (before.rows, before.checksum)
        _committed_once(spark_rt, lake, task_id, attempt=2)
        assert [r.state for r in _runs(spark_rt, task_id)] == ["failed", "succeeded"]


@pytest.mark.spark
def test_an_s3_server_restarted_mid_job_loses_nothing_and_commits_nothing_twice(
    scheduler: Scheduler, spark_rt: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server of its own, killed (SIGKILL) when the job writes its first data file and
    started again a second later on the same port and directory; Iceberg's S3 retries as
    they are by default."""
    with (
        serve_s3(tmp_path / "own-s3", free_port()) as server,
        metered_lake(spark_rt, server, monkeypatch) as lake,
    ):
        before = fingerprint(lake.client.load_table("sales.flaky"))
        task_id = _compaction(spark_rt, lake)
        crashed = threading.Event()
        restarts: list[threading.Thread] = []

        def crash_at_first_write(method: str, path: str) -> bool:
            if method == "PUT" and "/data/" in path and not crashed.is_set():
                crashed.set()
                restarts.append(threading.Thread(target=server.restart, args=(1.0,)))
                restarts[0].start()
            return False  # forwarded: to a server that is going down

        lake.meter.refuse = crash_at_first_write
        state = run_one(scheduler)
        restarts[0].join(timeout=60)
        lake.meter.refuse = None
        assert crashed.is_set() and server.process is not None  # it went down, and is back
        attempts = 1
        if state == TaskState.PENDING:  # the attempt failed: retried as usual
            wait_for(Worker(spark_rt).run_once, 30, "the retry to be planned")
            state, attempts = run_one(scheduler), 2
        assert state == TaskState.SUCCEEDED, _runs(spark_rt, task_id)
        print(f"restarted mid-job: succeeded at attempt {attempts}")
        after = fingerprint(lake.client.load_table("sales.flaky"))
        assert (after.rows, after.checksum) == (before.rows, before.checksum)  # nothing lost
        _committed_once(spark_rt, lake, task_id, attempt=attempts)
