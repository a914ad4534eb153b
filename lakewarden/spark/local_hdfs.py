"""An HDFS (one NameNode, one DataNode) started on this machine from Hadoop's own jars, on
loopback and free ports: for tests and benchmarks, as `local_cluster` starts Spark's.

The daemons are Hadoop's real ones (`org.apache.hadoop.hdfs.server.namenode.NameNode` /
`...datanode.DataNode`), each a JVM of its own, so a test can stop and restart the
NameNode under a running job. Their classes come from `hadoop-client-minicluster` (pinned
in jars.lock, group `server-hadoop`, at the version of PySpark's own Hadoop client; the
same jar holds YARN's ResourceManager and NodeManager), the rest of the classpath from
PySpark's jars/ (hadoop-client-api/runtime, log4j 2). Java 17 runs them as they are.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from xml.sax.saxutils import escape

import httpx

from lakewarden.settings import Settings
from lakewarden.spark.jars import server_jars
from lakewarden.spark.local_cluster import (
    HOST,
    _tail,
    end_daemon,
    free_port,
    java_home,
    launch_daemon,
    spark_home,
    wait_for_daemons,
)

NAMENODE_CLASS = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE_CLASS = "org.apache.hadoop.hdfs.server.datanode.DataNode"
START_TIMEOUT_S = 120.0
JAR_GROUP = "server-hadoop"
HEAP = "-Xmx384m"

LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
logger.startup.name = org.apache.hadoop.hdfs.server
logger.startup.level = info
"""


class HdfsStartError(RuntimeError):
    pass


def site_xml(properties: dict[str, str]) -> str:
    """A Hadoop configuration file (core-site.xml, hdfs-site.xml) of `properties`."""
    body = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in properties.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


@dataclass
class LocalHdfs:
    """A running NameNode and DataNode. `url` is the file system's (`hdfs://127.0.0.1:P`);
    `conf_dir` holds its core-site.xml and hdfs-site.xml (a client's HADOOP_CONF_DIR)."""

    url: str
    web_url: str
    base_dir: Path
    conf_dir: Path
    classpath: str
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    @property
    def netloc(self) -> str:
        return self.url.removeprefix("hdfs://")

    def jmx(self, bean: str) -> dict[str, Any]:
        """One of the NameNode's JMX beans (`FSNamesystemState`, `NameNodeInfo`, ...)."""
        body = httpx.get(
            f"{self.web_url}/jmx", params={"qry": f"Hadoop:service=NameNode,name={bean}"}
        ).json()
        beans: list[dict[str, Any]] = body.get("beans", [])
        return beans[0] if beans else {}

    def ready(self) -> bool:
        """Out of safe mode with a live DataNode: files can be written."""
        with contextlib.suppress(httpx.HTTPError, ValueError):
            state = self.jmx("FSNamesystemState")
            return int(state.get("NumLiveDataNodes", 0)) >= 1 and not self.jmx("NameNodeInfo").get(
                "Safemode"
            )
        return False

    def stop_namenode(self) -> None:
        """End the NameNode (SIGTERM, then SIGKILL): its clients' calls fail from now on."""
        proc = self.processes.pop("namenode", None)
        if proc is not None:
            end_daemon(proc)

    def start_namenode(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the NameNode again on its ports and metadata; wait until files can be
        written (the DataNode re-registers on its next heartbeat)."""
        self.processes["namenode"] = self._daemon(NAMENODE_CLASS, "namenode")
        _wait(self, timeout_s)

    def stop(self) -> None:
        for name in ("datanode", "namenode"):
            proc = self.processes.pop(name, None)
            if proc is not None:
                end_daemon(proc)

    def _daemon(self, main_class: str, name: str, *args: str) -> subprocess.Popen[bytes]:
        home = java_home()
        java = f"{home}/bin/java" if home else "java"
        argv = [java, HEAP, "-cp", self.classpath, main_class, *args]
        env = {**os.environ, "HADOOP_CONF_DIR": str(self.conf_dir)}
        return launch_daemon(argv, env, self.base_dir / "logs" / f"{name}.out")

    def __enter__(self) -> LocalHdfs:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_hdfs(
    base_dir: Path, settings: Settings, *, timeout_s: float = START_TIMEOUT_S
) -> LocalHdfs:
    """Format a NameNode under `base_dir` (conf/, name/, data/, logs/), start it and a
    DataNode, and wait until files can be written. The jars come through jars.lock (fetched
    where the cache lacks them). HdfsStartError with the daemons' log tails if that does
    not happen within `timeout_s`; nothing is left running then."""
    if java_home() is None:
        raise HdfsStartError("no Java: set JAVA_HOME or put java on PATH")
    base_dir = base_dir.resolve()
    for sub in ("conf", "name", "data", "logs"):
        (base_dir / sub).mkdir(parents=True, exist_ok=True)
    rpc, http, dn, dn_http, dn_ipc = (free_port() for _ in range(5))
    conf = base_dir / "conf"
    (conf / "core-site.xml").write_text(
        site_xml({"fs.defaultFS": f"hdfs://{HOST}:{rpc}", "hadoop.tmp.dir": str(base_dir)})
    )
    (conf / "hdfs-site.xml").write_text(
        site_xml(
            {
                "dfs.namenode.name.dir": str(base_dir / "name"),
                "dfs.datanode.data.dir": str(base_dir / "data"),
                "dfs.namenode.rpc-bind-host": HOST,
                "dfs.namenode.http-address": f"{HOST}:{http}",
                "dfs.datanode.address": f"{HOST}:{dn}",
                "dfs.datanode.http.address": f"{HOST}:{dn_http}",
                "dfs.datanode.ipc.address": f"{HOST}:{dn_ipc}",
                "dfs.datanode.hostname": HOST,
                "dfs.replication": "1",
                "dfs.permissions.enabled": "false",
                # A restarted NameNode serves at once, not after 30 s of safe mode.
                "dfs.namenode.safemode.extension": "0",
                "dfs.heartbeat.interval": "1",
                # Small tables' files: a block as small as a test needs.
                "dfs.namenode.fs-limits.min-block-size": "0",
            }
        )
    )
    (conf / "log4j2.properties").write_text(LOG4J2)
    jars = [str(p) for p in server_jars(settings, JAR_GROUP)]
    hdfs = LocalHdfs(
        url=f"hdfs://{HOST}:{rpc}",
        web_url=f"http://{HOST}:{http}",
        base_dir=base_dir,
        conf_dir=conf,
        classpath=":".join([str(conf), *jars, str(spark_home() / "jars" / "*")]),
    )
    try:
        fmt = hdfs._daemon(NAMENODE_CLASS, "format", "-format", "-nonInteractive", "-force")
        if fmt.wait(timeout=timeout_s) != 0:
            raise HdfsStartError(
                "formatting the NameNode failed:\n" + _tail(base_dir / "logs" / "format.out")
            )
        hdfs.processes["namenode"] = hdfs._daemon(NAMENODE_CLASS, "namenode")
        hdfs.processes["datanode"] = hdfs._daemon(DATANODE_CLASS, "datanode")
        _wait(hdfs, timeout_s)
    except BaseException:
        hdfs.stop()
        raise
    return hdfs


def _wait(hdfs: LocalHdfs, timeout_s: float) -> None:
    wait_for_daemons(
        hdfs.processes,
        hdfs.ready,
        hdfs.base_dir / "logs",
        timeout_s,
        "HDFS not writable",
        HdfsStartError,
    )
