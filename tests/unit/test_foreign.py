"""lakewarden.catalogs.foreign: each signal that another service maintains a table, each guard
against a false alarm, and a clean table."""

from __future__ import annotations

import pytest

from lakewarden.catalogs.foreign import ForeignMaintainer, detect
from lakewarden.spark.commits import TASK_KEY

WAREHOUSE = "s3://lake/warehouse/sales/orders"
APPEND = {"operation": "append", "added-data-files": "1"}


def found(
    properties: dict[str, str] | None = None,
    location: str | None = WAREHOUSE,
    summaries: list[dict[str, str]] | None = None,
) -> ForeignMaintainer | None:
    return detect(properties or {}, location, summaries or [])


def test_a_clean_table_has_no_foreign_maintainer() -> None:
    properties = {"write.target-file-size-bytes": "536870912", "format-version": "2"}
    summaries = [APPEND, {"operation": "replace", "added-data-files": "1"}, APPEND]
    assert found(properties, summaries=summaries) is None
    assert found(location=None) is None


# --- what the owner declared ------------------------------------------------------------


def test_an_owner_opt_out_property_is_honoured() -> None:
    m = found({"lakewarden.managed": "FALSE"})
    assert m is not None and m.who == "table-owner"
    assert "lakewarden.managed=false" in m.evidence
    assert found({"lakewarden.managed": "true"}) is None


def test_a_declared_maintainer_is_named_and_its_text_is_made_safe() -> None:
    m = found({"lakewarden.maintained-by": "Onehouse"})
    assert m == ForeignMaintainer(
        "onehouse", "table property lakewarden.maintained-by=Onehouse names its maintainer"
    )
    odd = found({"lakewarden.maintained-by": "team\x1b[31m red " + "x" * 200})
    assert odd is not None and odd.who == "declared"
    assert "\x1b" not in odd.evidence and "\\x1b" in odd.evidence
    assert len(odd.evidence) < 200
    assert found({"lakewarden.maintained-by": "  "}) is None


# --- Amoro ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("self-optimizing.enabled", "true"),
        ("self-optimizing.enabled", "TRUE"),
        ("optimize.enable", "true"),
    ],
)
def test_amoro_self_optimizing_switched_on(key: str, value: str) -> None:
    m = found({key: value})
    assert m is not None and m.who == "amoro"
    assert f"{key}={value}" in m.evidence


def test_amoro_knobs_without_the_switch_mean_amoros_default_on() -> None:
    m = found({"self-optimizing.group": "etl", "self-optimizing.quota": "0.2"})
    assert m is not None and m.who == "amoro"
    assert "self-optimizing.group=etl" in m.evidence
    legacy = found({"optimize.group": "etl"})
    assert legacy is not None and legacy.who == "amoro"


@pytest.mark.parametrize("value", ["false", "False", "no", ""])
def test_amoro_switched_off_is_not_amoro_maintained(value: str) -> None:
    # Amoro reads the switch with Java's Boolean.parseBoolean: anything but "true" is off,
    # and then its other knobs do nothing.
    assert found({"self-optimizing.enabled": value, "self-optimizing.group": "etl"}) is None
    assert found({"optimize.enable": value, "optimize.group": "etl"}) is None


@pytest.mark.parametrize(
    "key",
    [
        "table-expire.enabled",
        "table-expire.enable",
        "clean-orphan-file.enabled",
        "data-expire.enabled",
    ],
)
def test_amoro_expiry_or_cleaning_switched_on_is_amoro_even_without_optimizing(key: str) -> None:
    m = found({"self-optimizing.enabled": "false", key: "true"})
    assert m is not None and m.who == "amoro"
    assert f"{key}=true" in m.evidence
    assert found({key: "false"}) is None


def test_the_new_amoro_maintenance_switch_wins_over_the_legacy_one() -> None:
    assert found({"table-expire.enabled": "false", "table-expire.enable": "true"}) is None


