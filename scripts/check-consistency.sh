#!/usr/bin/env bash
# Checks the audit log's checkpoints and consistency proofs with an
# independent implementation: examples/audit_vectors.rs writes a real
# 64-record log's checkpoints and every proof between sizes 1..64, and
# scripts/check-consistency.py (hashlib + cryptography only) verifies them
# and that a flipped hash fails. Installs cryptography into a venv under
# target/ when python3 lacks it. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET_DIR="${CARGO_TARGET_DIR:-target}"
if ! command -v python3 >/dev/null 2>&1; then
    echo "check-consistency: python3 is required" >&2
    exit 1
fi
PY=python3
if ! python3 -c "import cryptography" 2>/dev/null; then
    VENV="$TARGET_DIR/consistency-venv"
    if ! "$VENV/bin/python" -c "import cryptography" 2>/dev/null; then
        echo "== installing cryptography into $VENV"
        python3 -m venv "$VENV"
        "$VENV/bin/python" -m pip install --quiet cryptography
    fi
    PY="$VENV/bin/python"
fi
mkdir -p "$TARGET_DIR"
cargo run --quiet --example audit_vectors > "$TARGET_DIR/audit-vectors.json"
"$PY" scripts/check-consistency.py "$TARGET_DIR/audit-vectors.json"
