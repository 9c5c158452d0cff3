#!/usr/bin/env sh
# Write the secret files compose.yaml mounts (default: ./secrets at the repository root).
# Idempotent: a file already there is kept (Postgres keeps the password it was created with).
# The directory is 0700 (only you); the files are 0644 because compose bind-mounts each one
# into its container as is, where the services' non-root users must read it.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/secrets}
mkdir -p "$dir"
chmod 0700 "$dir"

random() {  # 32 random bytes as 64 hex characters: safe inside URLs and config files
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'
}

put() {  # put NAME VALUE: write the file unless it exists
  if [ ! -s "$dir/$1" ]; then
    printf '%s\n' "$2" > "$dir/$1"
    chmod 0644 "$dir/$1"
    echo "wrote $dir/$1" >&2
  fi
}

value() { sed -n '1p' "$dir/$1"; }

put postgres_password "$(random)"
put database_url "postgresql+asyncpg://enclave:$(value postgres_password)@postgres:5432/enclave"
put redis_password "$(random)"
put redis.conf "requirepass $(value redis_password)"
put redis_url "redis://:$(value redis_password)@redis:6379/0"
put secret_key "$(random)"
put worker_token "$(random)"
put oidc_client_secret "$(random)"
put grafana_admin_password "$(random)"
