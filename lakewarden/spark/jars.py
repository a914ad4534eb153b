"""Which jars Spark gets, resolved in order, all configurable:

1. explicit paths (`LAKEWARDEN_SPARK_JARS`), as in the `full` image, which bakes them in;
2. Maven coordinates (`LAKEWARDEN_SPARK_PACKAGES`), resolved by Spark's own Ivy;
3. the pinned jars of `jars.lock`, fetched once from Maven Central (or the mirror in
   `LAKEWARDEN_MAVEN_REPOSITORY`) into `<JARS_CACHE_DIR>/maven` and checked against the
   lock's size and sha256: Iceberg's Spark runtime (Jackson and HttpClient shaded inside),
   Iceberg's AWS bundle (S3FileIO) and the PostgreSQL JDBC driver (the JDBC catalog).

A lock group a format family takes (`FAMILY_GROUPS`: `hudi`, Hudi's Spark bundle;
`delta`, Delta Lake's delta-spark and delta-storage; `s3a`, Hadoop's S3A file system,
for both) goes on Spark's classpath only in that family's session
(`resolve_jars(settings, family)`): the Iceberg session launches with the jars it always had.

A lock group named `server-…` pins the jars of a server lakewarden's tests and benchmarks
start (Hadoop's HDFS daemons: `lakewarden.spark.local_hdfs`; S3Proxy, an S3 server on a
directory: `benchmarks/s3_server.py`; Hive's notification listener:
`lakewarden.spark.local_metastore`; Trino's server and its Iceberg plugin:
`lakewarden.spark.local_trino`; Hudi's Flink bundle for the tests' Flink writer,
`tests/flink_writer.py`): fetched and checked the same way, never on Spark's
classpath nor baked into an image. A pin whose coordinate ends in `@tar.gz` or `@zip` (Gradle's
notation for another packaging than a jar) is an archive: hashed as a jar is, then unpacked
once beside it (`unpacked`).

The lock names every jar by coordinate, so `lakewarden jars` is the one way they arrive:
`setup.sh`, the Docker image and a scheduler that finds its cache empty all fetch the same
files and refuse any whose bytes differ.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from lakewarden.settings import Settings

LOCK_FILE = Path(__file__).with_name("jars.lock")
DOWNLOAD_TIMEOUT_S = 120
SERVER_GROUP_PREFIX = "server-"
ARCHIVES = ("tar.gz", "zip")
UNPACKED_MARK = ".unpacked"  # written last: a directory without it is a half unpacking
# Session families (research note §6: Hudi wants `spark_catalog`, so its jobs get a Spark
# session of their own): the default one, and each further one with its lock group.
DEFAULT_FAMILY = "iceberg"
# `s3a`: Hadoop's S3A file system (hadoop-aws and the AWS SDK v1 bundle it needs), for
# the families whose jobs reach an object store through Hadoop (Hudi's and Delta's
# `s3a://` tables); Iceberg reads S3 through its own S3FileIO (`s3`), so its classpath
# goes without it.
FAMILY_GROUPS: dict[str, tuple[str, ...]] = {
    "hudi": ("hudi", "s3a"),
    "delta": ("delta", "s3a"),
}


class JarsUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class PinnedJar:
    """One line of `jars.lock`: what it is for, its Maven coordinate
    (`group:artifact:version`, or `group:artifact:version:classifier` for an assembly such
    as S3Proxy's `jar-with-dependencies`; `@tar.gz` / `@zip` after it for an archive), size
    and sha256."""

    group: str
    coordinate: str
    size: int
    sha256: str

    @property
    def for_spark(self) -> bool:
        """On Spark's classpath: every group but a server's (`server-…`)."""
        return not self.group.startswith(SERVER_GROUP_PREFIX)

    @property
    def extension(self) -> str:
        """`jar`, or an archive's packaging (`tar.gz`, `zip`)."""
        _, at, extension = self.coordinate.partition("@")
        return extension if at else "jar"

    @property
    def families(self) -> tuple[str, ...]:
        """The session families whose classpath has it (`hudi`, `delta`); none named:
        every family's."""
        return tuple(f for f, groups in FAMILY_GROUPS.items() if self.group in groups)

    @property
    def file_name(self) -> str:
        _, artifact, version, *classifier = self.coordinate.split("@")[0].split(":")
        return "-".join([artifact, version, *classifier]) + "." + self.extension

    def url(self, repository: str) -> str:
        group, artifact, version, *_ = self.coordinate.split("@")[0].split(":")
        path = f"{group.replace('.', '/')}/{artifact}/{version}/{self.file_name}"
        return f"{repository.rstrip('/')}/{path}"


@dataclass(frozen=True)
class JarSpec:
    jars: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    source: str = ""


def read_lock(path: Path = LOCK_FILE) -> list[PinnedJar]:
    """The pinned jars: one per line, `group coordinate size sha256`; `#` starts a comment."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            group, coordinate, size, sha256 = line.split()
            gav, at, extension = coordinate.partition("@")
            if (
                gav.count(":") not in (2, 3)
                or len(sha256) != 64
                or (at and extension not in ARCHIVES)
            ):
                raise ValueError(coordinate)
            out.append(PinnedJar(group, coordinate, int(size), sha256.lower()))
        except ValueError as exc:
            raise JarsUnavailable(
                f"{path}:{number}: expected "
                "'group group:artifact:version[:classifier][@tar.gz|@zip] size sha256'"
            ) from exc
    return out


def spark_pins(family: str | None = DEFAULT_FAMILY) -> list[PinnedJar]:
    """The pinned jars that go on the classpath of a `family` session (the lock less its
    servers' groups and other families' groups); `family=None`: every family's."""
    check_family(family or DEFAULT_FAMILY)
    return [
        p
        for p in read_lock()
        if p.for_spark and (family is None or not p.families or family in p.families)
    ]


def check_family(family: str) -> None:
    if family != DEFAULT_FAMILY and family not in FAMILY_GROUPS:
        known = ", ".join([DEFAULT_FAMILY, *FAMILY_GROUPS])
        raise JarsUnavailable(f"unknown Spark session family {family!r} (known: {known})")


def pinned(group: str) -> PinnedJar:
    """The lock's jar of `group` (a JarsUnavailable naming the lock when it has none)."""
    for jar in read_lock():
        if jar.group == group:
            return jar
    raise JarsUnavailable(f"{LOCK_FILE} pins no jar of group {group!r}")


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def resolve_jars(settings: Settings, family: str = DEFAULT_FAMILY) -> JarSpec:
    """The jars of a `family` session. Explicit jars and Maven coordinates stand for the
    Iceberg family's; another family adds its own pinned group to them (its coordinate, or
    its jar fetched into the cache)."""
    own = [p for p in spark_pins(family) if p.families]
    if settings.spark_jars:
        jars = _split(settings.spark_jars)
        missing = [j for j in jars if not Path(j).exists()]
        if missing:
            raise JarsUnavailable(f"LAKEWARDEN_SPARK_JARS names missing files: {missing}")
        cache, repo = settings.jars_cache_dir / "maven", settings.maven_repository
        jars += [str(p) for p in fetch_pinned(cache, repo, own)] if own else []
        return JarSpec(jars=jars, source="explicit")
    if settings.spark_packages:
        packages = _split(settings.spark_packages)
        if not any(p.startswith("org.postgresql:") for p in packages):
            packages += [pinned("jdbc").coordinate]
        packages += [p.coordinate for p in own]
        return JarSpec(packages=packages, source="maven")
    paths = fetch_pinned(
        settings.jars_cache_dir / "maven",
        settings.maven_repository,
        spark_pins(family),
    )
    return JarSpec(jars=[str(p) for p in paths], source="pinned")


def server_jars(settings: Settings, group: str) -> list[Path]:
    """The pinned jars (and archives) of one server group (`server-hadoop`, ...), fetched
    where missing."""
    pinned = [p for p in read_lock() if p.group == group]
    if not pinned:
        raise JarsUnavailable(f"jars.lock pins no jar of group {group!r}")
    return fetch_pinned(settings.jars_cache_dir / "maven", settings.maven_repository, pinned)


def fetch_pinned(cache: Path, repository: str, jars: list[PinnedJar] | None = None) -> list[Path]:
    """The path in `cache` of each of `jars` (Spark's pinned jars by default), fetched
    first where it is missing. A jar already there is trusted by its size (a full hash of
    ~200 MB at every Spark start would cost more than it guards; `check_pinned` hashes
    them); `jars` defaults to every family's Spark jars. A fetched one must match its
    sha256 before it is moved into place, so a half or wrong download is never used."""
    out = []
    for jar in jars if jars is not None else spark_pins(None):
        path = cache / jar.file_name
        if not (path.exists() and path.stat().st_size == jar.size):
            _download(jar, repository, path)
        out.append(path)
    return out


def unpacked(archive: Path) -> Path:
    """The directory a fetched archive (`…tar.gz`, `…zip`) unpacks to, beside it, unpacked
    the first time (into a temporary directory, then moved into place, so a half-unpacked
    tree is never used); the archive's one top directory when it has one (a Trino server's
    `trino-server-core-476/`)."""
    stem = archive.name.removesuffix(".tar.gz").removesuffix(".zip")
    dest = archive.parent / f"{stem}.d"
    if not (dest / UNPACKED_MARK).exists():
        shutil.rmtree(dest, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=archive.parent, prefix=f".{stem}."))
        try:
            if archive.name.endswith(".tar.gz"):
                with tarfile.open(archive) as tar:
                    tar.extractall(tmp, filter="data")  # no links or paths out of `tmp`
            else:  # not shutil's: it drops every name with ".." (Trino's "com.faster...jar")
                with zipfile.ZipFile(archive) as zf:
                    zf.extractall(tmp)  # names out of `tmp` are made relative to it
            (tmp / UNPACKED_MARK).write_text(archive.name)
            tmp.chmod(0o755)
            tmp.rename(dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    (top, *more) = [p for p in dest.iterdir() if p.name != UNPACKED_MARK]
    return dest if more or not top.is_dir() else top


def check_pinned(cache: Path, jars: list[PinnedJar] | None = None) -> list[str]:
    """What is wrong with the cache against the lock, one line per jar of `jars` (every
    family's Spark jars by default); empty when every jar is there with its size and sha256."""
    problems = []
    for jar in jars if jars is not None else spark_pins(None):
        path = cache / jar.file_name
        if not path.exists():
            problems.append(f"{jar.file_name}: missing from {cache} (run `lakewarden jars`)")
            continue
        digest = _sha256(path)
        if digest != jar.sha256:
            problems.append(
                f"{jar.file_name}: sha256 {digest} does not match the lock's {jar.sha256} "
                f"({jar.coordinate}); delete it and run `lakewarden jars`"
            )
    return problems


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download(jar: PinnedJar, repository: str, dest: Path) -> None:
    url = jar.url(repository)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{jar.file_name}.")
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        with (
            os.fdopen(fd, "wb") as out,
            urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response,
        ):
            for block in iter(lambda: response.read(1 << 20), b""):
                h.update(block)
                out.write(block)
        if h.hexdigest() != jar.sha256:
            raise JarsUnavailable(
                f"{jar.file_name} from {url}: sha256 {h.hexdigest()} does not match the "
                f"lock's {jar.sha256}; the repository served other bytes than were pinned"
            )
        tmp.chmod(0o644)  # readable by the services' user where root fetched it (an image)
        tmp.replace(dest)  # atomic: a half-fetched jar is never at `dest`
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise JarsUnavailable(
            f"could not fetch {jar.coordinate} from {url}: {exc}; set "
            "LAKEWARDEN_MAVEN_REPOSITORY to a mirror you reach, or LAKEWARDEN_SPARK_JARS to "
            "jars you have"
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
