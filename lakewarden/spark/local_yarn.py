"""A YARN (one ResourceManager, one NodeManager) started on this machine from Hadoop's own
jars, on loopback and free ports: for tests and benchmarks, as `local_hdfs` starts HDFS.

The daemons are Hadoop's real ones (`...resourcemanager.ResourceManager` /
`...nodemanager.NodeManager`), each a JVM of its own, as a real cluster runs them (rather
than MiniYARNCluster in one JVM, which has no `main` to start it with and would share one
heap and one failure between the two; two JVMs start in ~12 s on 2 busy cores). Their
classes come from `hadoop-client-minicluster` (jars.lock's `server-hadoop`, as for HDFS)
and BouncyCastle (`server-yarn`, which it leaves out), the rest of the classpath from
PySpark's jars/.

`conf_dir` holds the yarn-site.xml and core-site.xml a client reads (`HADOOP_CONF_DIR`):
spark-submit's `--master yarn` finds the ResourceManager there. The file system is this
machine's (`file:///`): the NodeManager runs on the same host, so an application's staged
files need no upload. Containers are small (the node offers `memory_mb`, a container at
least 256 MB) and their memory is not policed (the tests' JVMs are what they are).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from lakewarden.settings import Settings
from lakewarden.spark import yarn
from lakewarden.spark.jars import server_jars
from lakewarden.spark.local_cluster import (
    HOST,
    end_daemon,
    free_port,
    java_home,
    launch_daemon,
    spark_home,
    wait_for_daemons,
)
from lakewarden.spark.local_hdfs import JAR_GROUP, site_xml

RM_CLASS = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
NM_CLASS = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
START_ATTEMPTS = 3  # a daemon that exits while starting (a port taken meanwhile): again
HEAP = "-Xmx256m"
# Java 17: the daemons' web apps (Guice, Jersey 1) reflect into java.base.
ADD_OPENS = [
    f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
    for pkg in (
        "java.lang",
        "java.lang.reflect",
        "java.util",
        "java.util.concurrent",
        "java.io",
        "java.net",
        "java.nio",
        "sun.nio.ch",
    )
]
YARN_JAR_GROUP = "server-yarn"  # BouncyCastle, which the ResourceManager needs

LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
logger.rmapp.name = org.apache.hadoop.yarn.server.resourcemanager.RMAuditLogger
logger.rmapp.level = info
"""


class YarnStartError(RuntimeError):
    pass


@dataclass
class LocalYarn:
    """A running ResourceManager and NodeManager. `web_url` is the ResourceManager's web
    address (its REST API: `/ws/v1/cluster/...`); `conf_dir` a client's HADOOP_CONF_DIR."""

    web_url: str
    base_dir: Path
    conf_dir: Path
    classpath: str
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    def ready(self) -> bool:
        """The ResourceManager is started and counts a live NodeManager."""
        with contextlib.suppress(yarn.ResourceManagerUnreachable):
            yarn.check_ready(self.web_url)
            return yarn.active_nodes(self.web_url) >= 1
        return False

    def app(self, app_id: str) -> dict[str, Any] | None:
        return yarn.app_report(self.web_url, app_id)

    def client_env(self) -> dict[str, str]:
        """What spark-submit needs in its environment to find this ResourceManager."""
        return {"HADOOP_CONF_DIR": str(self.conf_dir), "YARN_CONF_DIR": str(self.conf_dir)}

    def application_values(
        self, deploy_mode: str = "client", *, executor_memory: str = "512m"
    ) -> dict[str, str]:
        """The settings (as `benchmarks.processes.process_env` takes them) that run a
        scheduler's submitted applications here: small containers, one executor, and
        PySpark's own jars as YARN's Spark jars (`local:`: already on this node, so
        nothing is zipped and uploaded per application)."""
        return {
            "application_master": "yarn",
            "application_deploy_mode": deploy_mode,
            "yarn_resourcemanager_url": self.web_url,
            "application_driver_memory": "512m",
            "spark_conf": json.dumps(
                {
                    "spark.yarn.jars": f"local:{spark_home() / 'jars'}/*",
                    "spark.executor.instances": "1",
                    "spark.executor.memory": executor_memory,
                    "spark.yarn.am.memory": "256m",
                }
            ),
        }

    def stop(self) -> None:
        for name in ("nodemanager", "resourcemanager"):
            proc = self.processes.pop(name, None)
            if proc is not None:
                end_daemon(proc)  # the NodeManager's group holds its containers too

    def _daemon(self, main_class: str, name: str) -> subprocess.Popen[bytes]:
        home = java_home()
        java = f"{home}/bin/java" if home else "java"
        argv = [java, HEAP, *ADD_OPENS, "-cp", self.classpath, main_class]
        env = {
            **os.environ,
            "HADOOP_CONF_DIR": str(self.conf_dir),
            "YARN_CONF_DIR": str(self.conf_dir),
        }
        if home:
            env["JAVA_HOME"] = home  # a container's launch script runs $JAVA_HOME/bin/java
        return launch_daemon(argv, env, self.base_dir / "logs" / f"{name}.out")

    def __enter__(self) -> LocalYarn:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def yarn_site(base_dir: Path, ports: dict[str, int], memory_mb: int, vcores: int) -> str:
    rm, nm = f"{HOST}:", f"{HOST}:"
    return site_xml(
        {
            "yarn.resourcemanager.hostname": HOST,
            "yarn.resourcemanager.address": f"{rm}{ports['rm']}",
            "yarn.resourcemanager.scheduler.address": f"{rm}{ports['rm_scheduler']}",
            "yarn.resourcemanager.resource-tracker.address": f"{rm}{ports['rm_tracker']}",
            "yarn.resourcemanager.admin.address": f"{rm}{ports['rm_admin']}",
            "yarn.resourcemanager.webapp.address": f"{rm}{ports['rm_web']}",
            # FIFO: no queue configuration, and no cap on the share of the node that
            # ApplicationMasters may take (the capacity scheduler's 10% would starve one).
            "yarn.resourcemanager.scheduler.class": (
                "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler"
            ),
            "yarn.resourcemanager.nodemanagers.heartbeat-interval-ms": "250",
            "yarn.resourcemanager.recovery.enabled": "false",
            "yarn.resourcemanager.am.max-attempts": "1",
            "yarn.scheduler.minimum-allocation-mb": "256",
            "yarn.scheduler.maximum-allocation-mb": str(memory_mb),
            "yarn.nodemanager.hostname": HOST,
            "yarn.nodemanager.address": f"{nm}{ports['nm']}",
            "yarn.nodemanager.localizer.address": f"{nm}{ports['nm_localizer']}",
            "yarn.nodemanager.webapp.address": f"{nm}{ports['nm_web']}",
            "yarn.nodemanager.resource.memory-mb": str(memory_mb),
            "yarn.nodemanager.resource.cpu-vcores": str(vcores),
            "yarn.nodemanager.pmem-check-enabled": "false",
            "yarn.nodemanager.vmem-check-enabled": "false",
            "yarn.nodemanager.local-dirs": str(base_dir / "nm-local"),
            "yarn.nodemanager.log-dirs": str(base_dir / "nm-logs"),
            # A full test disk must not mark the only node unhealthy.
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": (
                "100"
            ),
            "yarn.nodemanager.disk-health-checker.min-free-space-per-disk-mb": "0",
            "yarn.nodemanager.delete.debug-delay-sec": "600",  # containers' logs, to read
            "yarn.nodemanager.recovery.enabled": "false",
            "yarn.log-aggregation-enable": "false",
        }
    )


