#!/usr/bin/env bash
# Installs the two upstream frameworks of tests/differential.rs from the
# package registries, pinned:
#
#   <dir>/venv   FastAPI + uvicorn (tests/differential/requirements.txt)
#   <dir>/node   Express + method-override (tests/differential/package*.json, npm ci)
#
# <dir> is $DIFF_DIR, by default ${CARGO_TARGET_DIR:-target}/differential.
# Idempotent: each half keeps a stamp (the hash of its pin files and the
# interpreter's version) and is skipped when the stamp matches and the
# packages are there. A fresh machine needs python3 (with venv and pip) and
# node with npm, nothing else.
#
# Exit 0: installed. Exit 3: python3, node or npm is missing. Any other
# non-zero exit: the install failed.
set -euo pipefail
cd "$(dirname "$0")/.."

SRC=tests/differential
DIR="${DIFF_DIR:-${CARGO_TARGET_DIR:-target}/differential}"

missing=()
for tool in python3 node npm; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -ne 0 ]; then
    echo "differential-setup: ${missing[*]} missing: cannot install the upstreams" >&2
    exit 3
fi

mkdir -p "$DIR"
# Two runs at once (CI's step and the test itself) take turns.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$DIR/.lock"
    flock -w 600 9
fi

hash_of() { cat "$@" | sha256sum | cut -c1-64; }

# === Python: FastAPI + uvicorn ===
py_stamp="$(hash_of "$SRC/requirements.txt") $(python3 --version 2>&1)"
if [ "$(cat "$DIR/venv/.stamp" 2>/dev/null)" != "$py_stamp" ] ||
    ! "$DIR/venv/bin/python" -c "import fastapi, uvicorn, multipart" 2>/dev/null; then
    echo "== differential-setup: python venv in $DIR/venv"
    rm -rf "$DIR/venv"
    python3 -m venv "$DIR/venv"
    "$DIR/venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
        -r "$SRC/requirements.txt"
    echo "$py_stamp" >"$DIR/venv/.stamp"
fi

# === Node: Express + method-override ===
node_stamp="$(hash_of "$SRC/package.json" "$SRC/package-lock.json") $(node --version)"
if [ "$(cat "$DIR/node/.stamp" 2>/dev/null)" != "$node_stamp" ] ||
    [ ! -f "$DIR/node/node_modules/express/package.json" ] ||
    [ ! -f "$DIR/node/node_modules/method-override/package.json" ]; then
    echo "== differential-setup: npm ci in $DIR/node"
    rm -rf "$DIR/node"
    mkdir -p "$DIR/node"
    cp "$SRC/package.json" "$SRC/package-lock.json" "$DIR/node/"
    (cd "$DIR/node" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$node_stamp" >"$DIR/node/.stamp"
fi

echo "differential-setup: ready in $DIR"
