"""Static checks of the deployment files: Dockerfile, docker-compose.yml, Helm chart.

No network and no Docker daemon. The chart is rendered with a `helm` binary when
one is on PATH, else with the Helm Go SDK through `helm_python` (PyPI
`helm-python-sdk`) when that is importable; otherwise the rendering tests skip.
`docker compose config` runs only when the compose plugin is installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse deployment files")

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_HOST = ROOT / "docker-compose.host.yml"
COMPOSE_HADOOP = ROOT / "docker-compose.hadoop.yml"
DOCKERFILE = ROOT / "Dockerfile"
CHART = ROOT / "charts" / "lakewarden"

# The `lakewarden` console script's sub-commands.
SUBCOMMANDS = {"migrate", "api", "worker", "scheduler", "demo"}
LONG_RUNNING = {"api", "worker", "scheduler"}


def load_yaml(path: Path) -> Any:
    with path.open() as fh:
        return yaml.safe_load(fh)


# --- Dockerfile ---------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """Each build stage's instructions, by the stage's name."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for op, rest in dockerfile_instructions():
        if op == "FROM":
            current = []
            stages[rest.split(" AS ")[-1].strip()] = current
        current.append((op, rest))
    return stages


def test_dockerfile_targets() -> None:
    """`full` (the default: the last stage) runs every role; `slim` api, worker, migrate."""
    stages = dockerfile_stages()
    assert list(stages) == ["base", "slim", "jars", "full"]
    # The python image by default; scripts/images.sh passes its Debian-built base instead.
    assert ("ARG", "BASE_IMAGE=python:3.11-slim-bookworm") in dockerfile_instructions()
    assert stages["base"][0] == ("FROM", "${BASE_IMAGE} AS base")
    # full adds Java and PySpark on top of slim, sharing its layers.
    assert stages["slim"][0] == ("FROM", "base AS slim")
    assert stages["full"][0] == ("FROM", "slim AS full")
    for target in ("slim", "full"):
        instr = stages[target]
        assert ("ENTRYPOINT", '["lakewarden"]') in instr
        assert [rest for op, rest in instr if op == "CMD"][-1] == '["api"]'
        user = [rest for op, rest in instr if op == "USER"][-1]
        assert user.split(":")[0] not in {"root", "0"}
    slim_runs = " ".join(rest for op, rest in stages["slim"] if op == "RUN")
    # pinned versions; tables on HDFS and Hudi tables (their readers) from every role
    assert 'pip install --no-cache-dir -c constraints.txt ".[hdfs,hudi,delta]"' in slim_runs
    assert "openjdk" not in slim_runs and "[spark" not in slim_runs
    full_runs = " ".join(rest for op, rest in stages["full"] if op == "RUN")
    assert "openjdk-17-jre-headless" in full_runs
    assert "libpostgresql-jdbc-java" not in full_runs  # the JDBC driver is a pinned jar
    assert (
        'pip install --no-cache-dir -c constraints.txt ".[spark,embedded,hdfs,hudi,delta]"'
        in full_runs
    )


def test_dockerfile_bakes_the_pinned_jars() -> None:
    """The jars stage fetches and checks the lock's jars; the full image copies them and
    points its cache at them, so no Maven at run time."""
    stages = dockerfile_stages()
    jar_runs = " ".join(rest for op, rest in stages["jars"] if op == "RUN")
    assert "LAKEWARDEN_JARS_CACHE_DIR=/opt/lakewarden lakewarden jars --check" in jar_runs
    assert ("COPY", "--from=jars /opt/lakewarden/maven/ /opt/lakewarden/maven/") in stages["full"]
    env = " ".join(rest for op, rest in stages["full"] if op == "ENV")
    assert "LAKEWARDEN_JARS_CACHE_DIR=/opt/lakewarden" in env
    text = DOCKERFILE.read_text()
    assert "SPARK_PACKAGES" not in text and "SPARK_JARS" not in text


def test_dockerfile_copies_existing_paths() -> None:
    """Every non-wildcard COPY source exists, so the build context is complete."""
    for op, rest in dockerfile_instructions():
        if op != "COPY" or rest.startswith("--from"):
            continue
        *sources, _dest = rest.split()
        for src in sources:
            if not any(ch in src for ch in "*?["):
                assert (ROOT / src).exists(), f"Dockerfile copies missing path {src}"


# --- docker-compose.yml -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


