#!/usr/bin/env bash
# Installs the upstream frameworks tests/differential.rs runs behind the
# proxy: Starlette + uvicorn (PyPI) in a venv, Express + method-override
# (npm) from the committed lock file. Everything goes under
# target/differential/; a second run with nothing changed does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=target/differential
src=tests/differential
mkdir -p "$root"

if ! command -v python3 >/dev/null || ! command -v npm >/dev/null; then
    echo "differential-setup: python3 and npm are needed" >&2
    exit 1
fi

stamp="$root/.stamp"
want="$(cat "$src/requirements.txt" "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
    && [ -x "$root/venv/bin/python" ] && [ -d "$root/node/node_modules/express" ]; then
    exit 0
fi

python3 -m venv "$root/venv"
"$root/venv/bin/pip" install --quiet --disable-pip-version-check -r "$src/requirements.txt"

mkdir -p "$root/node"
cp "$src/package.json" "$src/package-lock.json" "$root/node/"
(cd "$root/node" && npm ci --no-audit --no-fund --loglevel=error)

echo "$want" > "$stamp"
echo "differential-setup: upstreams installed under $root"
