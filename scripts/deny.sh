#!/usr/bin/env bash
# cargo-deny over the dependency graph (deny.toml): licences, bans and duplicates, sources.
# scripts/setup.sh installs cargo-deny when missing. `--advisories` also checks RustSec's
# advisory database, which needs GitHub (this project's machines cannot reach it).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-deny >/dev/null || source scripts/setup.sh
checks=(bans licenses sources)
offline=(--offline)
if [ "${1:-}" = "--advisories" ]; then
    checks+=(advisories)
    offline=()
fi
cargo deny "${offline[@]}" check "${checks[@]}"
