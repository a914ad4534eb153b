"""Schemathesis against the served OpenAPI spec: whatever it sends, no 5xx (bad input gets
a 4xx that says what to fix). It found ids beyond bigint reaching Postgres as 500s."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import make_test_runtime
from helpers import append_batches, make_table


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_server_errors_under_fuzzing(db_url: str, tmp_path: Path) -> None:
    st = Path(sys.executable).parent / "st"
    if not st.exists() and not shutil.which("st"):
        pytest.skip("schemathesis is not installed (it is a dev dependency)")
    rt = make_test_runtime(db_url, tmp_path)
    append_batches(make_table(rt), 2)  # a real table the fuzzer may hit by name
    rt.engine.dispose()
    port = _port()
    env = {
        **os.environ,
        "LAKEWARDEN_DATABASE_URL": db_url,
        "LAKEWARDEN_DATA_DIR": str(tmp_path),
        "LAKEWARDEN_WAREHOUSE": (tmp_path / "warehouse").as_uri(),
        "LAKEWARDEN_LOG_LEVEL": "WARNING",
    }
    log = tmp_path / "api.log"
    with open(log, "wb") as out:
        api = subprocess.Popen(
            [sys.executable, "-m", "lakewarden", "api", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        result = subprocess.run(
            [
                str(st),
                "run",
                f"http://127.0.0.1:{port}/openapi.json",
                "--checks",
                "not_a_server_error",
                "--max-examples",
                "20",
                "--seed",
                "1",
                "--workers",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout[-4000:] + log.read_text()[-3000:]
    finally:
        api.terminate()
        api.wait(30)
