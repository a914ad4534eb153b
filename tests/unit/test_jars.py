"""The pinned jars: the lock parsed, a jar fetched from a repository (a local one, by
file:// URL: the same code path as Maven Central's https) only when its bytes match the
lock, and `lakewarden jars --check` naming the jar that differs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from lakewarden.settings import get_settings
from lakewarden.spark.jars import (
    JarsUnavailable,
    PinnedJar,
    check_pinned,
    fetch_pinned,
    read_lock,
    unpacked,
)
from lakewarden.spark.jars import (
    pinned as pinned_jar,
)

BYTES = b"PK\x03\x04 not really a jar, but bytes with a known hash"


def _repo_with(tmp_path: Path, data: bytes) -> tuple[str, PinnedJar]:
    jar = PinnedJar(
        "t", "org.example:thing_2.12:1.0", len(BYTES), hashlib.sha256(BYTES).hexdigest()
    )
    where = tmp_path / "repo" / "org" / "example" / "thing_2.12" / "1.0"
    where.mkdir(parents=True)
    (where / jar.file_name).write_bytes(data)
    return (tmp_path / "repo").as_uri(), jar


def test_the_committed_lock_pins_iceberg_s3_and_jdbc() -> None:
    pinned = read_lock()
    assert {p.group for p in pinned} >= {"iceberg", "s3", "jdbc"}
    runtime = next(p for p in pinned if p.group == "iceberg")
    assert runtime.coordinate.startswith("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:")
    assert runtime.url("https://repo1.maven.org/maven2/").startswith(
        "https://repo1.maven.org/maven2/org/apache/iceberg/iceberg-spark-runtime-3.5_2.12/"
    )


def test_a_bad_lock_line_is_named(tmp_path: Path) -> None:
    lock = tmp_path / "jars.lock"
    lock.write_text("# fine\niceberg org.apache.iceberg:x:1 12 abc\n")
    with pytest.raises(JarsUnavailable, match=r"jars.lock:2: expected"):
        read_lock(lock)


def test_a_jar_is_fetched_once_and_checked(tmp_path: Path) -> None:
    repo, jar = _repo_with(tmp_path, BYTES)
    cache = tmp_path / "cache"
    [path] = fetch_pinned(cache, repo, [jar])
    assert path.read_bytes() == BYTES and path.stat().st_mode & 0o777 == 0o644
    assert check_pinned(cache, [jar]) == []
    # Present with its size: not fetched again (the repository could be gone).
    assert fetch_pinned(cache, str(tmp_path / "nowhere"), [jar]) == [path]


def test_other_bytes_than_pinned_are_refused_and_left_nowhere(tmp_path: Path) -> None:
    repo, jar = _repo_with(tmp_path, BYTES.replace(b"known", b"other"))
    cache = tmp_path / "cache"
    with pytest.raises(JarsUnavailable, match="does not match the lock"):
        fetch_pinned(cache, repo, [jar])
    assert list(cache.iterdir()) == []  # no half or wrong jar stays behind


def test_an_unreachable_repository_says_what_to_set(tmp_path: Path) -> None:
    _, jar = _repo_with(tmp_path, BYTES)
    with pytest.raises(JarsUnavailable, match="LAKEWARDEN_MAVEN_REPOSITORY"):
        fetch_pinned(tmp_path / "cache", (tmp_path / "nowhere").as_uri(), [jar])


def test_check_names_the_jar_that_differs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "maven"
    cache.mkdir()
    runtime = next(p for p in read_lock() if p.group == "iceberg")
    (cache / runtime.file_name).write_bytes(b"tampered")
    monkeypatch.setenv("LAKEWARDEN_JARS_CACHE_DIR", str(tmp_path))
    get_settings.cache_clear()  # the CLI's settings are read once per process
    try:
        result = CliRunner().invoke(app, ["jars", "--check"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 1
    assert f"{runtime.file_name}: sha256" in result.output
    assert "missing from" in result.output  # the others


@pytest.fixture
def pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[PinnedJar]:
    """The committed lock's pins, each present in a jar cache of its own with its size
    (sparse files: nothing is fetched), and no jars or packages set by the environment."""
    pins = read_lock()
    cache = tmp_path / "maven"
    cache.mkdir()
    for p in pins:
        with (cache / p.file_name).open("wb") as f:
            f.truncate(p.size)
    monkeypatch.setenv("LAKEWARDEN_JARS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LAKEWARDEN_SPARK_JARS", raising=False)
    monkeypatch.delenv("LAKEWARDEN_SPARK_PACKAGES", raising=False)
    return pins


def test_a_servers_jars_never_reach_sparks_classpath(pinned: list[PinnedJar]) -> None:
    """Hadoop's daemons (`server-hadoop`) are pinned for the test HDFS: on Spark's classpath
    they would shadow PySpark's own Hadoop client."""
    hadoop = [p for p in pinned if p.group == "server-hadoop"]
    assert hadoop and not any(p.for_spark for p in hadoop)
    from lakewarden.settings import Settings
    from lakewarden.spark.jars import resolve_jars

    jars = resolve_jars(Settings())
    iceberg = {p.file_name for p in pinned if p.for_spark and not p.families}
    assert {Path(j).name for j in jars.jars} == iceberg


