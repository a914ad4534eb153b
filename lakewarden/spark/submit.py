"""The command lines that run one job as its own Spark application (`spark-submit`), and
those that ask a Kubernetes cluster about it or kill it. Pure: data in, argv out, tested
without a JVM. (YARN is asked through its ResourceManager's REST API: `spark.yarn`.)

No secret is ever on a command line (any process on the host reads /proc/<pid>/cmdline):
the `--conf`s are `spark_conf`'s, which has none by construction; the credentials reach the
application through its environment (`settings_env`: the child's /proc/<pid>/environ is
readable by its owner only; on Kubernetes, references to a Secret; on YARN in cluster mode,
the ApplicationMaster's environment, from a 0600 properties file) and are set on its
running session by `build_session`, as in the scheduler's own session.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from lakewarden.redact import MASK, is_secret_key, redact, secrets_of
from lakewarden.settings import Settings
from lakewarden.spark.jars import DEFAULT_FAMILY
from lakewarden.spark.session import spark_conf

ENTRY_MODULE = "lakewarden.jobs.application_entry"
CLIENT, CLUSTER = "client", "cluster"
# Set by --master/--name instead (a --conf would be overridden anyway).
_NOT_AS_CONF = ("spark.master", "spark.app.name", "spark.driver.memory")


def spark_submit_path() -> str:
    """PySpark's own `bin/spark-submit` (the Spark the scheduler's session uses)."""
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def application_master(settings: Settings) -> str:
    return settings.application_master or settings.spark_master


def application_settings(settings: Settings) -> Settings:
    """The settings an application runs with: the scheduler's, its master and driver memory
    the application's. (PySpark's session builder sets `spark.master` from them, over
    spark-submit's `--master`: the application would otherwise run on the scheduler's.)"""
    return settings.model_copy(
        update={
            "spark_master": application_master(settings),
            "spark_driver_memory": settings.application_driver_memory,
        }
    )


def is_kubernetes(master: str) -> bool:
    return master.startswith("k8s://")


def is_yarn(master: str) -> bool:
    return master == "yarn"


def is_local(master: str) -> bool:
    return master.startswith("local")


def driver_pod_name(group: str) -> str:
    """The driver pod's name, derived from the job group (task and attempt), so the
    submission id is known before launch: a DNS-1123 label (lowercase, digits, '-',
    at most 63 characters)."""
    name = re.sub(r"[^a-z0-9-]+", "-", group.lower()).strip("-")
    return f"{name[: 63 - len('-driver')]}-driver"


@dataclass(frozen=True)
class Submission:
    """How one job is submitted: its argv, and what is known of it before launch."""

    argv: list[str]
    master: str
    deploy_mode: str
    # Kubernetes: "<namespace>:<driver pod>" (what `--status` and `--kill` take), known
    # before launch. Otherwise None: the launcher records the process it started.
    submission_id: str | None
    # Spark settings that hold secrets (YARN cluster mode: the ApplicationMaster's
    # environment), for the launcher to write to `properties_file` (0600), never argv.
    properties: dict[str, str] = field(default_factory=dict)


def submit_argv(
    settings: Settings,
    control_plane_url: str,
    *,
    spark_submit: str,
    entry: str,
    python: str,
    task_id: int,
    attempt: int,
    group: str,
    family: str = DEFAULT_FAMILY,
    properties_file: str | None = None,
) -> Submission:
    """`spark-submit` for one attempt of a task: its own application named after the job
    group, every `spark_conf` setting (no secrets there), and `entry` (the file of
    `lakewarden.jobs.application_entry`) as the primary resource with `--task-id --attempt`.
    `properties_file`: where the launcher writes `Submission.properties` (if any).
    `family`: the session family whose jars and settings the JVM starts with (a Hudi
    table's job: "hudi")."""
    master = application_master(settings)
    deploy_mode = settings.application_deploy_mode  # client or cluster: Settings checks
    if deploy_mode == CLUSTER and not (is_kubernetes(master) or is_yarn(master)):
        # Spark itself refuses Python applications in cluster mode on a standalone master.
        raise ValueError(
            "cluster deploy mode is for Kubernetes (k8s://...) and YARN (yarn) masters only"
        )
    if is_yarn(master) and not settings.yarn_resourcemanager_url:
        raise ValueError(
            "a yarn master needs yarn_resourcemanager_url (the ResourceManager's web "
            "address, http://host:8088): lakewarden follows and kills applications there"
        )
    # The application's own settings: its master decides whether its driver stays on
    # loopback (a YARN cluster-mode driver bound to 127.0.0.1 is out of its executors' reach).
    app_conf = spark_conf(application_settings(settings), control_plane_url, family)
    conf = {k: v for k, v in app_conf.items() if k not in _NOT_AS_CONF}
    submission_id = None
    resource = entry
    properties: dict[str, str] = {}
    if is_kubernetes(master):
        if not settings.kubernetes_image:
            raise ValueError("a Kubernetes master needs kubernetes_image (the lakewarden image)")
        pod = driver_pod_name(group)
        submission_id = f"{settings.kubernetes_namespace}:{pod}"
        conf.update(
            {
                "spark.kubernetes.container.image": settings.kubernetes_image,
                "spark.kubernetes.namespace": settings.kubernetes_namespace,
                "spark.kubernetes.driver.pod.name": pod,
                # spark-submit returns once the driver pod exists; the scheduler polls.
                "spark.kubernetes.submission.waitAppCompletion": "false",
            }
        )
        conf.update(kubernetes_env_conf(application_settings(settings), control_plane_url))
        # The image holds lakewarden at the same path as the scheduler's (same image).
        resource = f"local://{entry}"
    else:
        # The driver's Python is the scheduler's (lakewarden and PySpark installed); on
        # YARN the executors' and a cluster-mode driver's too, at the same path on the node.
        conf["spark.pyspark.driver.python"] = python
        conf["spark.pyspark.python"] = python
    if is_yarn(master):
        conf.update(yarn_conf(conf))
        if deploy_mode == CLUSTER:
            if not properties_file:
                raise ValueError("YARN cluster mode needs a properties file for its secrets")
            properties = yarn_am_env(application_settings(settings), control_plane_url)
    argv = [spark_submit]
    if properties:
        argv += ["--properties-file", str(properties_file)]
    argv += [
        "--master",
        master,
        "--deploy-mode",
        deploy_mode,
        "--name",
        group,
        "--driver-memory",
        settings.application_driver_memory,
    ]
    for key, value in sorted(conf.items()):
        argv += ["--conf", f"{key}={value}"]
    argv += [resource, "--task-id", str(task_id), "--attempt", str(attempt)]
    return Submission(argv, master, deploy_mode, submission_id, properties)


def yarn_conf(conf: dict[str, str]) -> dict[str, str]:
    """What every application on YARN runs with, unless `spark_conf` says otherwise."""
    defaults = {
        # One ApplicationMaster attempt: a failed attempt is the scheduler's to retry (as a
        # new attempt of the task, under its fence), not YARN's to run again unseen.
        "spark.yarn.maxAppAttempts": "1",
        # spark-submit stays until the application ends (cluster mode too): its exit is
        # the launcher's first word that it did.
        "spark.yarn.submit.waitAppCompletion": "true",
        # A ResourceManager that went away fails the submission in 30 s, not Hadoop's 15 min.
        "spark.hadoop.yarn.resourcemanager.connect.max-wait.ms": "30000",
        "spark.hadoop.yarn.resourcemanager.connect.retry-interval.ms": "1000",
    }
    return {k: v for k, v in defaults.items() if k not in conf}


def yarn_am_env(settings: Settings, db_url: str) -> dict[str, str]:
    """A YARN cluster-mode driver's `LAKEWARDEN_*` environment (it runs in the
    ApplicationMaster's container, not under spark-submit) as
    `spark.yarn.appMasterEnv.X`: secrets included, so for a properties file only. The
    NodeManager writes each into the container's launch script as `export X="value"`
    without escaping: a JSON setting's quotes (or a `$`) must be escaped for that shell."""
    return {
        f"spark.yarn.appMasterEnv.{key}": _for_double_quotes(value)
        for key, value in settings_env(settings, db_url, only_changed=True).items()
    }


def _for_double_quotes(value: str) -> str:
    """`value` as it must stand inside a POSIX shell's double quotes to mean itself."""
    return re.sub(r'([\\"$`])', r"\\\1", value)


def properties_text(properties: dict[str, str], defaults: str = "") -> str:
    """A Java properties file of `properties`, after `defaults` (spark-defaults.conf's text:
    spark-submit reads one properties file, so a given one must carry the defaults too)."""
    lines = [defaults.rstrip("\n")] if defaults.strip() else []
    for key, value in sorted(properties.items()):
        escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        if escaped[:1] in (" ", "\t"):
            escaped = "\\" + escaped
        lines.append(f"{key}={escaped}")
    return "\n".join(lines) + "\n"


def kubernetes_argv(spark_submit: str, master: str, action: str, submission_id: str) -> list[str]:
    """`spark-submit --status|--kill <namespace>:<driver pod>` against a Kubernetes master."""
    if action not in ("status", "kill"):
        raise ValueError(f"action must be status or kill, not {action!r}")
    return [spark_submit, "--master", master, f"--{action}", submission_id]


def kubernetes_env_conf(settings: Settings, db_url: str) -> dict[str, str]:
    """The driver pod's `LAKEWARDEN_*` environment as Spark settings: a plain value as
    `spark.kubernetes.driverEnv.X`, a secret one (a credential, a URL with a password) as a
    reference to the same key of the Kubernetes Secret `kubernetes_secret`, never by value."""
    secrets = secrets_of(settings, db_url)
    conf = {}
    for key, value in settings_env(settings, db_url, only_changed=True).items():
        if is_secret_key(key) or redact(value, secrets) != value:
            if not settings.kubernetes_secret:
                raise ValueError(
                    f"{key} holds a secret: name the Kubernetes Secret that holds it "
                    "(kubernetes_secret) for the driver pod to read it from"
                )
            conf[f"spark.kubernetes.driver.secretKeyRef.{key}"] = (
                f"{settings.kubernetes_secret}:{key}"
            )
        else:
            conf[f"spark.kubernetes.driverEnv.{key}"] = value
    return conf


def settings_env(settings: Settings, db_url: str, *, only_changed: bool = False) -> dict[str, str]:
    """`settings` as the `LAKEWARDEN_*` environment a child process reads them back from
    (the database URL actually used, which settings may not name, included). Holds the
    secrets: for a child's environment only, never its argv."""
    env = {}
    for name, value in settings.model_dump(mode="json", exclude_defaults=only_changed).items():
        if value is None:
            continue
        env[f"LAKEWARDEN_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    env["LAKEWARDEN_DATABASE_URL"] = db_url
    return env


def masked(argv: list[str], secrets: list[str] | None = None) -> list[str]:
    """`argv` fit for a log: any `--conf` value whose key looks secret, any known secret
    value and any URL's credentials masked (defence in depth: none should be there)."""
    out = []
    for arg in argv:
        key, eq, _ = arg.partition("=")
        if eq and is_secret_key(key):
            out.append(f"{key}={MASK}")
        else:
            out.append(redact(arg, secrets or ()))
    return out


def log_secrets(settings: Settings, db_url: str) -> list[str]:
    """The values `masked` hides wherever they appear."""
    return secrets_of(settings, db_url)