def start_yarn(
    base_dir: Path,
    settings: Settings,
    *,
    memory_mb: int = 6144,
    vcores: int = 4,
    timeout_s: float = START_TIMEOUT_S,
) -> LocalYarn:
    """Start a ResourceManager and a NodeManager under `base_dir` (conf/, logs/, nm-local/,
    nm-logs/) and wait until the NodeManager is registered. The jars come through
    jars.lock. YarnStartError with the daemons' log tails if that does not happen within
    `timeout_s`; nothing is left running then."""
    if java_home() is None:
        raise YarnStartError("no Java: set JAVA_HOME or put java on PATH")
    base_dir = base_dir.resolve()
    for sub in ("conf", "logs", "nm-local", "nm-logs"):
        (base_dir / sub).mkdir(parents=True, exist_ok=True)
    conf = base_dir / "conf"
    (conf / "core-site.xml").write_text(
        site_xml({"fs.defaultFS": "file:///", "hadoop.tmp.dir": str(base_dir / "tmp")})
    )
    (conf / "log4j2.properties").write_text(LOG4J2)
    # The daemons' web apps look for webapps/<name> on the classpath; the minicluster jar
    # has HDFS's but not YARN's (their pages are not needed: the REST API is).
    for app in ("cluster", "node", "yarn"):
        (conf / "webapps" / app).mkdir(parents=True, exist_ok=True)
    jars = [str(p) for group in (JAR_GROUP, YARN_JAR_GROUP) for p in server_jars(settings, group)]
    names = ("rm", "rm_scheduler", "rm_tracker", "rm_admin", "rm_web", "nm", "nm_localizer")
    for attempt in range(1, START_ATTEMPTS + 1):
        # Free when asked, but another process may take a port before the JVMs bind it (or
        # the NodeManager, dialling the ResourceManager's port while it starts, meets
        # something else there: "RPC response exceeds maximum data length"): a daemon that
        # exits while starting is started again, on other ports.
        ports = {name: free_port() for name in (*names, "nm_web")}
        (conf / "yarn-site.xml").write_text(yarn_site(base_dir, ports, memory_mb, vcores))
        cluster = LocalYarn(
            web_url=f"http://{HOST}:{ports['rm_web']}",
            base_dir=base_dir,
            conf_dir=conf,
            classpath=":".join([str(conf), *jars, str(spark_home() / "jars" / "*")]),
        )
        try:
            cluster.processes["resourcemanager"] = cluster._daemon(RM_CLASS, "resourcemanager")
            cluster.processes["nodemanager"] = cluster._daemon(NM_CLASS, "nodemanager")
            _wait(cluster, timeout_s)
        except YarnStartError as exc:
            cluster.stop()
            if attempt == START_ATTEMPTS or "exited with code" not in str(exc):
                raise
            log.warning("YARN did not start (attempt %d): %s", attempt, str(exc)[:300])
            continue
        except BaseException:
            cluster.stop()
            raise
        return cluster
    raise AssertionError("unreachable")  # the last attempt returned or raised


def _wait(yarn: LocalYarn, timeout_s: float) -> None:
    wait_for_daemons(
        yarn.processes,
        yarn.ready,
        yarn.base_dir / "logs",
        timeout_s,
        "no NodeManager registered",
        YarnStartError,
    )