def lakewarden_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run the `lakewarden` entrypoint (not Spark's, not the writer)."""
    return {
        name: svc
        for name, svc in compose["services"].items()
        if str(svc.get("image", "")).startswith("lakewarden") and "entrypoint" not in svc
    }


def test_compose_services_run_known_subcommands(compose: dict[str, Any]) -> None:
    services = lakewarden_services(compose)
    assert set(services) == {"migrate", "api", "worker", "scheduler"}
    for name, svc in services.items():
        command = svc["command"]
        assert isinstance(command, list) and command, name
        assert command[0] in SUBCOMMANDS, f"{name} runs unknown sub-command {command[0]!r}"
        assert command[0] == name
    images = {svc.get("image") for svc in compose["services"].values() if "build" in svc}
    assert images == {"lakewarden:0.1.0"}, "one image, built once, for every service"


def test_compose_dependencies_and_health(compose: dict[str, Any]) -> None:
    services = compose["services"]
    pg = services["postgres"]
    assert str(pg["image"]).startswith("postgres:16")
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    assert any(str(v).startswith("pgdata:") for v in pg["volumes"])

    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in LONG_RUNNING:
        deps = services[name]["depends_on"]
        assert deps["migrate"]["condition"] == "service_completed_successfully", name
        assert deps["postgres"]["condition"] == "service_healthy", name
        assert services[name]["deploy"]["replicas"] == 2, name
        assert "warehouse:/warehouse" in services[name]["volumes"], name

    api = services["api"]
    assert all(":" not in str(p) for p in api["ports"]), "replicas cannot share a host port"
    for role in ("api", "worker", "scheduler"):
        assert services[role]["healthcheck"]["test"][1:] == ["lakewarden", "check", "--role", role]
        # As the Helm chart runs them: a read-only root, memory-backed writable paths.
        assert services[role]["read_only"] is True, role
        assert {t.split(":")[0] for t in services[role]["tmpfs"]} == {
            "/tmp",
            "/var/lib/lakewarden",
            "/home/lakewarden",
        }, role
    assert {"pgdata", "warehouse"} <= set(compose["volumes"])


def test_compose_spark_standalone_cluster(compose: dict[str, Any]) -> None:
    """Master and worker from the image's PySpark; the schedulers use them."""
    services = compose["services"]
    master, worker = services["spark-master"], services["spark-worker"]
    for svc in (master, worker):
        assert svc["entrypoint"] == ["spark-class"]
        assert "warehouse:/warehouse" in svc["volumes"]  # executors write the data files
    assert master["command"][0] == "org.apache.spark.deploy.master.Master"
    port = master["command"][master["command"].index("--port") + 1]
    assert worker["command"][:2] == [
        "org.apache.spark.deploy.worker.Worker",
        f"spark://spark-master:{port}",
    ]
    assert worker["depends_on"]["spark-master"]["condition"] == "service_healthy"
    env = compose["x-lakewarden-env"]
    assert env["LAKEWARDEN_SPARK_MASTER"] == f"spark://spark-master:{port}"
    assert services["scheduler"]["depends_on"]["spark-master"]["condition"] == "service_healthy"
    # Jars come from the image, never from Maven (air-gapped).
    assert "LAKEWARDEN_SPARK_PACKAGES" not in env


def test_compose_writer(compose: dict[str, Any]) -> None:
    writer = compose["services"]["writer"]
    assert writer["entrypoint"] == ["python", "/scripts/demo_writer.py"]
    host_path = writer["volumes"][1].split(":")[0]
    assert (ROOT / host_path).is_file()
    assert writer["restart"] == "no"
    assert writer["depends_on"]["api"]["condition"] == "service_healthy"
    assert writer["environment"]["LAKEWARDEN_API_URL"] == "http://api:8080"
    env = {k: v for k, v in writer["environment"].items() if k != "LAKEWARDEN_API_URL"}
    assert env == compose["x-lakewarden-env"]
    from scripts import demo_writer

    args = demo_writer.build_parser().parse_args(writer["command"])
    assert args.commits > args.min_small_files  # enough small files to trigger a compaction


def test_compose_env_is_shared_and_prefixed(compose: dict[str, Any]) -> None:
    services = lakewarden_services(compose)
    # migrate alone runs as the schema's owner; the services as a role that owns nothing.
    owner = "LAKEWARDEN_MIGRATION_DATABASE_URL"
    assert [name for name, svc in services.items() if owner in svc["environment"]] == ["migrate"]
    envs = [
        {k: v for k, v in svc["environment"].items() if k != owner} for svc in services.values()
    ]
    assert all(env == envs[0] for env in envs), "lakewarden services should share one env"
    env = envs[0]
    user = re.compile(r"://([^:@]+)")
    assert user.findall(services["migrate"]["environment"][owner]) != user.findall(
        env["LAKEWARDEN_DATABASE_URL"]
    )
    assert all(key.startswith("LAKEWARDEN_") for key in env)
    assert re.match(r"postgresql\+psycopg://[^@]+@postgres:5432/", env["LAKEWARDEN_DATABASE_URL"])
    assert env["LAKEWARDEN_WAREHOUSE"] == "file:///warehouse"
    assert "x-lakewarden-env" in compose
    json.loads(env["LAKEWARDEN_SPARK_CONF"])  # the settings parse it as JSON


def _compose_command() -> list[str] | None:
    """`docker compose` (v2 plugin), else a standalone v2 `docker-compose`."""
    candidates = []
    if docker := shutil.which("docker"):
        candidates.append([docker, "compose"])
    if standalone := shutil.which("docker-compose"):
        candidates.append([standalone])
    for cmd in candidates:
        probe = subprocess.run([*cmd, "version"], capture_output=True, text=True)
        if probe.returncode == 0 and re.search(r"\bv?2\.", probe.stdout):
            return cmd
    return None


def _compose_config(*files: Path) -> dict[str, Any]:
    cmd = _compose_command()
    if cmd is None:
        pytest.skip(
            "Docker Compose v2 is not installed (neither `docker compose` nor docker-compose):"
            " `bash scripts/images.sh --compose` installs it"
        )
    result = subprocess.run(
        [*cmd, *(a for f in files for a in ("-f", str(f))), "config", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return cast(dict[str, Any], json.loads(result.stdout))


def test_compose_config_validates() -> None:
    _compose_config(COMPOSE)


def test_compose_host_override() -> None:
    """docker-compose.host.yml (no registry, host networking only): every service on the
    host's network, nothing pulled, no compose network made, each lakewarden service with
    its own host name and 127.0.0.1 address, no published port."""
    merged = _compose_config(COMPOSE, COMPOSE_HOST)
    services = merged["services"]
    assert set(services) >= {"api-2", "worker-2", "scheduler-2"}
    assert not merged.get("networks"), "host networking only: no compose network"
    for name, svc in services.items():
        assert svc["network_mode"] == "host", name
        assert svc["pull_policy"] == "never", name
        assert not svc.get("ports"), name
        for value in (svc.get("environment") or {}).values():
            for host in re.findall(r"(?:@|//)([\w.-]+):\d+", str(value or "")):
                assert host == "127.0.0.1", f"{name}: {value}"
    names = [svc.get("hostname") for svc in services.values() if svc.get("hostname")]
    assert len(names) == len(set(names)) == 6  # api, worker, scheduler: two of each
    for name in ("api", "api-2", "worker", "worker-2", "scheduler", "scheduler-2"):
        assert services[name]["deploy"]["replicas"] == 1, name
        assert services[name]["healthcheck"]["test"][1:3] == ["lakewarden", "check"], name


def test_compose_hadoop_override() -> None:
    """docker-compose.hadoop.yml: every lakewarden service gets the Hive Metastore catalog,
    the HDFS warehouse and YARN applications as settings lakewarden knows, and the site's
    Hadoop client files where HADOOP_CONF_DIR points; the stack's own env stays."""
    from lakewarden.settings import Settings

    known = {f"LAKEWARDEN_{name.upper()}" for name in Settings.model_fields}
    services = _compose_config(COMPOSE, COMPOSE_HADOOP)["services"]
    for name in ("migrate", "api", "worker", "scheduler", "writer"):
        env = services[name]["environment"]
        assert env["LAKEWARDEN_CATALOG_TYPE"] == "hive", name
        assert env["LAKEWARDEN_CATALOG_URI"].startswith("thrift://"), name
        assert env["LAKEWARDEN_WAREHOUSE"].startswith("hdfs://"), name
        assert env["LAKEWARDEN_APPLICATION_MASTER"] == "yarn", name
        assert env["LAKEWARDEN_YARN_RESOURCEMANAGER_URL"].startswith("http://"), name
        assert env["HADOOP_CONF_DIR"] == env["YARN_CONF_DIR"] == "/etc/hadoop/conf", name
        assert env["LAKEWARDEN_DATABASE_URL"], name  # merged, not replaced
        mounts = {v["target"]: v for v in services[name]["volumes"]}
        assert mounts["/etc/hadoop/conf"]["read_only"] is True, name
    added = {k for k in load_yaml(COMPOSE_HADOOP)["x-hadoop-env"] if k.startswith("LAKEWARDEN_")}
    assert added <= known, added - known


# --- Helm chart: static -------------------------------------------------------------------------


def test_chart_yaml() -> None:
    chart = load_yaml(CHART / "Chart.yaml")
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "lakewarden"
    assert str(chart["appVersion"]) == "0.1.0"
    assert chart["version"]


def test_values_yaml() -> None:
    values = load_yaml(CHART / "values.yaml")
    assert {"repository", "tag", "pullPolicy"} <= set(values["image"])
    assert {"url", "existingSecret", "existingSecretKey"} <= set(values["database"])
    assert values["service"]["port"] == 8080
    for component in LONG_RUNNING:
        assert values[component]["replicas"] == 2, component
        assert "resources" in values[component], component
    assert {"master", "jars", "packages"} <= set(values["spark"])
    assert values["warehouse"] and values["catalogName"]


# --- Helm chart: rendered -----------------------------------------------------------------------


class RenderRefused(Exception):
    """Helm refused the values (schema, `required`, `fail`)."""


def _render_with_binary(helm: str, values: dict[str, Any], tmp: Path) -> str:
    values_file = tmp / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = subprocess.run(
        [helm, "template", "lw", str(CHART), "--namespace", "lake", "-f", str(values_file)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RenderRefused(result.stderr)
    return result.stdout


def _render_with_sdk(values: dict[str, Any]) -> str:
    import helm_python

    try:
        with helm_python.Chart.load(str(CHART)) as chart:
            manifests = chart.render(values, name="lw", namespace="lake", is_install=True)
    except helm_python.HelmError as exc:
        raise RenderRefused(str(exc)) from exc
    return "\n---\n".join(
        text for path, text in sorted(manifests.items()) if not path.endswith("NOTES.txt")
    )


def _helm_binary() -> str | None:
    return shutil.which("helm")


def _sdk_available() -> bool:
    try:
        import helm_python  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


def render(values: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    helm = _helm_binary()
    if helm is not None:
        text = _render_with_binary(helm, values, tmp)
    elif _sdk_available():
        text = _render_with_sdk(values)
    else:
        pytest.skip(
            "cannot render the chart: no `helm` binary on PATH and `helm_python` "
            "(pip install helm-python-sdk) is not installed"
        )
    return [doc for doc in yaml.safe_load_all(text) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def test_helm_lint() -> None:
    helm = _helm_binary()
    if helm is not None:
        result = subprocess.run([helm, "lint", str(CHART)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
    elif _sdk_available():
        import helm_python

        report = helm_python.lint(str(CHART))
        errors = [m for m in report["messages"] if m["severity"] >= 3]
        assert not errors and not report["errors"], report
    else:
        pytest.skip("no `helm` binary on PATH and `helm_python` is not installed")


def test_rendered_deployments_run_known_subcommands(tmp_path: Path) -> None:
    docs = render({}, tmp_path)
    deployments = by_kind(docs, "Deployment")
    seen = set()
    for name, dep in deployments.items():
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            args = container["args"]
            assert args[0] in SUBCOMMANDS, f"{name} runs unknown sub-command {args[0]!r}"
            seen.add(args[0])
            env = {e["name"]: e for e in container["env"]}
            assert "secretKeyRef" in env["LAKEWARDEN_DATABASE_URL"]["valueFrom"]
        assert dep["spec"]["replicas"] == 2, name
    assert seen == LONG_RUNNING


def test_rendered_api_probes_and_service(tmp_path: Path) -> None:
    docs = render({}, tmp_path)
    api = by_kind(docs, "Deployment")["lw-lakewarden-api"]
    container = api["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["ports"][0]["containerPort"] == 8080
    (svc,) = by_kind(docs, "Service").values()
    assert svc["spec"]["ports"][0]["port"] == 8080
    assert svc["spec"]["selector"] == api["spec"]["selector"]["matchLabels"]


def test_rendered_migrate_hook(tmp_path: Path) -> None:
    docs = render({}, tmp_path)
    (job,) = by_kind(docs, "Job").values()
    hooks = job["metadata"]["annotations"]["helm.sh/hook"].split(",")
    assert set(hooks) == {"pre-install", "pre-upgrade"}
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["migrate"]
    # The hook runs before the release's Secret exists: its DB secret must be a hook too.
    secret_name = next(
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in container["env"]
        if e["name"] == "LAKEWARDEN_DATABASE_URL"
    )
    secret = by_kind(docs, "Secret")[secret_name]
    assert "helm.sh/hook" in secret["metadata"]["annotations"]
    config = next(iter(by_kind(docs, "ConfigMap").values()))["data"]
    job_env = {e["name"]: e.get("value") for e in container["env"] if "value" in e}
    assert job_env == config


def test_rendered_existing_secret(tmp_path: Path) -> None:
    values = {"database": {"existingSecret": "pg-url", "existingSecretKey": "uri"}}
    docs = render(values, tmp_path)
    assert by_kind(docs, "Secret") == {}
    for kind in ("Deployment", "Job"):
        for obj in by_kind(docs, kind).values():
            container = obj["spec"]["template"]["spec"]["containers"][0]
            ref = next(
                e["valueFrom"]["secretKeyRef"]
                for e in container["env"]
                if e["name"] == "LAKEWARDEN_DATABASE_URL"
            )
            assert ref == {"name": "pg-url", "key": "uri"}


def test_rendered_migration_owner_url(tmp_path: Path) -> None:
    """The schema owner's URL reaches the migrate hook only; the services keep theirs."""
    owner = "LAKEWARDEN_MIGRATION_DATABASE_URL"
    cases = [
        ({"migrationUrl": "postgresql://owner:pw@db/lw"}, "lw-lakewarden-migrate"),
        ({"existingSecret": "pg", "migrationExistingSecret": "pg-owner"}, "pg-owner"),
    ]
    for database, secret_name in cases:
        docs = render({"database": database}, tmp_path)
        for kind in ("Deployment", "Job"):
            for name, obj in by_kind(docs, kind).items():
                container = obj["spec"]["template"]["spec"]["containers"][0]
                refs = {e["name"]: e.get("valueFrom", {}) for e in container["env"]}
                if kind == "Job":
                    assert refs[owner]["secretKeyRef"]["name"] == secret_name, name
                else:
                    assert owner not in refs, name
        if secret_name == "lw-lakewarden-migrate":
            secret = by_kind(docs, "Secret")[secret_name]
            assert set(secret["data"]) == {"database-url", "migration-database-url"}
    (job,) = by_kind(render({}, tmp_path), "Job").values()
    assert owner not in {e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}


# --- Helm chart: values schema, every option on, Kubernetes schemas ------------------------------

# Every option of the chart turned on at once.
ALL_ON: dict[str, Any] = {
    "image": {"repository": "registry.example.com/lakewarden", "tag": "0.1.0"},
    "imagePullSecrets": [{"name": "regcred"}],
    "database": {"existingSecret": "pg", "existingSecretKey": "url"},
    "warehouse": "s3://lake/warehouse",
    "warehouseVolume": {"existingClaim": "warehouse-rwx"},
    "catalog": {"type": "jdbc", "databaseSecret": {"name": "catalog-db", "key": "url"}},
    "catalogs": [
        {
            "name": "sales",
            "type": "rest",
            "properties": {
                "uri": "https://rest.example.com",
                "token": {"env": "LW_SECRET_SALES_TOKEN"},
            },
            "pollIntervalS": 60,
            "pollConcurrency": 8,
        }
    ],
    "catalogRegistration": {"tokenSecret": {"name": "lakewarden-admin", "key": "token"}},
    "alerts": {
        "webhook": {"secretName": "alerts", "secretKey": "webhook"},
        "slack": {"secretName": "alerts", "secretKey": "slack"},
        "alertmanager": {"secretName": "alerts", "secretKey": "alertmanager"},
        "intervalS": 30,
        "backlogAgeS": 1800,
        "noLeaderS": 120,
        "resendIntervalS": 45,
    },
    "logFormat": "json",
    "spark": {
        "master": "k8s://https://kubernetes.default.svc",
        "driverMemory": "4g",
        "conf": {"spark.executor.instances": "2", "spark.sql.shuffle.partitions": "16"},
        "kubernetes": {"enabled": True},
        "ui": {"enabled": True, "port": 4050},
        "eventLogDir": "s3a://logs/spark-events",
        "historyUrl": "http://spark-history:18080",
        "logRetentionDays": 3,
        "poolModes": {"big": "application"},
        "applications": {
            "master": "yarn",
            "deployMode": "cluster",
            "driverMemory": "2g",
            "maxConcurrent": 2,
            "masterWebUrl": "",
        },
        "yarn": {"resourceManagerUrl": "http://rm.hadoop:8088"},
    },
    "hadoop": {"conf": {"yarn-site.xml": "<configuration/>", "core-site.xml": "<configuration/>"}},
    "extraEnv": [
        {"name": "LW_SECRET_SALES_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}}
    ],
    "extraEnvFrom": [{"secretRef": {"name": "s3-credentials"}}],
    "extraVolumes": [{"name": "certs", "secret": {"secretName": "ca"}}],
    "extraVolumeMounts": [{"name": "certs", "mountPath": "/etc/certs", "readOnly": True}],
    "ingress": {
        "enabled": True,
        "className": "nginx",
        "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
        "hosts": [{"host": "lw.example.com", "paths": [{"path": "/", "pathType": "Prefix"}]}],
        "tls": [{"secretName": "lw-tls", "hosts": ["lw.example.com"]}],
    },
    "serviceMonitor": {
        "enabled": True,
        "labels": {"release": "prometheus"},
        "bearerTokenSecret": {"name": "lakewarden-viewer", "key": "token"},
    },
    "metrics": {"public": False, "maxTables": 500},
    "grafanaDashboard": {
        "enabled": True,
        "label": "grafana_dashboard",
        "labelValue": "1",
        "annotations": {"grafana_folder": "lakewarden"},
    },
    "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/lw"}},
    "api": {
        "replicas": 3,
        "image": "registry.example.com/lakewarden-slim",
        "resources": {"requests": {"cpu": "100m"}},
        "podDisruptionBudget": {"enabled": True, "minAvailable": 2},
    },
    "worker": {"replicas": 3, "resources": {}},
    "scheduler": {
        "replicas": 2,
        "resources": {},
        "maxConcurrentJobs": 2,
        "poolLimits": {"default": 4, "big": 1},
        "poolCapacity": {"big": {"min": 1, "max": 6, "scale_up_wait_s": 20}},
        "poolQuotas": {"big": 30},
    },
    "podAnnotations": {"team": "data"},
    "nodeSelector": {"pool": "lake"},
    "tolerations": [{"key": "lake", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {
                        "matchExpressions": [{"key": "ssd", "operator": "In", "values": ["y"]}]
                    },
                }
            ]
        }
    },
}


def render_refusal(values: dict[str, Any], tmp: Path) -> str:
    with pytest.raises(RenderRefused) as refused:
        render(values, tmp)
    return str(refused.value)


@pytest.mark.parametrize(
    "values, says",
    [
        ({"api": {"replicas": "two"}}, "/api/replicas"),
        ({"api": {"replicas": 2, "resources": {}, "replcias": 3}}, "replcias"),
        ({"shceduler": {}}, "shceduler"),
        ({"spark": {"master": "local[2]", "kubernetes": {"enabeld": True}}}, "enabeld"),
        ({"logLevel": "LOUD"}, "/logLevel"),
        ({"catalogs": [{"name": "x", "type": "glue", "properties": {}}]}, "/catalogs/0/type"),
        # a secret given as a value in a catalog's properties is no string and no reference
        ({"catalogs": [{"name": "x", "type": "jdbc", "properties": {"uri": {"v": 1}}}]}, "uri"),
    ],
)
def test_values_schema_rejects_wrong_types_and_unknown_keys(
    values: dict[str, Any], says: str, tmp_path: Path
) -> None:
    assert says in render_refusal(values, tmp_path)


def test_values_schema_is_strict_everywhere() -> None:
    """additionalProperties: false on every object the chart defines (free-form maps and
    Kubernetes objects excepted: they say what their values must be, or pass through)."""
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                assert node.get("additionalProperties") is False, where
            elif node.get("type") == "object" and not where.endswith("/global"):
                kubernetes = node.get("description", "").startswith("a Kubernetes object")
                assert "additionalProperties" in node or kubernetes, where
            for key, child in node.items():
                walk(child, f"{where}/{key}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{where}/{i}")

    walk(schema, "")
    values = load_yaml(CHART / "values.yaml")
    assert set(values) <= set(schema["properties"])


def test_hadoop_client_files_are_mounted_where_hadoop_conf_dir_points(
    all_on: list[dict[str, Any]], tmp_path: Path
) -> None:
    hadoop = by_kind(all_on, "ConfigMap")["lw-lakewarden-hadoop"]["data"]
    assert set(hadoop) == {"yarn-site.xml", "core-site.xml"}
    for name, c in containers_of(all_on).items():
        if not name.endswith(tuple(LONG_RUNNING)):
            continue
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["HADOOP_CONF_DIR"] == env["YARN_CONF_DIR"] == "/etc/hadoop/conf", name
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["hadoop-conf"] == {
            "name": "hadoop-conf",
            "mountPath": "/etc/hadoop/conf",
            "readOnly": True,
        }
    # The user's own ConfigMap instead: mounted, none made.
    docs = render({"hadoop": {"existingConfigMap": "site-hadoop"}}, tmp_path)
    assert "lw-lakewarden-hadoop" not in by_kind(docs, "ConfigMap")
    volumes = {
        v["name"]: v
        for d in docs
        if d["kind"] == "Deployment"
        for v in d["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes["hadoop-conf"]["configMap"]["name"] == "site-hadoop"


def test_refusals_that_need_the_values_together(tmp_path: Path) -> None:
    assert "tokenSecret" in render_refusal(
        {"catalogs": [{"name": "x", "type": "jdbc", "properties": {}}]}, tmp_path
    )
    assert "bearerTokenSecret" in render_refusal({"serviceMonitor": {"enabled": True}}, tmp_path)
    assert "catalog.uri" in render_refusal({"catalog": {"type": "rest"}}, tmp_path)
    secret = {"name": "s", "key": "k"}
    both = {"spark": {"master": "local[2]", "conf": {"spark.a": "1"}, "confSecret": secret}}
    assert "exclude each other" in render_refusal(both, tmp_path)
    yarn = {"spark": {"master": "local[2]", "applications": {"master": "yarn"}}}
    assert "hadoop.conf" in render_refusal(yarn, tmp_path)
    site = {"hadoop": {"conf": {"yarn-site.xml": "<configuration/>"}}}
    assert "resourceManagerUrl" in render_refusal({**yarn, **site}, tmp_path)


def test_helm_lint_with_every_option_on(tmp_path: Path) -> None:
    helm = _helm_binary()
    if helm is not None:
        values = tmp_path / "all-on.yaml"
        values.write_text(yaml.safe_dump(ALL_ON))
        result = subprocess.run(
            [helm, "lint", "--strict", str(CHART), "-f", str(values)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr
    elif _sdk_available():
        import helm_python

        report = helm_python.lint(str(CHART), ALL_ON, strict=True)
        warnings = [m for m in report["messages"] if m["severity"] >= 2]
        assert not warnings and not report["errors"], report
    else:
        pytest.skip("no `helm` binary on PATH and `helm_python` is not installed")


@pytest.fixture(scope="module")
def all_on(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(ALL_ON, tmp_path_factory.mktemp("all-on"))


def containers_of(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        f"{d['kind']}/{c['name']}": c
        for d in docs
        if d["kind"] in ("Deployment", "Job")
        for c in d["spec"]["template"]["spec"]["containers"]
    }


def test_every_option_on_renders_valid_kubernetes(all_on: list[dict[str, Any]]) -> None:
    """Each manifest validates against the Kubernetes API's own schemas (kubernetes-validate,
    offline and strict: an unknown field fails). The ServiceMonitor and PrometheusRule are
    CRDs: checked by hand (the latter in test_prometheus_rule_is_the_rules_file)."""
    kv = pytest.importorskip("kubernetes_validate")
    kinds = sorted({d["kind"] for d in all_on})
    assert kinds == sorted(
        [
            "ConfigMap",
            "Deployment",
            "Ingress",
            "Job",
            "PodDisruptionBudget",
            "PrometheusRule",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
            "ServiceMonitor",
        ]
    )
    for doc in all_on:
        if doc["kind"] == "ServiceMonitor":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            (endpoint,) = doc["spec"]["endpoints"]
            assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
            assert endpoint["honorLabels"] is True  # the Iceberg `namespace` label kept
            assert endpoint["authorization"]["credentials"] == {
                "name": "lakewarden-viewer",
                "key": "token",
            }
            continue
        if doc["kind"] == "PrometheusRule":
            continue
        try:
            kv.validate(doc, "1.30.0", strict=True)
        except kv.ValidationError as exc:
            raise AssertionError(f"{doc['kind']}/{doc['metadata']['name']}: {exc}") from exc


def test_defaults_render_valid_kubernetes(tmp_path: Path) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    for doc in render({}, tmp_path):
        kv.validate(doc, "1.30.0", strict=True)


def test_pods_are_locked_down_with_writable_dirs_mounted(all_on: list[dict[str, Any]]) -> None:
    for doc in all_on:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert sc["capabilities"]["drop"] == ["ALL"]
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            assert "/tmp" in mounts, c["name"]
            if c["name"] in LONG_RUNNING | {"migrate"}:
                assert {"/tmp", "/var/lib/lakewarden", "/home/lakewarden", "/warehouse"} <= mounts
                assert "/etc/certs" in mounts  # extraVolumeMounts
        volumes = {v["name"]: v for v in pod["volumes"]}
        for name in {m["name"] for c in pod["containers"] for m in c["volumeMounts"]}:
            assert name in volumes, f"{doc['metadata']['name']} mounts undeclared volume {name}"


def test_worker_and_scheduler_probe_their_heartbeat(all_on: list[dict[str, Any]]) -> None:
    deployments = by_kind(all_on, "Deployment")
    for role in ("worker", "scheduler"):
        c = deployments[f"lw-lakewarden-{role}"]["spec"]["template"]["spec"]["containers"][0]
        check = ["lakewarden", "check", "--role", role]
        assert c["readinessProbe"]["exec"]["command"] == check
        assert c["startupProbe"]["exec"]["command"] == check
        assert c["livenessProbe"]["exec"]["command"] == [*check, "--liveness"]
        # the probe's own timeout covers its database connect timeout (5 s)
        assert c["readinessProbe"]["timeoutSeconds"] >= 6
    # the check parses what the probe passes
    import typer.main

    from cli.main import app

    command = typer.main.get_command(app).get_command(None, "check")  # type: ignore[attr-defined]
    assert command is not None
    args = command.make_context("check", ["--role", "worker", "--liveness"]).params
    assert args["role"] == "worker" and args["liveness"]


def test_pdbs_and_topology_spread(all_on: list[dict[str, Any]]) -> None:
    pdbs = by_kind(all_on, "PodDisruptionBudget")
    deployments = by_kind(all_on, "Deployment")
    assert set(pdbs) == {f"lw-lakewarden-{c}" for c in LONG_RUNNING}
    assert pdbs["lw-lakewarden-api"]["spec"]["minAvailable"] == 2
    assert pdbs["lw-lakewarden-scheduler"]["spec"]["maxUnavailable"] == 1
    for component in LONG_RUNNING:
        dep = deployments[f"lw-lakewarden-{component}"]
        labels = dep["spec"]["selector"]["matchLabels"]
        assert pdbs[f"lw-lakewarden-{component}"]["spec"]["selector"]["matchLabels"] == labels
        spread = dep["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert {s["topologyKey"] for s in spread} == {
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
        }
        assert all(s["labelSelector"]["matchLabels"] == labels for s in spread)
    api = deployments["lw-lakewarden-api"]["spec"]
    assert api["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_spark_on_kubernetes_rbac_and_driver(all_on: list[dict[str, Any]]) -> None:
    (role,) = by_kind(all_on, "Role").values()
    (rule,) = role["rules"]
    assert set(rule["resources"]) == {"pods", "services", "configmaps", "persistentvolumeclaims"}
    assert {"create", "delete", "get", "list", "watch"} <= set(rule["verbs"])
    (binding,) = by_kind(all_on, "RoleBinding").values()
    (sa,) = by_kind(all_on, "ServiceAccount").values()
    assert binding["subjects"][0]["name"] == sa["metadata"]["name"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    deployments = by_kind(all_on, "Deployment")
    for component in LONG_RUNNING:
        pod = deployments[f"lw-lakewarden-{component}"]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == sa["metadata"]["name"]
        # only the Spark driver talks to the API server
        assert pod["automountServiceAccountToken"] is (component == "scheduler")
    scheduler = deployments["lw-lakewarden-scheduler"]["spec"]["template"]["spec"]
    env = scheduler["containers"][0]["env"]
    names = [e["name"] for e in env]
    # $(POD_IP) expands only from a variable defined earlier in the list
    assert names.index("POD_IP") < names.index("LAKEWARDEN_SPARK_CONF")
    conf = json.loads(next(e["value"] for e in env if e["name"] == "LAKEWARDEN_SPARK_CONF"))
    assert conf["spark.driver.host"] == "$(POD_IP)"
    assert conf["spark.kubernetes.namespace"] == "lake"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == sa["metadata"]["name"]
    assert conf["spark.executor.instances"] == "2"  # the values' conf kept
    ports = {p["containerPort"] for p in scheduler["containers"][0]["ports"]}
    assert {int(conf["spark.driver.port"]), int(conf["spark.blockManager.port"])} <= ports


def test_rbac_off_by_default(tmp_path: Path) -> None:
    docs = render({}, tmp_path)
    assert not by_kind(docs, "Role") and not by_kind(docs, "RoleBinding")
    for dep in by_kind(docs, "Deployment").values():
        assert dep["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert not by_kind(docs, "Ingress") and not by_kind(docs, "ServiceMonitor")
    assert not by_kind(docs, "PrometheusRule")
    assert set(by_kind(docs, "ConfigMap")) == {"lw-lakewarden"}  # no dashboard


def test_settings_as_values(all_on: list[dict[str, Any]]) -> None:
    """Catalog, alert sinks and Spark settings reach every process as LAKEWARDEN_* env: plain
    ones in the ConfigMap, secrets only as secretKeyRefs."""
    from lakewarden.settings import Settings

    data = by_kind(all_on, "ConfigMap")["lw-lakewarden"]["data"]
    assert data["LAKEWARDEN_CATALOG_TYPE"] == "jdbc"
    assert data["LAKEWARDEN_SPARK_MASTER"] == "k8s://https://kubernetes.default.svc"
    assert data["LAKEWARDEN_SPARK_DRIVER_MEMORY"] == "4g"
    assert json.loads(data["LAKEWARDEN_POOL_LIMITS"]) == {"default": 4, "big": 1}
    assert json.loads(data["LAKEWARDEN_POOL_QUOTAS"]) == {"big": 30}
    capacity = json.loads(data["LAKEWARDEN_POOL_CAPACITY"])
    assert capacity == {"big": {"min": 1, "max": 6, "scale_up_wait_s": 20}}
    assert Settings(pool_capacity=capacity).pool_capacity["big"].max == 6  # the names it reads
    assert data["LAKEWARDEN_METRICS_MAX_TABLES"] == "500"
    assert data["LAKEWARDEN_ALERT_RESEND_INTERVAL_S"] == "45"
    assert data["LAKEWARDEN_LOG_FORMAT"] == "json"
    assert data["LAKEWARDEN_SPARK_UI_ENABLED"] == "true"
    assert data["LAKEWARDEN_SPARK_UI_PORT"] == "4050"
    assert data["LAKEWARDEN_SPARK_EVENT_LOG_DIR"] == "s3a://logs/spark-events"
    assert data["LAKEWARDEN_SPARK_HISTORY_URL"] == "http://spark-history:18080"
    assert data["LAKEWARDEN_SPARK_LOG_RETENTION_DAYS"] == "3"
    assert json.loads(data["LAKEWARDEN_POOL_MODES"]) == {"big": "application"}
    assert data["LAKEWARDEN_APPLICATION_MASTER"] == "yarn"
    assert data["LAKEWARDEN_APPLICATION_DEPLOY_MODE"] == "cluster"
    assert data["LAKEWARDEN_APPLICATION_DRIVER_MEMORY"] == "2g"
    assert data["LAKEWARDEN_MAX_CONCURRENT_APPLICATIONS"] == "2"
    assert data["LAKEWARDEN_YARN_RESOURCEMANAGER_URL"] == "http://rm.hadoop:8088"
    assert "LAKEWARDEN_SPARK_MASTER_WEB_URL" not in data
    ports = containers_of(all_on)["Deployment/scheduler"]["ports"]
    assert {"name": "spark-ui", "containerPort": 4050, "protocol": "TCP"} in ports
    assert "LAKEWARDEN_SPARK_JARS" not in data  # the image's baked-in jars apply
    known = {f"LAKEWARDEN_{name.upper()}" for name in Settings.model_fields}
    assert set(data) <= known, set(data) - known
    for name, c in containers_of(all_on).items():
        if not name.endswith(tuple(LONG_RUNNING | {"migrate"})):
            continue
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"]
            for e in c["env"]
            if "secretKeyRef" in e.get("valueFrom", {})
        }
        assert refs["LAKEWARDEN_CATALOG_DATABASE_URL"] == {"name": "catalog-db", "key": "url"}
        assert refs["LAKEWARDEN_ALERT_SLACK_URL"] == {"name": "alerts", "key": "slack"}
        assert refs["LAKEWARDEN_ALERT_WEBHOOK_URL"]["key"] == "webhook"
        assert refs["LAKEWARDEN_ALERT_ALERTMANAGER_URL"]["key"] == "alertmanager"
        plain = {e["name"] for e in c["env"] if "value" in e}
        assert not plain & {"LAKEWARDEN_DATABASE_URL", "LAKEWARDEN_ALERT_SLACK_URL"}, name


def test_ingress_and_api_image(all_on: list[dict[str, Any]]) -> None:
    (ingress,) = by_kind(all_on, "Ingress").values()
    assert ingress["spec"]["ingressClassName"] == "nginx"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    (svc,) = by_kind(all_on, "Service").values()
    assert backend == {"name": svc["metadata"]["name"], "port": {"name": "http"}}
    containers = containers_of(all_on)
    assert containers["Deployment/api"]["image"] == "registry.example.com/lakewarden-slim:0.1.0"
    assert containers["Deployment/scheduler"]["image"] == "registry.example.com/lakewarden:0.1.0"


def test_catalogs_hook(all_on: list[dict[str, Any]]) -> None:
    jobs = by_kind(all_on, "Job")
    job = jobs["lw-lakewarden-catalogs"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    c = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    assert env["API_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "lakewarden-admin",
        "key": "token",
    }
    assert env["API_URL"]["value"] == "http://lw-lakewarden-api:8080"
    config = by_kind(all_on, "ConfigMap")["lw-lakewarden-catalogs"]
    assert json.loads(config["data"]["catalogs.json"]) == ALL_ON["catalogs"]
    script = (CHART / "files" / "register_catalogs.py").read_text()
    assert config["data"]["register_catalogs.py"].strip() == script.strip()
    assert c["command"] == ["python", "/hook/register_catalogs.py"]


def test_compose_file_matches_the_compose_spec(compose: dict[str, Any]) -> None:
    """Docker Compose's own JSON schema (the compose-spec, vendored by check-jsonschema):
    what `docker compose config` checks first, without Docker."""
    pytest.importorskip("check_jsonschema")
    import importlib.resources

    import jsonschema

    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads(vendor.joinpath("compose-spec.json").read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=str)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


# --- Monitoring: the Grafana dashboard and the Prometheus rules ---------------------------------
# (That every expression names only metrics /metrics exports: tests/integration/test_metrics.py.
# promtool is not installed here, so the rules are checked by structure, not by promtool.)

DASHBOARD = CHART / "files" / "grafana-dashboard.json"
RULES = CHART / "files" / "prometheus-rules.yaml"
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def rule_exprs() -> list[str]:
    return [r["expr"] for g in load_yaml(RULES)["groups"] for r in g["rules"]]


def balanced(expr: str) -> bool:
    """Brackets pair up outside string literals (a cheap syntax check in place of promtool)."""
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr):
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    return not stack


def test_grafana_dashboard_parses_and_every_panel_queries() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "lakewarden" and dashboard["title"]
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in dashboard["panels"]:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}" and target["refId"]
            assert balanced(target["expr"]), target["expr"]
    assert len(dashboard_exprs()) >= 10


def test_prometheus_rules_structure() -> None:
    rules = load_yaml(RULES)
    assert set(rules) == {"groups"}
    names = []
    for group in rules["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and group["name"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert re.fullmatch(r"Lakewarden[A-Z][A-Za-z]+", rule["alert"]), rule["alert"]
            names.append(rule["alert"])
            assert isinstance(rule["expr"], str) and balanced(rule["expr"]), rule["alert"]
            assert DURATION.match(rule["for"]), rule["alert"]
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}
            assert {"summary", "description", "runbook"} <= set(rule["annotations"])
            assert all(isinstance(v, str) for v in rule["annotations"].values())
    assert len(names) == len(set(names)), "alert names are unique"


def test_grafana_dashboard_config_map(all_on: list[dict[str, Any]]) -> None:
    cm = by_kind(all_on, "ConfigMap")["lw-lakewarden-grafana-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "lakewarden"}
    assert json.loads(cm["data"]["lakewarden.json"]) == json.loads(DASHBOARD.read_text())


def test_prometheus_rule_is_the_rules_file(all_on: list[dict[str, Any]]) -> None:
    (rule,) = by_kind(all_on, "PrometheusRule").values()
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["spec"] == load_yaml(RULES)  # Prometheus's {{ $labels }} left to Prometheus


def test_rendered_regions_get_a_scheduler_deployment_each(tmp_path: Path) -> None:
    """scheduler.regions: one scheduler Deployment per region (its own selector, pinned to
    its data center), LAKEWARDEN_REGION on each, LAKEWARDEN_REGIONS for every process; the
    default region's Deployment keeps its name and selector (an upgrade does not churn)."""
    region = {"name": "eu-west", "replicas": 3, "nodeSelector": {"dc": "eu"}}
    docs = render({"scheduler": {"regions": [region]}}, tmp_path)
    deployments = by_kind(docs, "Deployment")
    default, eu = (
        deployments["lw-lakewarden-scheduler"],
        deployments["lw-lakewarden-scheduler-eu-west"],
    )

    def region_env(dep: dict[str, Any]) -> str:
        env = {
            e["name"]: e.get("value")
            for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        return str(env["LAKEWARDEN_REGION"])

    assert (region_env(default), region_env(eu)) == ("default", "eu-west")
    assert default["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "scheduler"
    assert (
        eu["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "scheduler-eu-west"
    )
    assert (default["spec"]["replicas"], eu["spec"]["replicas"]) == (2, 3)
    assert eu["spec"]["template"]["spec"]["nodeSelector"] == {"dc": "eu"}
    (config,) = by_kind(docs, "ConfigMap").values()
    assert json.loads(config["data"]["LAKEWARDEN_REGIONS"]) == ["default", "eu-west"]
    assert "lw-lakewarden-scheduler-eu-west" in by_kind(docs, "PodDisruptionBudget")
    # No regions: the one scheduler Deployment as before, and no LAKEWARDEN_REGIONS.
    plain = render({}, tmp_path)
    assert [n for n in by_kind(plain, "Deployment") if "scheduler" in n] == [
        "lw-lakewarden-scheduler"
    ]
    assert "LAKEWARDEN_REGIONS" not in next(iter(by_kind(plain, "ConfigMap").values()))["data"]
