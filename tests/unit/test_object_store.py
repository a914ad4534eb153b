"""What Spark gets for a catalog with an S3 warehouse (pure, no JVM, no server), and how a
storage error is told to whoever registers the catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.kinds.base import PlanRejected
from lakewarden.kinds.clean import clean_sql
from lakewarden.object_store import S3_FILE_IO, _why, by_prefix, check_warehouse, spark_properties
from lakewarden.secret_refs import RefRules
from lakewarden.settings import Settings
from lakewarden.spark.jars import PinnedJar, pinned, spark_pins
from lakewarden.spark.session import _is_secret, catalog_conf

REF = TableRef("n", "t")
S3 = {
    "warehouse": "s3://lake/wh",
    "s3.endpoint": "http://127.0.0.1:9000",
    "s3.region": "eu-west-1",
}


def test_an_s3_warehouse_gets_s3fileio_its_region_and_path_style() -> None:
    assert spark_properties(S3) == {
        "io-impl": S3_FILE_IO,
        "client.region": "eu-west-1",
        "s3.path-style-access": "true",
    }
    virtual = spark_properties({**S3, "s3.force-virtual-addressing": "true"})
    assert virtual["s3.path-style-access"] == "false"
    given = {**S3, "io-impl": "my.FileIO", "s3.path-style-access": "false"}
    assert spark_properties(given) == {"client.region": "eu-west-1"}  # what is given wins
    assert spark_properties({"warehouse": "file:///tmp/wh", "uri": "x"}) == {}
    assert by_prefix("s3://lake/wh/t") and not by_prefix("hdfs://nn/wh/t")


def test_the_spark_catalog_of_an_s3_catalog_keeps_its_keys_off_the_command_line() -> None:
    entry = CatalogEntry(
        name="s3lake",
        type="rest",
        properties={
            "uri": "http://127.0.0.1:8181",
            **S3,
            "s3.access-key-id": "AKIAEXAMPLEEXAMPLE01",
            "s3.secret-access-key": "not-a-real-secret-at-all",
        },
        refs=RefRules.of(Settings()),
    )
    conf = catalog_conf(entry)
    cat = "spark.sql.catalog.s3lake"
    assert conf[f"{cat}.io-impl"] == S3_FILE_IO and conf[f"{cat}.client.region"] == "eu-west-1"
    secret = {k for k in conf if _is_secret(k)}
    assert secret == {f"{cat}.s3.access-key-id", f"{cat}.s3.secret-access-key"}


def test_orphan_removal_lists_by_prefix_when_told() -> None:
    action = {"name": "remove_orphan_files", "older_than": "2026-11-01T00:00:00+00:00"}
    sql = clean_sql("lake", REF, {**action, "prefix_listing": True})
    assert sql.endswith("dry_run => false, prefix_listing => true)")
    with pytest.raises(PlanRejected, match="prefix_listing"):
        clean_sql("lake", REF, {**action, "prefix_listing": "true; DROP"})


def test_a_storage_error_is_told_in_words_never_quoted() -> None:
    denied = (
        "When listing objects under key '' in bucket 'b': AWS Error SIGNATURE_DOES_NOT_MATCH "
        "during ListObjectsV2 operation: The request signature we calculated does not match"
    )
    assert "refused these credentials" in _why(denied)
    down = "AWS Error NETWORK_CONNECTION during HeadBucket operation: curlCode: 7"
    assert "did not answer" in _why(down)
    other = "AWS Error SLOW_DOWN during ListObjectsV2 operation: key=secret-thing"
    assert _why(other) == "the endpoint answered with an error (SLOW_DOWN)"
    check_warehouse({"warehouse": "file:///nowhere"})  # not S3: nothing to check here


def test_the_lock_pins_s3proxy_for_the_tests_not_for_spark() -> None:
    s3proxy = pinned("server-s3proxy")
    assert not s3proxy.for_spark and s3proxy not in spark_pins()
    assert s3proxy.file_name.endswith("-jar-with-dependencies.jar")
    jar = PinnedJar("x", "org.gaul:s3proxy:4.1.0:jar-with-dependencies", 1, "0" * 64)
    assert jar.url("https://repo/") == (
        "https://repo/org/gaul/s3proxy/4.1.0/s3proxy-4.1.0-jar-with-dependencies.jar"
    )


def test_the_lock_pins_hudis_flink_bundle_for_the_tests_flink_writer_not_for_spark() -> None:
    flink = pinned("server-flink")
    assert flink.coordinate == "org.apache.hudi:hudi-flink1.17-bundle:0.14.0"
    assert not flink.for_spark and not flink.families
    assert all(flink not in spark_pins(family) for family in ("iceberg", "hudi", "delta"))


def test_spark_masks_s3fileio_key_names_in_its_ui_and_event_log() -> None:
    import re

    from lakewarden.spark.session import spark_conf

    pattern = re.compile(spark_conf(Settings(), "postgresql://u@h/db")["spark.redaction.regex"])
    for key in ("spark.sql.catalog.x.s3.access-key-id", "fs.s3a.access.key", "x.password"):
        assert pattern.search(key), key
    assert not pattern.search("spark.sql.catalog.x.s3.endpoint")


def test_spark_reads_a_hudi_or_delta_table_on_s3_through_s3a_with_its_buckets_settings() -> None:
    """Hudi's and Delta's Spark jobs: s3:// as S3A's s3a://, and the catalog's s3.*
    properties as S3A's, for the table's bucket alone."""
    from lakewarden.object_store import hadoop_s3a, s3a_path

    assert s3a_path("s3://b/wh/t") == s3a_path("s3n://b/wh/t") == "s3a://b/wh/t"
    assert s3a_path("s3a://b/t") == "s3a://b/t" and s3a_path("/data/t") == "/data/t"
    props = {
        "s3.endpoint": "http://127.0.0.1:9000",
        "s3.region": "us-east-1",
        "s3.access-key-id": "AK",
        "s3.secret-access-key": "SK",
    }
    assert hadoop_s3a(props, "s3://lake/wh/t") == {
        "fs.s3a.bucket.lake.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.bucket.lake.endpoint.region": "us-east-1",
        "fs.s3a.bucket.lake.access.key": "AK",
        "fs.s3a.bucket.lake.secret.key": "SK",
        "fs.s3a.bucket.lake.path.style.access": "true",
        "fs.s3a.bucket.lake.connection.ssl.enabled": "false",
    }
    token = hadoop_s3a(
        {
            "s3.session-token": "T",
            "s3.force-virtual-addressing": "true",
            "s3.endpoint": "https://s3.example",
        },
        "s3a://b/t",
    )
    assert token["fs.s3a.bucket.b.aws.credentials.provider"].endswith(
        "TemporaryAWSCredentialsProvider"
    )
    assert token["fs.s3a.bucket.b.path.style.access"] == "false"
    assert token["fs.s3a.bucket.b.connection.ssl.enabled"] == "true"
    assert hadoop_s3a(props, "/data/t") == {} and hadoop_s3a(props, "hdfs://nn/t") == {}
    s3a = {p.file_name for p in spark_pins("hudi")} - {p.file_name for p in spark_pins()}
    assert {"hadoop-aws-3.3.4.jar", "aws-java-sdk-bundle-1.12.262.jar"} <= s3a
    s3a_group = {p.file_name for p in spark_pins("hudi") if p.group == "s3a"}
    assert s3a_group <= {p.file_name for p in spark_pins("delta")}  # Delta's jobs on S3 too


def test_a_retry_waits_out_a_killed_attempts_hudi_heartbeat(tmp_path: Path) -> None:
    """Hudi refuses an instant while its heartbeat file is younger than its expiry."""
    import os

    from lakewarden.formats.hudi.jobs import HEARTBEAT_EXPIRY_S, heartbeat_wait_s

    (tmp_path / ".hoodie" / ".heartbeat").mkdir(parents=True)
    (tmp_path / ".hoodie" / "hoodie.properties").write_text("hoodie.table.version=8\n")
    instant = "20261126131937027"
    assert heartbeat_wait_s(str(tmp_path), instant, 1_000_000.0) == 0.0  # none
    beat = tmp_path / ".hoodie" / ".heartbeat" / instant
    beat.touch()
    os.utime(beat, (1_000_000.0, 1_000_000.0))
    assert heartbeat_wait_s(str(tmp_path), instant, 1_000_000.0) == HEARTBEAT_EXPIRY_S + 5.0
    assert heartbeat_wait_s(str(tmp_path), instant, 1_000_000.0 + HEARTBEAT_EXPIRY_S + 6) == 0.0
