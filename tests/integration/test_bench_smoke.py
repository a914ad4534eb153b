"""The benchmark's smoke run: every figure completes at tiny sizes and the JSON has every
field. Not a speed check (the numbers at these sizes mean nothing): `make bench` is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import free_port

from benchmarks.__main__ import FIGURES, NOT_IN_SMOKE

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
FIELDS = {
    "id",
    "measure",
    "compared_with",
    "goal",
    "ratio",
    "ratio_label",
    "goal_met",
    "values",
    "notes",
    "seconds",
    "error",
}


# Its own budget, the subprocess's: every figure at tiny sizes took 5.5 min on a quiet
# machine and over the suite's 10-minute default at load 6-8 (CI's red of stop 24's check).
@pytest.mark.timeout(1500)
def test_the_smoke_run_measures_every_figure_and_writes_the_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    # The bench's embedded server runs as its own system user when we are root, and reaches
    # its data dir through o+x on the parents. Not under pytest's temp root: every pytest
    # session that starts meanwhile makes that root 0700 again, and the server's next
    # checkpoint (B10's DROP DATABASE forces one) PANICs on its pg_control, the server dies.
    data = Path(tempfile.mkdtemp(prefix="lw-bench-smoke-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEWARDEN_")}
    env["LAKEWARDEN_DATA_DIR"] = str(data)
    env["LAKEWARDEN_EMBEDDED_PG_PORT"] = str(free_port() - 10)  # the bench adds 10
    try:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks", "--smoke", "--out", str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
    finally:  # the embedded server outlives the run: stop it
        stop = {**env, "LAKEWARDEN_DATA_DIR": str(data / "bench")}
        subprocess.run([sys.executable, "-m", "cli", "db", "stop"], env=stop, check=False)
        shutil.rmtree(data, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["machine"]["cores"] == os.cpu_count()
    assert len(doc["machine"]["load_avg"]) == 3 and len(doc["machine"]["load_avg_after"]) == 3
    smoked = [fid for fid in FIGURES if fid not in NOT_IN_SMOKE]
    assert [f["id"] for f in doc["figures"]] == smoked
    for fig in doc["figures"]:
        assert set(fig) == FIELDS, fig["id"]
        assert fig["error"] is None, f"{fig['id']}: {fig['error']}"
        ratio = fig["ratio"]
        assert ratio["n"] >= 1 and ratio["low"] <= ratio["median"] <= ratio["high"], fig["id"]
        assert fig["values"], fig["id"]
    table = done.stdout
    for fid in smoked:
        assert f"| {fid} |" in table
