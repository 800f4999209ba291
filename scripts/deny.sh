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
# cargo-deny reads the metadata of every platform's dependencies (windows-sys …), which a build
# on Linux never downloads: fetch them first, or the offline check fails on a fresh machine.
cargo fetch --locked --quiet
cargo deny "${offline[@]}" check "${checks[@]}"
