"""A standalone ZooKeeper for tests and benchmarks: ZooKeeper 3.6.3's server from PySpark's
own jars (`zookeeper-3.6.3.jar` holds the server, `ZooKeeperServerMain`; nothing to
fetch), on loopback and a free port, its data under a directory of the caller's: the lock
server Hudi's `ZookeeperBasedLockProvider` takes (lakewarden.formats.hudi.lock).

    with zookeeper(work_dir) as zk:
        zk.url  # "127.0.0.1:<port>", Hudi's hoodie.write.lock.zookeeper.url
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lakewarden.spark.local_cluster import (
    HOST,
    end_daemon,
    free_port,
    java_home,
    launch_daemon,
    spark_home,
)
from lakewarden.spark.local_metastore import LOG4J2

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
START_TIMEOUT_S = 60.0


@dataclass
class ZooKeeper:
    port: int
    log_path: Path
    start_s: float  # how long it took to answer

    @property
    def url(self) -> str:
        return f"{HOST}:{self.port}"


def answers(port: int) -> bool:
    """ZooKeeper's `ruok` four-letter word answered `imok`."""
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


@contextmanager
def zookeeper(work: Path) -> Iterator[ZooKeeper]:
    """A ZooKeeper server started and stopped around the block (its data in `work`)."""
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf, log4j = work / "zoo.cfg", work / "log4j2.properties"
    conf.write_text(
        f"tickTime=2000\ndataDir={work / 'data'}\nclientPort={port}\n"
        f"clientPortAddress={HOST}\nadmin.enableServer=false\n"
        "4lw.commands.whitelist=ruok\n"
    )
    log4j.write_text(LOG4J2)
    started = time.monotonic()
    proc: subprocess.Popen[bytes] = launch_daemon(
        [
            str(Path(java_home() or "/usr") / "bin" / "java"),
            "-Xmx128m",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile=file:{log4j}",
            "-cp",
            f"{spark_home() / 'jars'}/*",
            MAIN_CLASS,
            str(conf),
        ],
        dict(os.environ),
        work / "zookeeper.log",
    )
    try:
        while not answers(port):
            if proc.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
                raise RuntimeError(f"ZooKeeper did not start; its log: {work / 'zookeeper.log'}")
            time.sleep(0.2)
        yield ZooKeeper(port, work / "zookeeper.log", time.monotonic() - started)
    finally:
        end_daemon(proc)
