#!/bin/sh
# First start: initdb with POSTGRES_USER as the superuser (password auth over TCP), and
# POSTGRES_DB created. Then the server in the foreground, as the container's process,
# listening where PGHOST says (127.0.0.1 under host networking), on PGPORT.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 --encoding=UTF8 >/dev/null
  rm -f "$pwfile"
  printf "host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n" \
    >> "$PGDATA/pg_hba.conf"
  pg_ctl -w -o "-c listen_addresses='' -c unix_socket_directories=/tmp" start >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then
    createdb --host=/tmp --username="$POSTGRES_USER" "$POSTGRES_DB"
  fi
  pg_ctl -w stop >/dev/null
fi
# The Unix socket in /tmp: the one writable path under a read-only root besides the data.
exec postgres -c listen_addresses="${PGHOST:-*}" -c port="${PGPORT:-5432}" \
  -c unix_socket_directories=/tmp -c max_connections=200 "$@"
