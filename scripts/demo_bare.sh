#!/usr/bin/env bash
# The compose stack's demo on bare processes, to compare with the containers
# (docs/performance.md): the same topology (2x api, 2x worker, 2x scheduler, a Spark
# standalone master and worker) and the same writer (scripts/demo_writer.py, 40 commits,
# compaction at 20 small files), as processes of this machine's venv on 127.0.0.1, an
# embedded Postgres of their own. Prints the writer's lines with the seconds since it
# started; everything it started is stopped at the end.
#
#   bash scripts/demo_bare.sh [VENV]      (default: .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
BIN="$(cd "$VENV/bin" && pwd)"
export PATH="$BIN:$PATH"  # the writer mints its token with `lakewarden`
DIR="$(mktemp -d /tmp/lakewarden-bare.XXXXXX)"
PIDS=()

export LAKEWARDEN_DATA_DIR="$DIR/data" LAKEWARDEN_EMBEDDED_PG_PORT=55532
export LAKEWARDEN_WAREHOUSE="file://$DIR/warehouse" LAKEWARDEN_CATALOG_NAME=lake
export LAKEWARDEN_SPARK_MASTER=spark://127.0.0.1:27077 SPARK_LOCAL_IP=127.0.0.1
export LAKEWARDEN_SPARK_CONF='{"spark.cores.max": "1", "spark.executor.memory": "1g"}'
export LAKEWARDEN_API_URL=http://127.0.0.1:28080
unset LAKEWARDEN_DATABASE_URL LAKEWARDEN_MIGRATION_DATABASE_URL

stop() {  # each process group: TERM, 20 s to go, then KILL (a JVM child included)
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for _ in $(seq 20); do
    alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 1
  done
  for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$BIN/lakewarden" db stop >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap stop EXIT

start() {  # name, command...
  local name="$1"; shift
  setsid "$@" >"$DIR/$name.log" 2>&1 < /dev/null &
  PIDS+=($!)
}

mkdir -p "$DIR/warehouse"
ms() { echo $(( $(date +%s%N) / 1000000 )); }
since() { local d=$(( $(ms) - $1 )); printf '%d.%d' $(( d / 1000 )) $(( d % 1000 / 100 )); }
t0=$(ms)
"$BIN/lakewarden" migrate >"$DIR/migrate.log" 2>&1
start spark-master "$BIN/spark-class" org.apache.spark.deploy.master.Master \
  --host 127.0.0.1 --port 27077 --webui-port 28090
start spark-worker "$BIN/spark-class" org.apache.spark.deploy.worker.Worker \
  spark://127.0.0.1:27077 --host 127.0.0.1 --cores 2 --memory 2g \
  --work-dir "$DIR/spark-work" --webui-port 28091
start api-1 "$BIN/lakewarden" api --host 127.0.0.1 --port 28080
start api-2 "$BIN/lakewarden" api --host 127.0.0.1 --port 28081
start worker-1 "$BIN/lakewarden" worker
start worker-2 "$BIN/lakewarden" worker
start scheduler-1 "$BIN/lakewarden" scheduler
start scheduler-2 "$BIN/lakewarden" scheduler
for _ in $(seq 300); do
  curl -sf "$LAKEWARDEN_API_URL/readyz" >/dev/null && break
  sleep 1
done
echo "$(since "$t0")s api ready"
w0=$(ms)
"$BIN/python" scripts/demo_writer.py --commits 40 --min-small-files 20 --wait 600 \
  | while IFS= read -r line; do
      echo "$(since "$w0")s $line"
    done
