"""local_cluster.wait_for_daemons: how the local HDFS and YARN say they came up, or why not."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lakewarden.spark.local_cluster import wait_for_daemons


class StartError(RuntimeError):
    pass


def _daemon(log_dir: Path, name: str, script: str) -> subprocess.Popen[bytes]:
    log = (log_dir / f"{name}.out").open("wb")
    return subprocess.Popen(["sh", "-c", script], stdout=log, stderr=subprocess.STDOUT)


def test_a_daemon_that_exits_is_named_with_every_log_tail(tmp_path: Path) -> None:
    procs = {
        "namenode": _daemon(tmp_path, "namenode", "sleep 0.5; echo 'port 9000 in use'; exit 3"),
        "datanode": _daemon(tmp_path, "datanode", "echo waiting; sleep 30"),
    }
    try:
        with pytest.raises(StartError) as refused:
            wait_for_daemons(procs, lambda: False, tmp_path, 20, "never", StartError)
    finally:
        procs["datanode"].kill()
    text = str(refused.value)
    assert text.startswith("the namenode exited with code 3")
    assert "port 9000 in use" in text and "--- datanode.out" in text and "waiting" in text


def test_ready_returns_and_a_timeout_says_what_did_not_happen(tmp_path: Path) -> None:
    proc = _daemon(tmp_path, "rm", "echo started; sleep 30")
    try:
        calls: list[int] = []

        def ready() -> bool:
            calls.append(1)
            return len(calls) >= 3

        wait_for_daemons({"rm": proc}, ready, tmp_path, 20, "x", StartError)
        assert len(calls) == 3
        with pytest.raises(StartError, match=r"no NodeManager registered within 1s:\n--- rm.out"):
            wait_for_daemons(
                {"rm": proc}, lambda: False, tmp_path, 1, "no NodeManager registered", StartError
            )
    finally:
        proc.kill()
