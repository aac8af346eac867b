#!/usr/bin/env bash
# Checks which parts of src/ may import which (`crate::<module>` paths in
# every .rs file of a part), so that the layering stays true:
#
#   engine    nothing: the pure core (claims, evidence, decisions)
#   decide    audit, config, engine, evidence, metrics, policy: the one
#             decision path; never api, proxy or app, which call it
#   policy    config, engine
#   audit     config, sqlite
#   evidence  config, engine
#   jobs      config, health, metrics, sqlite
#   review    error, health, metrics, sqlite
#   witness   audit, http_util, server
#
# The HTTP face and start-up (api, app, proxy, server) are not constrained
# here yet. Exits 1 naming every import a rule forbids.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A ALLOWED=(
    [engine]=""
    [decide]="audit config engine evidence metrics policy"
    [policy]="config engine"
    [audit]="config sqlite"
    [evidence]="config engine"
    [jobs]="config health metrics sqlite"
    [review]="error health metrics sqlite"
    [witness]="audit http_util server"
)

status=0
for part in "${!ALLOWED[@]}"; do
    files=()
    [ -f "src/$part.rs" ] && files+=("src/$part.rs")
    [ -d "src/$part" ] && while IFS= read -r f; do files+=("$f"); done < <(find "src/$part" -name '*.rs')
    [ ${#files[@]} -eq 0 ] && { echo "check-layers: no src/$part" >&2; status=1; continue; }
    # Every `crate::x` a file names, with its file and line.
    while IFS=: read -r file line module; do
        [ "$module" = "$part" ] && continue
        if [[ " ${ALLOWED[$part]} " != *" $module "* ]]; then
            echo "check-layers: $file:$line: $part may not use crate::$module (allowed: ${ALLOWED[$part]:-nothing})"
            status=1
        fi
    done < <(grep -Hno 'crate::[a-z_]*' "${files[@]}" | sed -E 's/crate:://')
done
[ $status -eq 0 ] && echo "check-layers: ok (${#ALLOWED[@]} parts)"
exit $status
