#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for SECONDS each (default 60), one after
# the other, niced so the machine stays usable.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). libFuzzer needs nightly
# compiler flags; on a stable toolchain RUSTC_BOOTSTRAP=1 unlocks them.
# Corpora grow in fuzz/corpus/<target> (seeded from fuzz/seeds/<target>),
# crashes land in fuzz/artifacts/<target>; neither is committed. A crash
# stops the script with a non-zero exit and the reproducer's path.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(policy extract engine wire canonical)
fi

if ! cargo fuzz --help >/dev/null 2>&1; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 2
fi

export RUSTC_BOOTSTRAP=1
nice -n 10 cargo fuzz build -O

for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    echo "== fuzz $t for ${seconds}s"
    nice -n 10 cargo fuzz run -O "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
done
