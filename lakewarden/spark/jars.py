"""Which jars Spark gets, resolved in order, all configurable:

1. explicit paths (`LAKEWARDEN_SPARK_JARS`),
2. Maven coordinates (`LAKEWARDEN_SPARK_PACKAGES`) for a Spark that reaches Maven,
3. an offline assembly from PyPI wheels, built once and cached: the Apache
   Iceberg 1.10.2 runtime from `snowpark-connect-deps-iceberg`, plus the
   relocated Jackson classes that runtime jar lacks (rebuilt from
   `snowpark-connect-deps-2`'s Jackson 2.18 with Debian's jarjar), Debian's Apache
   HttpClient 5 relocated the same way (Iceberg's REST client), and Debian's PostgreSQL
   JDBC driver.
"""

from __future__ import annotations

import base64
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
DEBIAN_JAVA = Path("/usr/share/java")
# Iceberg's REST client (Spark's REST catalog) needs Apache HttpClient 5 relocated, which the
# runtime jar of the offline assembly leaves out (NoClassDefFoundError
# org/apache/iceberg/shaded/org/apache/hc/core5/http/Method): Debian's, relocated.
HTTP_JARS = ("httpclient5", "httpcore5", "httpcore5-h2")
HTTP_RULE = "rule org.apache.hc.** org.apache.iceberg.shaded.org.apache.hc.@1\n"
# The empty interface org.apache.iceberg.shaded.org.apache.hc.client5.http.ssl.TlsSocketStrategy
# (javac --release 8 -g:none). Iceberg 1.10 names it (from HttpClient 5.4) in code it runs only
# when a TLS configurer is set; the JVM's verifier loads it anyway. Debian has HttpClient 5.2.
TLS_STUB_PATH = "org/apache/iceberg/shaded/org/apache/hc/client5/http/ssl/TlsSocketStrategy.class"
TLS_STUB = base64.b64decode(
    "yv66vgAAADQABQcAAgEASm9yZy9hcGFjaGUvaWNlYmVyZy9zaGFkZWQvb3JnL2FwYWNoZS9oYy9jbGllbnQ1L2h0dHAv"
    "c3NsL1Rsc1NvY2tldFN0cmF0ZWd5BwAEAQAQamF2YS9sYW5nL09iamVjdAYBAAEAAwAAAAAAAAAA"
)


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
        relocate(jackson, JACKSON_RULE, shaded)
    http = cache_dir / "iceberg-shaded-httpclient5.jar"
    if not http.exists():
        sources = [DEBIAN_JAVA / f"{name}.jar" for name in HTTP_JARS]
        missing = [str(p) for p in sources if not p.exists()]
        if missing:
            raise JarsUnavailable(
                f"{', '.join(missing)} not found (apt-get install libhttpclient5-java "
                "libhttpcore5-java): Iceberg's REST catalog client needs them"
            )
        relocate(sources, HTTP_RULE, http, extra={TLS_STUB_PATH: TLS_STUB})
    pg = next((p for p in PG_JDBC_CANDIDATES if Path(p).exists()), None)
    if pg is None:
        raise JarsUnavailable(
            "PostgreSQL JDBC driver not found (apt-get install libpostgresql-jdbc-java)"
        )
    return [str(runtime), str(shaded), str(http), pg]


def relocate(
    sources: list[Path], rule: str, out: Path, extra: dict[str, bytes] | None = None
) -> None:
    """Merge the classes of `sources` into one jar and relocate them (jarjar `rule`) where
    Iceberg's runtime looks for them; `extra` entries are added as they are."""
    if not Path(JARJAR).exists():
        raise JarsUnavailable(f"{JARJAR} not found (apt-get install libjarjar-java)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        merged = Path(tmp) / "merged.jar"
        seen: set[str] = set()
        with zipfile.ZipFile(merged, "w", zipfile.ZIP_DEFLATED) as dst:
            for jar in sources:
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
        rules.write_text(rule)
        partial = Path(tmp) / out.name
        subprocess.run(
            ["java", "-jar", JARJAR, "process", str(rules), str(merged), str(partial)],
            check=True,
            capture_output=True,
        )
        with zipfile.ZipFile(partial, "a") as relocated:
            for name, data in (extra or {}).items():
                if name not in relocated.namelist():
                    relocated.writestr(name, data)
        shutil.move(str(partial), out)  # atomic enough: a half-built jar is never at `out`
