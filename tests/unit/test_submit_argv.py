"""`lakewarden.spark.submit`: the spark-submit command line of a submitted application,
pure. A secret (in LAKEWARDEN_SPARK_CONF, the database or catalog URL) never reaches it,
and is masked if one is forced in; Kubernetes gets references to a Secret, not values."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lakewarden.settings import Settings
from lakewarden.spark.submit import _for_double_quotes as yarn_am_env_value
from lakewarden.spark.submit import (
    application_settings,
    driver_pod_name,
    kubernetes_argv,
    masked,
    properties_text,
    secrets_of,
    settings_env,
    submit_argv,
    yarn_am_env,
)
from lakewarden.spark.yarn import ended

DB = "postgresql+psycopg://lw:DB-pw-123@127.0.0.1:5432/lw"
SECRETS = ("S3-secret-value", "S3-access-value", "CATALOG-pw-456", "DB-pw-123")


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    jar = tmp_path / "x.jar"
    jar.write_text("")
    # As an operator sets it: in the environment.
    monkeypatch.setenv(
        "LAKEWARDEN_SPARK_CONF",
        json.dumps(
            {
                "spark.hadoop.fs.s3a.secret.key": "S3-secret-value",
                "spark.hadoop.fs.s3a.access.key": "S3-access-value",
                "spark.executor.cores": "2",
            }
        ),
    )
    return Settings(
        data_dir=tmp_path,
        spark_jars=str(jar),
        database_url=DB,
        catalog_database_url="postgresql://cat:CATALOG-pw-456@127.0.0.1:5432/cat",
        application_driver_memory="512m",
    )


def _argv(settings: Settings, **kw: Any) -> list[str]:
    return submit_argv(
        settings,
        DB,
        spark_submit="/spark/bin/spark-submit",
        entry="/app/lakewarden/jobs/application_entry.py",
        python="/venv/bin/python",
        task_id=12,
        attempt=2,
        group="lakewarden-task-12-2",
        **kw,
    ).argv


def _confs(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--conf")


def test_argv_runs_the_entry_for_one_attempt_with_every_launch_setting(settings: Settings) -> None:
    argv = _argv(settings)
    assert argv[:9] == [
        "/spark/bin/spark-submit",
        "--master",
        "local[2]",
        "--deploy-mode",
        "client",
        "--name",
        "lakewarden-task-12-2",
        "--driver-memory",
        "512m",
    ]
    assert argv[-5:] == [
        "/app/lakewarden/jobs/application_entry.py",
        "--task-id",
        "12",
        "--attempt",
        "2",
    ]
    conf = _confs(argv)
    assert conf["spark.executor.cores"] == "2"
    assert conf["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert conf["spark.pyspark.driver.python"] == "/venv/bin/python"
    assert "spark.master" not in conf and "spark.app.name" not in conf


def test_a_hudi_tables_application_starts_with_the_hudi_familys_jars_and_catalog(
    settings: Settings,
) -> None:
    """A Hudi job's JVM is launched by spark-submit: its family's settings must be on the
    command line (set in the session later, they would not reach the classpath)."""
    iceberg, hudi = _confs(_argv(settings)), _confs(_argv(settings, family="hudi"))
    assert "hudi-spark3.5-bundle" in hudi["spark.jars"]
    assert "hudi-spark3.5-bundle" not in iceberg.get("spark.jars", "")
    assert hudi["spark.sql.catalog.spark_catalog"].endswith("HoodieCatalog")
    assert "HoodieSparkSessionExtension" in hudi["spark.sql.extensions"]


def test_no_secret_from_the_environment_reaches_the_argv(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "\0".join(_argv(settings))
    for secret in SECRETS:
        assert secret not in text
    assert "fs.s3a.secret.key" not in text and "jdbc.password" not in text
    # ...while the child's environment carries them (owner-only /proc/<pid>/environ).
    env = settings_env(settings, DB)
    assert env["LAKEWARDEN_DATABASE_URL"] == DB
    assert "S3-secret-value" in env["LAKEWARDEN_SPARK_CONF"]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert Settings() == settings  # the child reads back the very same settings


def test_masked_hides_a_secret_forced_into_the_argv(settings: Settings) -> None:
    argv = [
        *_argv(settings),
        "--conf",
        "spark.hadoop.fs.s3a.secret.key=S3-secret-value",
        "--conf",
        "spark.sql.catalog.x.uri=jdbc:postgresql://u:CATALOG-pw-456@h/db",
        "--conf",
        "spark.whatever=DB-pw-123",
    ]
    shown = masked(argv, secrets_of(settings, DB))
    text = " ".join(shown)
    for secret in SECRETS[:1] + SECRETS[2:]:
        assert secret not in text
    assert "spark.hadoop.fs.s3a.secret.key=***" in shown
    assert shown[:9] == argv[:9]  # the rest stays readable


def test_kubernetes_cluster_mode_knows_its_submission_id_and_refers_to_secrets(
    settings: Settings,
) -> None:
    k8s = settings.model_copy(
        update={
            "application_master": "k8s://https://kube:6443",
            "application_deploy_mode": "cluster",
            "kubernetes_image": "lakewarden:1",
            "kubernetes_namespace": "lake",
            "kubernetes_secret": "lakewarden-env",
        }
    )
    sub = submit_argv(
        k8s,
        DB,
        spark_submit="spark-submit",
        entry="/app/lakewarden/jobs/application_entry.py",
        python="python",
        task_id=12,
        attempt=2,
        group="lakewarden-task-12-2",
    )
    assert sub.submission_id == "lake:lakewarden-task-12-2-driver"
    conf = _confs(sub.argv)
    assert conf["spark.kubernetes.driver.pod.name"] == "lakewarden-task-12-2-driver"
    assert conf["spark.kubernetes.container.image"] == "lakewarden:1"
    assert (
        conf["spark.kubernetes.driver.secretKeyRef.LAKEWARDEN_DATABASE_URL"]
        == "lakewarden-env:LAKEWARDEN_DATABASE_URL"
    )
    assert conf["spark.kubernetes.driverEnv.LAKEWARDEN_KUBERNETES_NAMESPACE"] == "lake"
    assert "local:///app/lakewarden/jobs/application_entry.py" in sub.argv
    text = "\0".join(sub.argv)
    for secret in SECRETS:
        assert secret not in text
    assert kubernetes_argv(
        "spark-submit", "k8s://https://kube:6443", "kill", sub.submission_id
    ) == [
        "spark-submit",
        "--master",
        "k8s://https://kube:6443",
        "--kill",
        "lake:lakewarden-task-12-2-driver",
    ]


def test_a_secret_needs_a_kubernetes_secret_to_refer_to(settings: Settings) -> None:
    k8s = settings.model_copy(
        update={"application_master": "k8s://https://kube:6443", "kubernetes_image": "i"}
    )
    with pytest.raises(ValueError, match="kubernetes_secret"):
        _argv(k8s)


def test_cluster_mode_is_refused_off_kubernetes_and_yarn(settings: Settings) -> None:
    with pytest.raises(ValueError, match=r"Kubernetes .* and YARN"):
        _argv(settings.model_copy(update={"application_deploy_mode": "cluster"}))


def test_driver_pod_names_are_dns_labels() -> None:
    name = driver_pod_name("LakeWarden_task-" + "9" * 80)
    assert len(name) <= 63 and name.endswith("-driver")
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")


def test_the_application_reads_back_its_own_master_not_the_schedulers(settings: Settings) -> None:
    """PySpark's session builder sets spark.master from the settings, over spark-submit's
    --master: the child's environment must name the application's master."""
    s = settings.model_copy(update={"application_master": "spark://m:7077"})
    env = settings_env(application_settings(s), DB)
    assert env["LAKEWARDEN_SPARK_MASTER"] == "spark://m:7077"
    assert env["LAKEWARDEN_SPARK_DRIVER_MEMORY"] == "512m"
    assert settings_env(s, DB)["LAKEWARDEN_SPARK_MASTER"] == "local[2]"  # the scheduler's


YARN = {"application_master": "yarn", "yarn_resourcemanager_url": "http://rm:8088"}


def test_a_yarn_master_needs_the_resourcemanagers_address(settings: Settings) -> None:
    with pytest.raises(ValueError, match="yarn_resourcemanager_url"):
        _argv(settings.model_copy(update={"application_master": "yarn"}))


def test_yarn_client_mode_runs_one_am_attempt_with_the_schedulers_python(
    settings: Settings,
) -> None:
    argv = _argv(settings.model_copy(update=YARN))
    assert argv[1:5] == ["--master", "yarn", "--deploy-mode", "client"]
    assert "--properties-file" not in argv
    conf = _confs(argv)
    assert conf["spark.yarn.maxAppAttempts"] == "1"  # a failed attempt is the scheduler's
    assert conf["spark.hadoop.yarn.resourcemanager.connect.max-wait.ms"] == "30000"
    assert conf["spark.pyspark.python"] == "/venv/bin/python"
    # spark_conf wins over the defaults.
    s = settings.model_copy(
        update={**YARN, "spark_conf": {**settings.spark_conf, "spark.yarn.maxAppAttempts": "2"}}
    )
    assert _confs(_argv(s))["spark.yarn.maxAppAttempts"] == "2"


def test_yarn_cluster_mode_gives_the_am_its_settings_in_a_file_never_on_argv(
    settings: Settings, tmp_path: Path
) -> None:
    s = settings.model_copy(update={**YARN, "application_deploy_mode": "cluster"})
    with pytest.raises(ValueError, match="properties file"):
        _argv(s)
    props = str(tmp_path / "p.properties")
    sub = submit_argv(
        s,
        DB,
        spark_submit="/spark/bin/spark-submit",
        entry="/app/e.py",
        python="/venv/bin/python",
        task_id=1,
        attempt=1,
        group="g",
        properties_file=props,
    )
    assert sub.argv[1:3] == ["--properties-file", props]
    assert sub.argv[sub.argv.index("--deploy-mode") + 1] == "cluster"
    text = "\0".join(sub.argv)
    for secret in SECRETS:
        assert secret not in text
    env = sub.properties
    assert env["spark.yarn.appMasterEnv.LAKEWARDEN_DATABASE_URL"] == DB
    assert env["spark.yarn.appMasterEnv.LAKEWARDEN_SPARK_MASTER"] == "yarn"
    assert "S3-secret-value" in env["spark.yarn.appMasterEnv.LAKEWARDEN_SPARK_CONF"]


def test_properties_text_escapes_what_java_would_read_otherwise() -> None:
    text = properties_text({"b": "x\\y\nz", "a": " lead"}, "spark.x 1\n")
    assert text == "spark.x 1\na=\\ lead\nb=x\\\\y\\nz\n"


def test_yarns_word_on_an_ended_application_carries_its_diagnostics() -> None:
    assert ended(None) is None
    assert ended({"state": "RUNNING", "finalStatus": "UNDEFINED"}) is None
    why = ended(
        {
            "state": "KILLED",
            "finalStatus": "KILLED",
            "diagnostics": "Application application_1_0001 was killed by user dr.who\n at 127.0.0.1",  # noqa: E501
        }
    )
    assert why == (
        "YARN says KILLED (KILLED): Application application_1_0001 was killed by user dr.who "
        "at 127.0.0.1"
    )


def test_the_ams_environment_survives_the_nodemanagers_launch_script(
    settings: Settings, tmp_path: Path
) -> None:
    """The NodeManager writes `export X="value"` unescaped: a JSON setting's quotes, a `$`,
    a backslash must reach the driver as they were."""
    s = settings.model_copy(update={**YARN, "application_deploy_mode": "cluster"})
    props = yarn_am_env(application_settings(s), DB)
    value = props["spark.yarn.appMasterEnv.LAKEWARDEN_SPARK_CONF"]
    tricky = 'x"$HOME`id`\\y'
    script = f'export A="{value}"; export B="{yarn_am_env_value(tricky)}"; printf %s "$A"; '
    script += 'printf "\\0%s" "$B"'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    a, b = out.stdout.split("\0")
    assert json.loads(a) == s.spark_conf and b == tricky


def test_the_drivers_address_is_the_applications_masters_not_the_schedulers(
    settings: Settings, tmp_path: Path
) -> None:
    """The scheduler's local[2] keeps its own driver on loopback; a YARN application's
    driver (in a container, in cluster mode) must be reachable by its executors."""
    s = settings.model_copy(update={**YARN, "application_deploy_mode": "cluster"})
    conf = _confs(_argv(s, properties_file=str(tmp_path / "p")))
    assert "spark.driver.bindAddress" not in conf and "spark.driver.host" not in conf
    local = _confs(_argv(settings))
    assert local["spark.driver.bindAddress"] == "127.0.0.1"
