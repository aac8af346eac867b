#!/usr/bin/env bash
# Checks the layering of src/: which top-level part (src/x.rs or src/x/) may
# import which (`crate::<part>` paths in its .rs files, test files and
# folders excepted), that the parts' imports form no cycle, and that the pure
# core, crates/verdict-engine, depends on no crate that does IO, async, HTTP
# or JSON.
#
# Every part has an allowlist, and a part's imports must be in it: either the
# part itself (`store`) or one of its children (`store::sqlite`, which covers
# src/store/sqlite.rs and src/store/sqlite/). A child may have a list of its
# own, which then replaces its parent's. From the bottom up:
#   leaves      config (only the pure core), support (time formats),
#               telemetry (logs, health, metrics), store (where state lives)
#   state       audit, review, jobs; policy and evidence
#   the path    decide: policy, evidence, the engine and the audit log in,
#               a durably audited decision out; never a door
#   shared      http (bodies, the one error type, API keys), server
#               (listeners), runtime (the state the doors read), webhook,
#               witness
#   doors       api, proxy (neither imports the other), offline (never a
#               running server), app (start-up), cli (everything)
# The engine (crates/verdict-engine, `crate::engine` in src/) is its own
# crate: it cannot import any part of src/, and its manifest's
# [dependencies] may name only ENGINE_DEPS below.
#
# Exits 1 naming every forbidden import, every cycle, and every use of
# decide::Recorder::Discard (the recorder that drops audit records) outside
# src/decide/recorder.rs and the offline door src/offline.
set -euo pipefail
cd "$(dirname "$0")/.."

# The pure core's only dependencies: a hasher and a stemmer, both pure.
ENGINE_DEPS="ahash rust-stemmers"

declare -A ALLOWED=(
    [config]="engine"
    [support]=""
    [telemetry]="config"
    [store]="config telemetry"
    [audit]="config store::sqlite"
    [review]="store support telemetry"
    [jobs]="config store support telemetry"
    [policy]="config engine"
    [evidence]="config engine support"
    [decide]="audit config engine evidence policy support telemetry"
    [http]="audit config decide jobs review"
    [server]="config http support telemetry"
    [runtime]="audit config decide evidence http jobs policy review telemetry"
    [webhook]="config evidence http review support"
    [witness]="audit http server store::postgres"
    [shipping]="audit config http support telemetry"
    [api]="audit config decide engine evidence http jobs policy review runtime server support telemetry"
    [proxy]="config decide engine http policy review runtime server telemetry"
    [offline]="api audit config decide engine evidence http policy proxy"
    [ext_authz]="http proxy runtime server"
    [app]="api audit config decide evidence ext_authz http jobs policy proxy review runtime server shipping store support telemetry webhook witness"
    [cli]="app audit config http offline policy server store telemetry witness"
    [cli::reviews]="config http"
    [cli::backup]="audit"
)

# The files of a part: `x` is src/x.rs and src/x/, less its children that
# have lists of their own; `x::y` is src/x/y.rs and src/x/y/.
files_of() {
    local base="src/${1//:://}"
    {
        [ -f "$base.rs" ] && echo "$base.rs"
        [ -d "$base" ] && find "$base" -name '*.rs' ! -name tests.rs ! -path '*/tests/*'
    } | while read -r f; do
        local own=0 child
        for child in "${!ALLOWED[@]}"; do
            [[ "$child" == "$1::"* ]] || continue
            local c="src/${child//:://}"
            [[ "$f" == "$c.rs" || "$f" == "$c/"* ]] && own=1
        done
        [ $own -eq 0 ] && echo "$f"
    done
    return 0
}

# `file:line:x::y` (or `file:line:x`) for every `crate::` path in the files.
imports() {
    grep -Hno 'crate::[a-z_]*\(::[a-z_]*\)\?' "$@" | sed -E 's/crate:://' || true
}

status=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
for part in "${!ALLOWED[@]}"; do
    list=${ALLOWED[$part]}
    mapfile -t files < <(files_of "$part")
    if [ ${#files[@]} -eq 0 ]; then
        echo "check-layers: no files for $part" >&2
        status=1
        continue
    fi
    top=${part%%::*}
    while IFS=: read -r file line module; do
        [ -z "$module" ] && continue
        target=${module%%::*}
        [ "$target" = "$top" ] && continue
        echo "$top $target" >>"$edges"
        if [[ " $list " != *" $target "* && " $list " != *" $module "* ]]; then
            echo "check-layers: $file:$line: $part may not use crate::$module (allowed: ${list:-nothing})"
            status=1
        fi
    done < <(imports "${files[@]}")
done
# Every top-level folder or file of src/ has a list (main.rs and lib.rs are
# the crate roots).
for f in src/*; do
    name=$(basename "$f" .rs)
    case "$name" in main | lib) continue ;; esac
    if [ -z "${ALLOWED[$name]+x}" ]; then
        echo "check-layers: $f: a part with no allowlist; add one above"
        status=1
    fi
done
# No cycle among the parts' actual imports (tsort names each loop).
cycle=$(sort -u "$edges" | tsort 2>&1 >/dev/null || true)
if [ -n "$cycle" ]; then
    loop=$(awk '/input contains a loop/ { n++; next } n == 1 { sub(/^tsort: /, ""); printf "%s -> ", $0 }' <<<"$cycle")
    echo "check-layers: the parts' imports form a cycle: ${loop% -> } (and back)"
    status=1
fi
# A server decides only with its durable audit log: the recorder that drops
# records (`decide::Recorder::Discard`) is for the offline door (`offline`:
# verdict test, verdict explain) and nowhere else.
while IFS=: read -r file line _; do
    case "$file" in
        src/decide/recorder.rs | src/offline/mod.rs | src/offline/*) ;;
        *)
            echo "check-layers: $file:$line: only the offline door (src/offline) may decide with Recorder::Discard"
            status=1
            ;;
    esac
done < <(grep -rn 'Recorder::Discard' src --include='*.rs' || true)
# [dependencies] of the engine's manifest: every `name = ...` line up to the
# next section.
while read -r dep; do
    if [[ " $ENGINE_DEPS " != *" $dep "* ]]; then
        echo "check-layers: crates/verdict-engine/Cargo.toml: the pure core may not depend on $dep (allowed: $ENGINE_DEPS)"
        status=1
    fi
done < <(awk '/^\[/ { on = ($0 == "[dependencies]") } on && /^[A-Za-z0-9_-]+ *=/ { sub(/ *=.*/, ""); print }' crates/verdict-engine/Cargo.toml)
# Nor may its code reach the outside world through std.
while IFS=: read -r file line _; do
    echo "check-layers: $file:$line: the pure core may not use std's files, network, environment, processes, threads or clock"
    status=1
done < <(grep -rnE 'std::(fs|net|env|process|io|thread|time)\b|\b(Instant|SystemTime)\b' crates/verdict-engine/src || true)
# A file a reader can hold: no hand-written Rust file in src/ or in a
# workspace crate over 800 lines. A generated table says so in its first
# lines ("generated by ... do not edit") and is exempt.
while read -r lines file; do
    [ "$file" = total ] && continue
    if [ "$lines" -gt 800 ] && ! head -n 5 "$file" | grep -q "generated by"; then
        echo "check-layers: $file: $lines lines; split it (at most 800, generated tables excepted)"
        status=1
    fi
done < <(find src crates -name '*.rs' -print0 | xargs -0 wc -l)
[ $status -eq 0 ] && echo "check-layers: ok (${#ALLOWED[@]} parts, no cycle)"
exit $status
