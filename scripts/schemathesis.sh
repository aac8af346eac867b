#!/usr/bin/env bash
# Property-based API test: Schemathesis generates requests from
# docs/openapi.yaml and checks every answer against the spec.
#
#   scripts/schemathesis.sh            # 25 examples per operation
#   ST_MAX_EXAMPLES=200 scripts/schemathesis.sh
#
# It builds the debug binary, starts `verdict serve` on a free loopback port
# with a temp data dir and a temp keys file, waits for /health, runs
# Schemathesis (pinned, in a venv under target/) with the checks
# not_a_server_error and response_schema_conformance, then stops the server.
# Exits non-zero on any failure; skips (exit 0) when python3 is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

ST_VERSION="3.39.16"
# Schemathesis 3.39 breaks on Hypothesis newer than 6.131.14.
HYPOTHESIS_VERSION="6.131.14"
MAX_EXAMPLES="${ST_MAX_EXAMPLES:-25}"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
VENV="$TARGET_DIR/schemathesis-venv"

if ! command -v python3 >/dev/null 2>&1; then
    echo "schemathesis: skipped, python3 is not installed"
    exit 0
fi

if ! "$VENV/bin/python" -c "import hypothesis, schemathesis, sys; sys.exit(schemathesis.__version__ != '$ST_VERSION' or hypothesis.__version__ != '$HYPOTHESIS_VERSION')" 2>/dev/null; then
    echo "== installing schemathesis $ST_VERSION (hypothesis $HYPOTHESIS_VERSION) into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$ST_VERSION" "hypothesis==$HYPOTHESIS_VERSION"
fi

echo "== cargo build --bin verdict"
cargo build --quiet --bin verdict
BIN="$TARGET_DIR/debug/verdict"

TMP="$(mktemp -d)"
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

# One key with every scope; only its sha256 goes into the keys file.
KEY="st-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
HASH="$(printf '%s' "$KEY" | sha256sum | cut -d' ' -f1)"
cat >"$TMP/keys.toml" <<TOML
[[key]]
name = "schemathesis"
hash = "sha256:$HASH"
scopes = ["verify", "authorize", "batch", "audit", "review"]
TOML
mkdir -p "$TMP/policies"
cp policies/*.toml "$TMP/policies/"

"$BIN" serve --api-listen 127.0.0.1:0 --keys "$TMP/keys.toml" \
    --policies "$TMP/policies" --data-dir "$TMP/data" --log-format json \
    >"$TMP/server.log" 2>&1 &
SERVER_PID=$!

# The port is picked by the kernel; the server logs it.
ADDR=""
for _ in $(seq 1 300); do
    ADDR="$(grep -o '"addr":"127.0.0.1:[0-9]*"' "$TMP/server.log" 2>/dev/null | tail -n1 | cut -d'"' -f4 || true)"
    if [ -n "$ADDR" ] && python3 -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://$ADDR/health').status != 200)" 2>/dev/null; then
        break
    fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "schemathesis: the server exited early:" >&2
        cat "$TMP/server.log" >&2
        exit 1
    fi
    ADDR=""
    sleep 0.1
done
if [ -z "$ADDR" ]; then
    echo "schemathesis: the server did not become healthy" >&2
    tail -n 20 "$TMP/server.log" >&2
    exit 1
fi
echo "== schemathesis against http://$ADDR ($MAX_EXAMPLES examples per operation)"

status=0
"$VENV/bin/schemathesis" run docs/openapi.yaml \
    --base-url "http://$ADDR" \
    --header "Authorization: Bearer $KEY" \
    --checks not_a_server_error,response_schema_conformance \
    --hypothesis-max-examples "$MAX_EXAMPLES" \
    --hypothesis-deadline None \
    --hypothesis-derandomize \
    --hypothesis-suppress-health-check all \
    --request-timeout 10000 \
    --workers 1 \
    --experimental openapi-3.1 \
    --no-color || status=$?

if [ "$status" -ne 0 ]; then
    echo "schemathesis: failures (exit $status); server log tail:" >&2
    tail -n 20 "$TMP/server.log" >&2
fi
exit "$status"
