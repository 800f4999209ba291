#!/usr/bin/env bash
# cargo-deny over the dependency graph (deny.toml): licences, bans and duplicates, sources.
# Installs cargo-deny from crates.io when missing (about 5 minutes on 2 cores, which is why the
# CI run only uses it where it is already installed). `--advisories` also checks RustSec's
# advisory database, which needs GitHub (this project's machines cannot reach it).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-deny >/dev/null; then
    cargo install --locked cargo-deny --version 0.20.2
fi
checks=(bans licenses sources)
offline=(--offline)
if [ "${1:-}" = "--advisories" ]; then
    checks+=(advisories)
    offline=()
fi
cargo deny "${offline[@]}" check "${checks[@]}"
