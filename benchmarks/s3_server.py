"""A real S3 server for the tests and the benchmark: S3Proxy (`org.gaul:s3proxy`, pinned in
lakewarden/spark/jars.lock and fetched through `lakewarden.spark.jars` like Spark's jars) on
127.0.0.1, storing objects as plain files under a directory (jclouds' `filesystem` back end).

The files are the objects, so a test can do what S3 itself cannot: age an object by setting
its file's mtime (S3 reports it as LastModified), or look at what is stored without a client.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lakewarden.settings import Settings
from lakewarden.spark.jars import fetch_pinned, pinned

START_TIMEOUT_S = 60.0
ACCESS_KEY = "lwtestaccess"
SECRET_KEY = "lw-test-s3-secret-2f9c1e"  # the test server's own: checked never to leak


@dataclass
class S3Server:
    endpoint: str  # http://127.0.0.1:<port>
    data_dir: Path  # one directory per bucket, one file per object
    access_key: str
    secret_key: str
    log: Path
    conf: Path
    started_in_s: float = 0.0  # what starting it cost (docs/performance.md)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def bucket(self, name: str) -> str:
        """Make bucket `name` (a directory of the back end) and return its s3:// URI."""
        (self.data_dir / name).mkdir(exist_ok=True)
        return f"s3://{name}"

    def object_path(self, uri: str) -> Path:
        """The file that holds the object at `uri` (s3://bucket/key)."""
        return self.data_dir / uri.removeprefix("s3://")

    def start(self) -> None:
        """Start the JVM and wait until it answers."""
        started = time.monotonic()
        with self.log.open("ab") as out:
            self.process = proc = subprocess.Popen(
                ["java", "-Xmx256m", "-jar", str(s3proxy_jar()), "--properties", str(self.conf)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "LOG_LEVEL": "warn"},
            )
        while not _answers(self.endpoint):
            if proc.poll() is not None:
                raise RuntimeError(f"S3Proxy exited with {proc.returncode}: see {self.log}")
            if time.monotonic() - started > START_TIMEOUT_S:
                raise RuntimeError(f"S3Proxy did not answer in {START_TIMEOUT_S:.0f} s: {self.log}")
            time.sleep(0.1)
        self.started_in_s = round(time.monotonic() - started, 2)

    def stop(self, kill: bool = False) -> None:
        """Stop the JVM (SIGTERM; SIGKILL with `kill`, or after 10 s)."""
        proc, self.process = self.process, None
        if proc is None:
            return
        proc.kill() if kill else proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self, down_s: float = 0.0) -> None:
        """Kill the server as a crash would, stay down `down_s`, start it again on the same
        port and directory (the objects are files: they survive, as on a real store)."""
        self.stop(kill=True)
        time.sleep(down_s)
        self.start()


def s3proxy_jar() -> Path:
    """S3Proxy's self-contained jar, fetched once into the jar cache (sha256 checked)."""
    settings = Settings()
    cache = settings.jars_cache_dir / "maven"
    (jar,) = fetch_pinned(cache, settings.maven_repository, [pinned("server-s3proxy")])
    return jar


def free_port() -> int:
    """A port of 127.0.0.1 free now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(endpoint: str) -> bool:
    try:
        urllib.request.urlopen(endpoint, timeout=1).close()
    except urllib.error.HTTPError:
        return True  # 403 to an anonymous request: it is up
    except OSError:
        return False
    return True


@contextmanager
def serve_s3(root: Path, port: int) -> Iterator[S3Server]:
    """S3Proxy on 127.0.0.1:`port` over `root`/data, with AWS v2/v4 signatures checked
    against one key pair; stopped (its process, by pid) on exit."""
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    endpoint = f"http://127.0.0.1:{port}"
    conf = root / "s3proxy.conf"
    conf.touch(0o600)
    conf.write_text(
        "\n".join(
            [
                f"s3proxy.endpoint={endpoint}",
                "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={ACCESS_KEY}",
                f"s3proxy.credential={SECRET_KEY}",
                "jclouds.provider=filesystem",
                f"jclouds.filesystem.basedir={data}",
                "",
            ]
        )
    )
    server = S3Server(endpoint, data, ACCESS_KEY, SECRET_KEY, root / "s3proxy.log", conf)
    try:
        server.start()
        yield server
    finally:
        server.stop()