def test_the_new_amoro_switch_wins_over_the_legacy_one() -> None:
    assert found({"self-optimizing.enabled": "false", "optimize.enable": "true"}) is None


def test_amoro_optimize_commits_show_amoro() -> None:
    summaries = [APPEND, APPEND, {"operation": "replace", "snapshot.producer": "OPTIMIZE"}]
    m = found(summaries=summaries)
    assert m is not None and m.who == "amoro"
    assert "3rd latest commit carries snapshot.producer=OPTIMIZE" in m.evidence


def test_amoro_ingestion_commits_are_only_writes() -> None:
    assert found(summaries=[{"operation": "append", "snapshot.producer": "INGESTION"}]) is None


def test_old_amoro_optimize_commits_do_not_count_once_optimizing_is_off() -> None:
    summaries = [{"operation": "replace", "snapshot.producer": "OPTIMIZE"}]
    assert found({"self-optimizing.enabled": "false"}, summaries=summaries) is None


def test_amoro_maintenance_commits_count_even_with_optimizing_off() -> None:
    # Data expiration and dangling-delete cleaning are Amoro maintenance of their own.
    summaries = [{"operation": "delete", "snapshot.producer": "DATA_EXPIRATION"}]
    m = found({"self-optimizing.enabled": "false"}, summaries=summaries)
    assert m is not None and m.who == "amoro"
    assert "latest commit carries snapshot.producer=DATA_EXPIRATION" in m.evidence


# --- S3 Tables, Databricks, Delta UniForm -----------------------------------------------


def test_an_s3_table_bucket_location_is_s3_tables() -> None:
    location = "s3://63a8e430-6e0b-46f5-k833abtwr6s8tmtsycedn8s4yc3xhuse1b--table-s3"
    m = found(location=location)
    assert m is not None and m.who == "s3tables"
    assert location in m.evidence
    assert found(location=f"s3a://{location[5:]}/data") is not None


def test_a_bucket_merely_named_like_table_s3_is_not_s3_tables() -> None:
    assert found(location="s3://my--table-s3-archive/orders") is None
    assert found(location="s3://lake/orders--table-s3") is None  # a path, not the bucket
    assert found(location="gs://x--table-s3/orders") is None


def test_unity_catalog_managed_storage_is_databricks() -> None:
    location = "s3://uc-root/__unitystorage/catalogs/1f2e/tables/9a8b"
    m = found(location=location)
    assert m is not None and m.who == "databricks"
    assert "__unitystorage" in m.evidence
    assert found(location="s3://lake/__unitystorage_backup/orders") is None


def test_delta_uniform_metadata_is_maintained_as_delta() -> None:
    m = found({"delta-version": "1044", "delta-timestamp": "1735960391423"})
    assert m is not None and m.who == "delta-uniform"
    assert "delta-version=1044" in m.evidence
    assert found({"delta-version": "3"}) is None  # one look-alike key is not UniForm


# --- streaming writers that compact inline ----------------------------------------------


@pytest.mark.parametrize("key", ["flink.job-id", "flink.operator-id", "kafka.connect.commit-id"])
def test_a_replace_by_a_streaming_writer_is_inline_compaction(key: str) -> None:
    summaries = [APPEND, {"operation": "replace", key: "7c3b89ef"}]
    m = found(summaries=summaries)
    assert m is not None and m.who == "streaming-writer"
    assert f"2nd latest commit is a replace carrying {key}=7c3b89ef" in m.evidence


def test_a_streaming_writers_ordinary_commits_are_not_compaction() -> None:
    flink = {"flink.job-id": "7c3b89ef", "flink.max-committed-checkpoint-id": "9"}
    summaries = [{"operation": op, **flink} for op in ("append", "overwrite", "delete")]
    assert found(summaries=summaries) is None