def test_an_archive_is_pinned_fetched_and_unpacked_once(tmp_path: Path) -> None:
    """A server shipped as an archive (Trino: `@tar.gz`, `@zip`) is named, fetched and
    hashed as a jar is, then unpacked beside it once, with every file of it (Trino's
    file names hold "..." that shutil's zip unpacking drops)."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("plugin-1.0/com.faster...xml_jackson-2.19.jar", b"x")
        zf.writestr("plugin-1.0/plain.jar", b"y")
    data = buf.getvalue()
    lock = tmp_path / "jars.lock"
    lock.write_text(
        f"server-x org.example:plugin:1.0@zip {len(data)} {hashlib.sha256(data).hexdigest()}\n"
    )
    (jar,) = read_lock(lock)
    assert (jar.extension, jar.file_name, jar.for_spark) == ("zip", "plugin-1.0.zip", False)
    assert jar.url("https://r/").endswith("/org/example/plugin/1.0/plugin-1.0.zip")
    where = tmp_path / "repo" / "org" / "example" / "plugin" / "1.0"
    where.mkdir(parents=True)
    (where / jar.file_name).write_bytes(data)
    [archive] = fetch_pinned(tmp_path / "cache", (tmp_path / "repo").as_uri(), [jar])
    top = unpacked(archive)
    assert top.name == "plugin-1.0"
    assert sorted(p.name for p in top.iterdir()) == [
        "com.faster...xml_jackson-2.19.jar",
        "plain.jar",
    ]
    (top / "plain.jar").unlink()
    assert unpacked(archive) == top and not (top / "plain.jar").exists()  # not unpacked again


def test_a_lock_line_with_an_unknown_packaging_is_named(tmp_path: Path) -> None:
    lock = tmp_path / "jars.lock"
    lock.write_text(f"server-x org.example:plugin:1.0@rar 12 {'0' * 64}\n")
    with pytest.raises(JarsUnavailable, match=r"jars.lock:1: expected"):
        read_lock(lock)


def test_hudi_s_bundle_is_on_the_hudi_family_s_classpath_only(
    pinned: list[PinnedJar], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hudi's bundle brings its own `spark_catalog` and Avro: the Iceberg session launches
    without it, the Hudi family's with it (and Hadoop's S3A, the `s3a` group) and everything
    else the Iceberg one has."""
    from lakewarden.settings import Settings
    from lakewarden.spark.jars import resolve_jars

    hudi = pinned_jar("hudi")
    s3a = {p.file_name for p in pinned if p.group == "s3a"}
    iceberg = {Path(j).name for j in resolve_jars(Settings()).jars}
    both = {Path(j).name for j in resolve_jars(Settings(), "hudi").jars}
    assert hudi.file_name not in iceberg and both == iceberg | {hudi.file_name} | s3a
    assert len(s3a) == 2 and not s3a & iceberg
    monkeypatch.setenv("LAKEWARDEN_SPARK_PACKAGES", "org.example:x:1")
    assert hudi.coordinate in resolve_jars(Settings(), "hudi").packages
    assert hudi.coordinate not in resolve_jars(Settings()).packages
    with pytest.raises(JarsUnavailable, match="unknown Spark session family 'paimon'"):
        resolve_jars(Settings(), "paimon")


def test_delta_s_jars_are_on_the_delta_family_s_classpath_only(
    pinned: list[PinnedJar], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Delta's jars bring its own `spark_catalog`: the Iceberg session launches without
    them, the Delta family's with both (delta-spark and delta-storage) and everything else
    the Iceberg one has, never Hudi's bundle."""
    from lakewarden.settings import Settings
    from lakewarden.spark.jars import resolve_jars
    from lakewarden.spark.session import spark_conf

    delta = {p.file_name for p in pinned if p.group == "delta"}
    assert {n.split("-3")[0] for n in delta} == {"delta-spark_2.12", "delta-storage"}
    iceberg = {Path(j).name for j in resolve_jars(Settings()).jars}
    family = {Path(j).name for j in resolve_jars(Settings(), "delta").jars}
    s3a = {p.file_name for p in pinned if p.group == "s3a"}
    assert not delta & iceberg and family == iceberg | delta | s3a
    assert pinned_jar("hudi").file_name not in family
    monkeypatch.setenv("LAKEWARDEN_SPARK_PACKAGES", "org.example:x:1")
    coords = {p.coordinate for p in pinned if p.group == "delta"}
    assert coords <= set(resolve_jars(Settings(), "delta").packages)
    assert not coords & set(resolve_jars(Settings()).packages)
    conf = spark_conf(Settings(), "postgresql+psycopg://lw:pw@127.0.0.1:5432/lw", "delta")
    assert conf["spark.sql.catalog.spark_catalog"].endswith("delta.catalog.DeltaCatalog")
    assert "io.delta.sql.DeltaSparkSessionExtension" in conf["spark.sql.extensions"]
    assert "Delta" not in spark_conf(
        Settings(), "postgresql+psycopg://lw:pw@127.0.0.1:5432/lw"
    ).get("spark.sql.extensions", "")


def test_s3a_is_on_every_format_family_s_classpath_but_iceberg_s(pinned: list[PinnedJar]) -> None:
    """Hadoop's S3A (hadoop-aws at PySpark's Hadoop 3.3.4, and the AWS SDK v1 bundle it was
    built against) is shared by Hudi's and Delta's sessions, for their jobs on s3a://; the
    Iceberg session reads S3 with S3FileIO and launches without it."""
    from lakewarden.settings import Settings
    from lakewarden.spark.jars import resolve_jars

    s3a = {p.coordinate for p in pinned if p.group == "s3a"}
    assert s3a == {
        "org.apache.hadoop:hadoop-aws:3.3.4",
        "com.amazonaws:aws-java-sdk-bundle:1.12.262",
    }
    names = {p.file_name for p in pinned if p.group == "s3a"}
    assert not names & {Path(j).name for j in resolve_jars(Settings()).jars}
    for family in ("hudi", "delta"):
        assert names <= {Path(j).name for j in resolve_jars(Settings(), family).jars}
