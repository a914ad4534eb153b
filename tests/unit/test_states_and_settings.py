"""The state machine as data, retry backoff, settings and Spark configuration."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from lakewarden.backoff import retry_delay_s
from lakewarden.settings import Settings
from lakewarden.spark.session import session_secrets, spark_conf
from lakewarden.tasks.machine import ALL_STATES, ALLOWED, TERMINAL_STATES, can_transition


def test_terminal_states_have_no_way_out() -> None:
    for s in TERMINAL_STATES:
        assert ALLOWED[s] == frozenset()


def test_every_open_state_can_be_cancelled_and_reaches_a_terminal_state() -> None:
    for s in ALL_STATES:
        if s not in TERMINAL_STATES:
            assert can_transition(s, "cancelled")
            assert ALLOWED[s] & set(TERMINAL_STATES)


def test_no_transition_targets_an_unknown_state() -> None:
    for targets in ALLOWED.values():
        assert targets <= set(ALL_STATES)
    assert not can_transition("pending", "running")  # must be planned first


def test_backoff_grows_exponentially_with_jitter_and_cap() -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        d = retry_delay_s(attempt, 10, 600, rng)
        ceiling = min(600, 10 * 2 ** (attempt - 1))
        assert ceiling / 2 <= d <= ceiling


def test_settings_normalise_and_refuse_database_urls() -> None:
    s = Settings(database_url="postgresql://u@h:5432/db")
    assert s.database_url == "postgresql+psycopg://u@h:5432/db"
    with pytest.raises(ValidationError):
        Settings(database_url="mysql://u@h/db")


def test_spark_conf_wires_the_jdbc_catalog(tmp_path: Path) -> None:
    jar = tmp_path / "x.jar"
    jar.write_text("")
    s = Settings(
        data_dir=tmp_path,
        spark_jars=str(jar),
        catalog_name="lake",
        spark_conf={"spark.executor.cores": "2"},
    )
    conf = spark_conf(s, "postgresql+psycopg://lw:pw@127.0.0.1:5432/lw")
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert conf["spark.sql.catalog.lake.uri"] == "jdbc:postgresql://127.0.0.1:5432/lw"
    assert conf["spark.sql.catalog.lake.jdbc.user"] == "lw"
    assert conf["spark.jars"] == str(jar)
    assert conf["spark.executor.cores"] == "2"
    assert conf["spark.sql.catalog.lake.warehouse"] == (tmp_path / "warehouse").resolve().as_uri()


def test_secrets_are_not_launch_settings(tmp_path: Path) -> None:
    """PySpark puts every launch setting on spark-submit's command line (world-readable in
    /proc): the catalog's credentials are set on the running session instead."""
    jar = tmp_path / "x.jar"
    jar.write_text("")
    s = Settings(
        data_dir=tmp_path,
        spark_jars=str(jar),
        catalog_name="tokens",  # a catalog's name is no credential
        spark_conf={
            "spark.sql.catalog.tokens.s3.secret-access-key": "sk",
            "spark.sql.catalog.tokens.token": "tk",
            "spark.executor.cores": "2",
        },
    )
    url = "postgresql+psycopg://lw:pw@127.0.0.1:5432/lw"
    launch, secrets = spark_conf(s, url), session_secrets(s, url)
    assert secrets == {
        "spark.sql.catalog.tokens.jdbc.password": "pw",
        "spark.sql.catalog.tokens.s3.secret-access-key": "sk",
        "spark.sql.catalog.tokens.token": "tk",
    }
    assert not set(launch) & set(secrets)
    assert not any(v in ("pw", "sk", "tk") for v in launch.values())
    assert launch["spark.sql.catalog.tokens"] == "org.apache.iceberg.spark.SparkCatalog"
    assert launch["spark.sql.catalog.tokens.jdbc.user"] == "lw"


def test_spark_conf_with_maven_packages_adds_the_jdbc_driver(tmp_path: Path) -> None:
    s = Settings(
        data_dir=tmp_path, spark_packages="org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0"
    )
    conf = spark_conf(s, "postgresql+psycopg://lw@127.0.0.1/lw")
    assert "org.postgresql:postgresql" in conf["spark.jars.packages"]
    assert "spark.jars" not in conf


def test_spark_sees_fresh_table_metadata(tmp_path: Path) -> None:
    jar = tmp_path / "x.jar"
    jar.write_text("")
    conf = spark_conf(Settings(data_dir=tmp_path, spark_jars=str(jar)), "postgresql+psycopg://h/db")
    # a cached table load from an earlier job would plan a rewrite on stale files
    assert conf["spark.sql.catalog.lake.cache-enabled"] == "false"
    assert conf["spark.sql.session.timeZone"] == "UTC"


def test_settings_and_runtime_show_no_secret_in_their_repr() -> None:
    """A Settings or Runtime in a log line or a traceback (pytest prints fixtures' reprs)
    shows no password, webhook token or Spark secret."""
    from sqlalchemy import create_engine

    from lakewarden.runtime import Runtime

    url = "postgresql+psycopg://u:SEKRIT-db@127.0.0.1:1/x"
    settings = Settings(
        database_url=url,
        catalog_database_url="postgresql://c:SEKRIT-cat@h/c",
        alert_slack_url="https://hooks.example/services/T/B/SEKRIT-slack",
        alert_webhook_url="https://hook.example/SEKRIT-hook",
        alert_alertmanager_url="https://am:SEKRIT-am@am.example",
        spark_conf={"spark.hadoop.fs.s3a.secret.key": "SEKRIT-s3"},
    )
    rt = Runtime(settings=settings, db_url=url, engine=create_engine(url), role="test")
    for shown in (repr(settings), str(settings), repr(rt)):
        assert "SEKRIT" not in shown


def test_execution_mode_settings_refuse_what_no_scheduler_runs() -> None:
    """A misspelt pool mode or deploy mode stops the process at start, naming the choices,
    instead of quietly running the pool in the warm session."""
    with pytest.raises(ValidationError, match="'session' or 'application'"):
        Settings.model_validate({"pool_modes": {"big": "aplication"}})
    with pytest.raises(ValidationError, match="'client' or 'cluster'"):
        Settings.model_validate({"application_deploy_mode": "server"})
    settings = Settings.model_validate({"pool_modes": {"big": "application"}})
    assert settings.pool_modes["big"] == "application"


def test_regions_are_named_and_a_scheduler_serves_a_known_one() -> None:
    """A scheduler's region must be one of LAKEWARDEN_REGIONS, which includes the default
    (the settings' catalog is there); a name a lease, label or Deployment cannot carry is
    refused with what to use instead."""
    assert (Settings().regions, Settings().region) == (["default"], "default")
    assert Settings(regions=["default", "eu-west"], region="eu-west").region == "eu-west"
    with pytest.raises(ValidationError, match="region 'mars' is not one of LAKEWARDEN_REGIONS"):
        Settings(region="mars")
    with pytest.raises(ValidationError, match="lowercase letters, digits or dashes"):
        Settings(regions=["default", "EU_West"])
    with pytest.raises(ValidationError, match="regions must include 'default'"):
        Settings(regions=["eu"], region="eu")