def test_lakewardens_own_commits_are_never_evidence() -> None:
    ours = {"operation": "replace", TASK_KEY: "12", "flink.job-id": "x"}
    ours["snapshot.producer"] = "OPTIMIZE"
    assert found(summaries=[ours]) is None


def test_the_task_key_matches_the_one_lakewarden_commits_with() -> None:
    from lakewarden.catalogs import foreign

    assert foreign.OUR_TASK_KEY == TASK_KEY


# --- order --------------------------------------------------------------------------------


def test_a_declaration_wins_over_what_the_table_shows() -> None:
    m = found(
        {"lakewarden.maintained-by": "platform-team", "self-optimizing.enabled": "true"},
        summaries=[{"operation": "replace", "flink.job-id": "x"}],
    )
    assert m is not None and m.who == "platform-team"


def test_the_newest_commit_evidence_is_reported() -> None:
    summaries = [
        APPEND,
        {"operation": "replace", "snapshot.producer": "OPTIMIZE"},
        {"operation": "replace", "snapshot.producer": "OPTIMIZE"},
    ]
    m = found(summaries=summaries)
    assert m is not None and "2nd latest" in m.evidence


# --- Delta: another optimizer in the log (issue 29) -----------------------------------


def _info(version: int, operation: str, **extra: object) -> dict[str, object]:
    return {
        "version": version,
        "operation": operation,
        "engineInfo": "Apache-Spark/3.5.7 Delta-Lake/3.3.3",
        **extra,
    }


def test_delta_auto_compaction_once_is_the_writers_compaction() -> None:
    from lakewarden.catalogs.foreign import detect_delta

    auto = _info(7, "OPTIMIZE", operationParameters={"predicate": "[]", "auto": True})
    found = detect_delta([_info(8, "WRITE"), auto])
    assert set(found) == {"compaction"} and found["compaction"].who == "auto-compaction"
    assert "version 7 is an OPTIMIZE with auto=true" in found["compaction"].evidence
    manual = _info(7, "OPTIMIZE", operationParameters={"predicate": "[]", "auto": False})
    assert detect_delta([manual]) == {}  # one operator's OPTIMIZE is not a service


def test_delta_recurring_optimize_and_vacuum_by_others_are_a_service() -> None:
    from lakewarden.catalogs.foreign import detect_delta

    infos = [
        _info(9, "VACUUM END", userName="svc-maint"),
        _info(8, "VACUUM START", userName="svc-maint"),
        _info(7, "OPTIMIZE", userName="svc-maint", operationParameters={"zOrderBy": '["x"]'}),
        _info(6, "WRITE"),
        _info(5, "REORG", userName="svc-maint"),
        _info(4, "VACUUM END", userName="svc-maint"),
    ]
    found = detect_delta(infos)
    assert set(found) == {"optimize", "vacuum"}
    said = found["optimize"].evidence
    assert "2 OPTIMIZE/REORG commits lakewarden did not make" in said
    assert "versions 7, 5" in said and "user svc-maint" in said
    assert "2 VACUUM commits" in found["vacuum"].evidence


def test_delta_commits_lakewarden_made_are_never_evidence() -> None:
    from lakewarden.catalogs.foreign import detect_delta

    spark = {"userMetadata": '{"lakewarden.task-id": "4", "lakewarden.attempt": "1"}'}
    delta_rs = {"lakewarden.task-id": "5"}
    auto = {"operationParameters": {"auto": "true"}}
    ours = [
        _info(3, "OPTIMIZE", **spark, **auto),
        _info(2, "OPTIMIZE", **delta_rs),
        _info(1, "VACUUM END", **spark),
        _info(0, "VACUUM END", **spark),
    ]
    assert detect_delta(ours) == {}
    # a userMetadata that only mentions lakewarden in text is not its mark
    other = {"userMetadata": "not lakewarden.task-id"}
    assert set(detect_delta([_info(1, "OPTIMIZE", **other), _info(0, "OPTIMIZE")])) == {"optimize"}
