#!/usr/bin/env bash
# Make sure a Postgres and a Redis are reachable for the tests, and write their URLs to
# .run/services.env. Uses the machine's own (127.0.0.1:5432 trust auth, 127.0.0.1:6379)
# when they answer; otherwise installs them with apt and starts them in a temporary
# directory on a free port. Idempotent: a second run reuses what the first started.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
run_dir="$root/.run"
mkdir -p "$run_dir"
env_file="$run_dir/services.env"
test_db=enclave_test

say() { printf 'services: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

apt_install() {
  command -v apt-get >/dev/null || die "$1 is not running and apt-get is not available to install it; start $1 yourself"
  [ "$(id -u)" = 0 ] || die "$1 is not running; install it (apt-get install $*) or run as root"
  say "installing $* with apt"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >"$run_dir/apt.log" 2>&1; then
    die "apt-get install $* failed; see $run_dir/apt.log"
  fi
}

# Reuse URLs from an earlier run if they still answer.
if [ -f "$env_file" ]; then
  # shellcheck disable=SC1090
  . "$env_file"
fi

pg_ok() { pg_isready -q -h 127.0.0.1 -p "$1" 2>/dev/null; }

start_postgres() {
  if pg_ok 5432; then pg_port=5432; pg_user=postgres; return; fi
  if [ -n "${TEST_PG_PORT:-}" ] && pg_ok "$TEST_PG_PORT"; then
    pg_port=$TEST_PG_PORT; pg_user=postgres; return
  fi
  if command -v pg_ctlcluster >/dev/null && ls /etc/postgresql/*/main >/dev/null 2>&1; then
    say "starting the machine's Postgres"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start >/dev/null 2>&1 || true
    for _ in $(seq 20); do pg_ok 5432 && { pg_port=5432; pg_user=postgres; return; }; sleep 0.5; done
  fi
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_install postgresql
  local bin; bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n1)")
  local data; data=$(mktemp -d /tmp/enclave-pg.XXXXXX)
  pg_port=$(free_port); pg_user=postgres
  chown postgres "$data"
  say "starting a private Postgres on 127.0.0.1:$pg_port in $data"
  runuser -u postgres -- "$bin/initdb" -D "$data/db" -U postgres -A trust >"$run_dir/pg-init.log" 2>&1 \
    || die "initdb failed; see $run_dir/pg-init.log"
  runuser -u postgres -- "$bin/pg_ctl" -D "$data/db" -l "$data/log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $data" start >/dev/null \
    || die "Postgres did not start; see $data/log"
}

redis_ok() { redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }

start_redis() {
  if redis_ok 6379; then redis_port=6379; return; fi
  if [ -n "${TEST_REDIS_PORT:-}" ] && redis_ok "$TEST_REDIS_PORT"; then
    redis_port=$TEST_REDIS_PORT; return
  fi
  command -v redis-server >/dev/null || apt_install redis-server
  local dir; dir=$(mktemp -d /tmp/enclave-redis.XXXXXX)
  redis_port=$(free_port)
  say "starting a private Redis on 127.0.0.1:$redis_port in $dir"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$redis_port" --save "" \
    --appendonly no --dir "$dir" --logfile "$dir/redis.log" >/dev/null
  for _ in $(seq 20); do redis_ok "$redis_port" && return; sleep 0.25; done
  die "Redis did not start; see $dir/redis.log"
}

command -v pg_isready >/dev/null || apt_install postgresql-client
command -v redis-cli >/dev/null || apt_install redis-tools
start_postgres
start_redis

if ! psql -h 127.0.0.1 -p "$pg_port" -U "$pg_user" -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '$test_db'" | grep -q 1; then
  psql -h 127.0.0.1 -p "$pg_port" -U "$pg_user" -d postgres -qc "CREATE DATABASE $test_db" \
    || die "could not create the test database $test_db"
fi

cat >"$env_file" <<ENV
TEST_PG_PORT=$pg_port
TEST_REDIS_PORT=$redis_port
export TEST_DATABASE_URL=postgresql+asyncpg://$pg_user@127.0.0.1:$pg_port/$test_db
export TEST_REDIS_URL=redis://127.0.0.1:$redis_port/15
ENV
say "Postgres on 127.0.0.1:$pg_port, Redis on 127.0.0.1:$redis_port"
