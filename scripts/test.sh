#!/usr/bin/env bash
# The test command: installs what is missing, then runs every check CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

step() { printf '\n==> %s\n' "$*"; }

step "format"
cargo fmt --all -- --check
step "lints"
cargo clippy --workspace --all-targets -- -D warnings
step "release build of htbd and htb-cli (the lab tests shape up to 1 Gbit/s; a debug build cannot)"
cargo build --release --quiet -p htbd -p htb-cli
step "unit, property, simulation, CLI and netns lab tests"
HTBD_BIN="$PWD/target/release/htbd" HTB_CLI_BIN="$PWD/target/release/htb-cli" cargo test --workspace
step "benchmarks compile (run them with: cargo bench --bench complexity)"
cargo bench --no-run --quiet
step "htb-core builds and runs in a #![no_std] program"
(cd crates/htb-nostd-check && cargo run --release --quiet && echo "no_std program: ok")
step "all checks passed"
