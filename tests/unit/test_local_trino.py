"""The test Trino's JDK is found without anything installed by hand: TRINO_JAVA_HOME, else
the newest JDK of /usr/lib/jvm that Trino runs on (the machine's default Java is older)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakewarden.spark import local_trino
from lakewarden.spark.local_trino import trino_java_home


def _jdk(root: Path, name: str, version: str) -> Path:
    home = root / name
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("")
    (home / "release").write_text(f'IMPLEMENTOR="x"\nJAVA_VERSION="{version}"\n')
    return home


def test_the_newest_jdk_new_enough_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRINO_JAVA_HOME", raising=False)
    monkeypatch.setattr(local_trino, "JVM_ROOT", tmp_path)
    _jdk(tmp_path, "java-17-openjdk-amd64", "17.0.12")
    assert trino_java_home() is None  # too old: the fixture skips, saying why
    _jdk(tmp_path, "temurin-24-jdk-amd64", "24.0.1")
    newest = _jdk(tmp_path, "temurin-25-jdk-amd64", "25.0.3")
    (tmp_path / "not-a-jdk").mkdir()
    assert trino_java_home() == newest
    monkeypatch.setenv("TRINO_JAVA_HOME", str(tmp_path / "elsewhere"))
    assert trino_java_home() == tmp_path / "elsewhere"


def test_a_catalog_name_trino_would_not_take_is_refused_before_any_query() -> None:
    trino = local_trino.Trino(port=1, etc=Path("."), log_path=Path("."))
    with pytest.raises(ValueError, match="lower case"):
        trino.add_iceberg_catalog("lake; DROP CATALOG x", {})
