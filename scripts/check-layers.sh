#!/usr/bin/env bash
# Checks which parts of src/ may import which (`crate::<module>` paths in
# their .rs files, test files and folders excepted), so that the layering stays true,
# and that the pure core, crates/verdict-engine, depends on no crate that
# does IO, async, HTTP or JSON.
#
# The engine (crates/verdict-engine, `crate::engine` in src/) is its own
# crate: it cannot import any part of src/, and its manifest's
# [dependencies] may name only ENGINE_DEPS below.
#
# Allowlists (a part may use only these):
#   decide            audit, config, engine, evidence, policy:
#                     the one decision path; never api, proxy or app
#   policy            config, engine
#   audit             config, store::sqlite
#   evidence          config, engine
#   jobs              config, store::postgres, store::sqlite, runtime::health, runtime::metrics
#   review            store::postgres, store::sqlite, runtime::health, runtime::metrics (its
#                     errors become HTTP in src/api/error.rs)
#   store             config, runtime::health, runtime::metrics: the PostgreSQL connection
#                     side of the shared store, SQLite's busy handlers and the
#                     data dir lock; the tables belong to audit, review and jobs
#   webhook           config, evidence, api::http_util, review: the review webhook
#   cli::reviews      config, api::http_util: `verdict reviews` talks to the API over HTTP only
#   cli::backup       audit: `verdict backup`, a copy of the data dir
#   witness           audit, api::http_util, server, store::postgres (remote: checkpoints published to the shared store)
#   runtime           audit, api::auth, config, decide, evidence, jobs, policy,
#                     review (src/runtime/mod.rs: the shared state under the doors)
#   api::auth         config
#   api::error        api::http_util, audit, decide, jobs, review: one From
#                     per domain error
#   api::http_util    api::error, audit
#   runtime::health   nothing
#   runtime::metrics  nothing
# Denylists (a part may use anything but these):
#   api               app, proxy: start-up wires the doors, not the reverse
#   proxy             api, app: of the HTTP face it may use only the leaves
#                     api::auth, api::error and api::http_util, which count
#                     as parts of their own
#   offline           app, runtime, server: verdict test and explain read
#                     requests with the doors' readers (api::authorize,
#                     proxy::read) and decide offline; they never touch a
#                     running server
# Start-up (app) and the rest of the command line (cli) may use anything. Exits 1 naming every forbidden import,
# and every use of decide::Recorder::Discard (the recorder that drops
# audit records) outside src/decide/recorder.rs and the offline door
# src/offline.
set -euo pipefail
cd "$(dirname "$0")/.."

# The pure core's only dependencies: a hasher and a stemmer, both pure.
ENGINE_DEPS="ahash rust-stemmers"

declare -A ALLOWED=(
    [decide]="audit config engine evidence policy"
    [policy]="config engine"
    [audit]="config store::sqlite"
    [evidence]="config engine"
    [store]="config runtime::health runtime::metrics"
    [jobs]="config store::postgres store::sqlite runtime::health runtime::metrics"
    [review]="store::postgres store::sqlite runtime::health runtime::metrics"
    [webhook]="config evidence api::http_util review"
    [cli::reviews]="config api::http_util"
    [cli::backup]="audit"
    [witness]="audit api::http_util server store::postgres"
    [runtime]="audit api::auth config decide evidence jobs policy review runtime::health runtime::metrics runtime::telemetry"
    [api::auth]="config"
    [api::error]="api::http_util audit decide jobs review"
    [api::http_util]="api::error audit"
    [runtime::health]=""
    [runtime::metrics]=""
)
declare -A FORBIDDEN=(
    [api]="app proxy"
    [proxy]="api app"
    [offline]="app runtime server"
)

# The files of a part: `x` is src/x.rs or src/x/ (but `runtime` is only
# src/runtime/mod.rs), and `x::y` is src/x/y.rs.
files_of() {
    case "$1" in
        runtime) echo src/runtime/mod.rs ;;
        *::*)
            local leaf="src/${1%%::*}/${1#*::}"
            [ -f "$leaf.rs" ] && echo "$leaf.rs"
            [ -d "$leaf" ] && find "$leaf" -name '*.rs' ! -name tests.rs ! -path '*/tests/*'
            ;;
        *)
            [ -f "src/$1.rs" ] && echo "src/$1.rs"
            [ -d "src/$1" ] && find "src/$1" -name '*.rs' ! -name tests.rs ! -path '*/tests/*'
            ;;
    esac
    return 0
}

# `file:line:module` for every `crate::` path in the files; the leaf
# modules of runtime, api and store count as themselves, and any other
# `crate::x::y` as `x`.
imports() {
    grep -Hno 'crate::[a-z_]*\(::\(health\|metrics\|telemetry\|auth\|error\|http_util\|postgres\|sqlite\|datalock\)\b\)\?' "$@" \
        | sed -E 's/crate::runtime::(health|metrics|telemetry)$/runtime::\1/; s/crate::api::(auth|error|http_util)$/api::\1/; s/crate::store::(postgres|sqlite|datalock)$/store::\1/; s/crate::([a-z_]*)(::[a-z_]*)?$/\1/' || true
}

status=0
check() {
    local part=$1 mode=$2 list=$3
    local files
    mapfile -t files < <(files_of "$part")
    if [ ${#files[@]} -eq 0 ]; then
        echo "check-layers: no files for $part" >&2
        status=1
        return
    fi
    while IFS=: read -r file line module; do
        [ -z "$module" ] && continue
        [ "$module" = "$part" ] && continue
        [[ "$part" == runtime && "$module" == runtime::* && "$list" == *"$module"* ]] && continue
        if [ "$mode" = allow ] && [[ " $list " != *" $module "* ]]; then
            echo "check-layers: $file:$line: $part may not use crate::$module (allowed: ${list:-nothing})"
            status=1
        elif [ "$mode" = deny ] && [[ " $list " == *" $module "* ]]; then
            echo "check-layers: $file:$line: $part may not use crate::$module"
            status=1
        fi
    done < <(imports "${files[@]}")
}
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
for part in "${!ALLOWED[@]}"; do check "$part" allow "${ALLOWED[$part]}"; done
for part in "${!FORBIDDEN[@]}"; do check "$part" deny "${FORBIDDEN[$part]}"; done
[ $status -eq 0 ] && echo "check-layers: ok ($((${#ALLOWED[@]} + ${#FORBIDDEN[@]})) parts)"
exit $status
