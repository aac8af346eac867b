#!/usr/bin/env bash
# The review console in a real browser (tests/console_browser.rs).
#
#   bash scripts/browser-test.sh                      # run it
#   bash scripts/browser-test.sh --update-screenshot  # and rewrite docs/console.png
#
# Installs Chromium and chromedriver (the Debian packages `chromium` and
# `chromium-driver`) when they are missing, builds the demo refund service
# (examples/refund_service.rs), starts chromedriver on a loopback port and
# runs the ignored browser test against it. Every failure, the install's
# included, fails this script with the reason: it never passes without
# having driven a browser.
#
# VERDICT_CHROMEDRIVER / VERDICT_CHROMIUM name other binaries than the ones
# on PATH (a missing one is an error, not a reason to install).
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "browser-test: FAILED: $*" >&2
    exit 1
}

screenshot=""
for arg in "$@"; do
    case "$arg" in
        --update-screenshot) screenshot="$PWD/docs/console.png" ;;
        *) die "unknown argument $arg (usage: $0 [--update-screenshot])" ;;
    esac
done

# 1. Chromium and chromedriver.
install_browser() {
    command -v apt-get >/dev/null ||
        die "chromium and chromedriver are missing, and there is no apt-get to install them (Debian packages chromium, chromium-driver)"
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "installing chromium needs root (or sudo): apt-get install chromium chromium-driver"
        sudo="sudo"
    fi
    echo "browser-test: installing chromium and chromium-driver (apt-get)"
    $sudo apt-get update -q ||
        die "apt-get update failed, so chromium and chromium-driver cannot be installed (see above)"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q chromium chromium-driver ||
        die "apt-get install chromium chromium-driver failed (see above)"
}

if [ -n "${VERDICT_CHROMEDRIVER:-}${VERDICT_CHROMIUM:-}" ]; then
    driver="${VERDICT_CHROMEDRIVER:-$(command -v chromedriver || true)}"
    browser="${VERDICT_CHROMIUM:-$(command -v chromium || true)}"
else
    if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
        install_browser
    fi
    driver="$(command -v chromedriver || true)"
    browser="$(command -v chromium || true)"
fi
[ -n "$driver" ] && [ -x "$driver" ] || die "no chromedriver at '${driver}'"
[ -n "$browser" ] && [ -x "$browser" ] || die "no chromium at '${browser}'"
echo "browser-test: $("$browser" --version 2>/dev/null || echo "chromium at $browser")"
echo "browser-test: $("$driver" --version 2>/dev/null || echo "chromedriver at $driver")"

# 2. The demo upstream and the test binary.
cargo build --example refund_service
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
refund_service="${target_dir:-target}/debug/examples/refund_service"
[ -x "$refund_service" ] || die "no refund_service binary at $refund_service after the build"
cargo test --no-run --test api_face

# 3. chromedriver on loopback, on the first free port of a few.
work="$(mktemp -d)"
driver_pid=""
cleanup() {
    if [ -n "$driver_pid" ]; then
        kill "$driver_pid" 2>/dev/null || true
        wait "$driver_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

up=""
for attempt in 1 2 3 4 5; do
    port=$((20000 + (RANDOM % 20000)))
    # chromedriver listens on loopback only unless told otherwise.
    "$driver" --port="$port" --log-path="$work/chromedriver.log" \
        >"$work/chromedriver.out" 2>&1 &
    driver_pid=$!
    # Up to 10 s for it to say it listens ("... started successfully on
    # port N"); it exits at once when the port is taken.
    for _ in $(seq 1 50); do
        kill -0 "$driver_pid" 2>/dev/null || break
        if grep -q "started successfully on port $port" "$work/chromedriver.out"; then
            up="http://127.0.0.1:$port"
            break
        fi
        sleep 0.2
    done
    [ -n "$up" ] && break
    echo "browser-test: chromedriver did not come up on port $port (attempt $attempt):" >&2
    cat "$work/chromedriver.out" >&2 || true
    kill "$driver_pid" 2>/dev/null || true
    wait "$driver_pid" 2>/dev/null || true
    driver_pid=""
done
[ -n "$up" ] || die "chromedriver ($driver) did not start on any loopback port"
echo "browser-test: chromedriver at $up"

# 4. The test.
status=0
VERDICT_WEBDRIVER="$up" \
VERDICT_CHROMIUM="$browser" \
VERDICT_REFUND_SERVICE="$refund_service" \
VERDICT_CONSOLE_SCREENSHOT="${screenshot:-$work/console.png}" \
    cargo test --test api_face -- --ignored --nocapture console_browser:: 2>&1 |
    tee "$work/test.out" || status=$?
if [ "$status" -ne 0 ]; then
    echo "browser-test: the last lines of chromedriver's log:" >&2
    tail -n 40 "$work/chromedriver.log" >&2 || true
    die "tests/console_browser.rs failed (exit $status)"
fi
# A filter or rename that runs nothing must not pass either.
grep -q "^test result: ok. 1 passed; 0 failed" "$work/test.out" ||
    die "tests/console_browser.rs ran no browser test"
[ -z "$screenshot" ] || echo "browser-test: wrote $screenshot ($(wc -c <"$screenshot") bytes)"
echo "browser-test: passed"
