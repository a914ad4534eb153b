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
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse deployment files")

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
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
    assert list(stages) == ["base", "jars", "slim", "full"]
    assert stages["base"][0] == ("FROM", "python:3.11-slim-bookworm AS base")
    for target in ("slim", "full"):
        instr = stages[target]
        assert instr[0] == ("FROM", f"base AS {target}")
        assert ("ENTRYPOINT", '["lakewarden"]') in instr
        assert [rest for op, rest in instr if op == "CMD"][-1] == '["api"]'
        user = [rest for op, rest in instr if op == "USER"][-1]
        assert user.split(":")[0] not in {"root", "0"}
    slim_runs = " ".join(rest for op, rest in stages["slim"] if op == "RUN")
    assert "pip install --no-cache-dir ." in slim_runs
    assert "openjdk" not in slim_runs and "[spark" not in slim_runs
    full_runs = " ".join(rest for op, rest in stages["full"] if op == "RUN")
    for pkg in ("openjdk-17-jre-headless", "libpostgresql-jdbc-java"):
        assert pkg in full_runs
    assert 'pip install --no-cache-dir ".[spark,embedded]"' in full_runs


def test_dockerfile_bakes_the_iceberg_jars_it_names() -> None:
    """The jars stage runs the offline assembly; the full image's LAKEWARDEN_SPARK_JARS names
    exactly what that assembly builds (lakewarden/spark/jars.py), so no Maven at run time."""
    from lakewarden.spark import jars

    stages = dockerfile_stages()
    jar_runs = " ".join(rest for op, rest in stages["jars"] if op == "RUN")
    assert "offline_assembly" in jar_runs and "libjarjar-java" in jar_runs
    assert ("COPY", "--from=jars /opt/lakewarden/jars/ /opt/lakewarden/jars/") in stages["full"]
    env = " ".join(rest for op, rest in stages["full"] if op == "ENV")
    named = re.search(r"LAKEWARDEN_SPARK_JARS=(\S+)", env)
    assert named is not None
    assert named.group(1).split(",") == [
        f"/opt/lakewarden/jars/{jars.ICEBERG_RUNTIME}",
        f"/opt/lakewarden/jars/iceberg-shaded-jackson-{jars.JACKSON_VERSION}.jar",
        "/opt/lakewarden/jars/iceberg-shaded-httpclient5.jar",
        *jars.PG_JDBC_CANDIDATES,
    ]
    assert "SPARK_PACKAGES" not in DOCKERFILE.read_text()


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
    assert "/readyz" in " ".join(api["healthcheck"]["test"])
    assert all(":" not in str(p) for p in api["ports"]), "replicas cannot share a host port"
    for role in ("worker", "scheduler"):
        assert services[role]["healthcheck"]["test"][1:] == ["lakewarden", "check", "--role", role]
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
    envs = [svc["environment"] for svc in services.values()]
    assert all(env == envs[0] for env in envs), "lakewarden services should share one env"
    env = envs[0]
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


def test_compose_config_validates() -> None:
    cmd = _compose_command()
    if cmd is None:
        pytest.skip(
            "Docker Compose v2 is not installed (neither `docker compose` nor docker-compose)"
        )
    result = subprocess.run(
        [*cmd, "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr


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


def _render_with_binary(helm: str, values: dict[str, Any], tmp: Path) -> str:
    values_file = tmp / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = subprocess.run(
        [helm, "template", "lw", str(CHART), "--namespace", "lake", "-f", str(values_file)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _render_with_sdk(values: dict[str, Any]) -> str:
    import helm_python

    with helm_python.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name="lw", namespace="lake", is_install=True)
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
