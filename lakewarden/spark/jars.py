"""Which jars Spark gets, resolved in order, all configurable:

1. explicit paths (`LAKEWARDEN_SPARK_JARS`),
2. Maven coordinates (`LAKEWARDEN_SPARK_PACKAGES`) for a Spark that reaches Maven,
3. an offline assembly from PyPI wheels, built once and cached: the Apache
   Iceberg 1.10.2 runtime from `snowpark-connect-deps-iceberg`, plus the
   relocated Jackson classes that runtime jar lacks (rebuilt from
   `snowpark-connect-deps-2`'s Jackson 2.18 with Debian's jarjar), plus
   Debian's PostgreSQL JDBC driver.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from lakewarden.settings import Settings

ICEBERG_RUNTIME = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
JACKSON_VERSION = "2.18.8"
JACKSON_JARS = ("jackson-core", "jackson-databind", "jackson-annotations")
JACKSON_RULE = "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1\n"
PG_JDBC_CANDIDATES = ("/usr/share/java/postgresql.jar",)
PG_JDBC_PACKAGE = "org.postgresql:postgresql:42.7.4"
JARJAR = "/usr/share/java/jarjar.jar"


class JarsUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class JarSpec:
    jars: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    source: str = ""


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def resolve_jars(settings: Settings) -> JarSpec:
    if settings.spark_jars:
        jars = _split(settings.spark_jars)
        missing = [j for j in jars if not Path(j).exists()]
        if missing:
            raise JarsUnavailable(f"LAKEWARDEN_SPARK_JARS names missing files: {missing}")
        return JarSpec(jars=jars, source="explicit")
    if settings.spark_packages:
        packages = _split(settings.spark_packages)
        if not any(p.startswith("org.postgresql:") for p in packages):
            packages.append(PG_JDBC_PACKAGE)
        return JarSpec(packages=packages, source="maven")
    return JarSpec(jars=offline_assembly(settings.jars_cache_dir), source="offline")


def offline_assembly(cache_dir: Path) -> list[str]:
    try:
        import snowpark_connect_deps_2
        import snowpark_connect_deps_iceberg
    except ImportError as exc:
        raise JarsUnavailable(
            "no Spark jars configured and the offline jar wheels are not installed: "
            "run `make setup`, or set LAKEWARDEN_SPARK_PACKAGES (Maven) or LAKEWARDEN_SPARK_JARS"
        ) from exc
    runtime = snowpark_connect_deps_iceberg.get_jars_dir() / ICEBERG_RUNTIME
    jackson_dir = Path(snowpark_connect_deps_2.__file__).parent / "jars"
    jackson = [jackson_dir / f"{name}-{JACKSON_VERSION}.jar" for name in JACKSON_JARS]
    shaded = cache_dir / f"iceberg-shaded-jackson-{JACKSON_VERSION}.jar"
    if not shaded.exists():
        build_shaded_jackson(jackson, shaded)
    pg = next((p for p in PG_JDBC_CANDIDATES if Path(p).exists()), None)
    if pg is None:
        raise JarsUnavailable(
            "PostgreSQL JDBC driver not found (apt-get install libpostgresql-jdbc-java)"
        )
    return [str(runtime), str(shaded), pg]


def build_shaded_jackson(jackson_jars: list[Path], out: Path) -> None:
    """Merge Jackson's classes into one jar and relocate them where Iceberg looks."""
    if not Path(JARJAR).exists():
        raise JarsUnavailable(f"{JARJAR} not found (apt-get install libjarjar-java)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        merged = Path(tmp) / "jackson-merged.jar"
        seen: set[str] = set()
        with zipfile.ZipFile(merged, "w", zipfile.ZIP_DEFLATED) as dst:
            for jar in jackson_jars:
                with zipfile.ZipFile(jar) as src:
                    for info in src.infolist():
                        name = info.filename
                        if name in seen or not name.endswith(".class"):
                            continue
                        if name.startswith("META-INF/") or name == "module-info.class":
                            continue  # multi-release and module descriptors do not relocate
                        seen.add(name)
                        dst.writestr(info, src.read(info))
        rules = Path(tmp) / "rules.txt"
        rules.write_text(JACKSON_RULE)
        partial = Path(tmp) / out.name
        subprocess.run(
            ["java", "-jar", JARJAR, "process", str(rules), str(merged), str(partial)],
            check=True,
            capture_output=True,
        )
        shutil.move(str(partial), out)  # atomic enough: a half-built jar is never at `out`
