#!/usr/bin/env bash
# The test command: installs what is missing, then runs every check CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

# No line tables in CI's builds (panics still name their file and line): ~20 s less of
# compiling and linking the test binaries on 2 cores, where CI's 25 minutes are close.
export CARGO_PROFILE_DEV_DEBUG=false CARGO_PROFILE_RELEASE_DEBUG=false

started=$(date +%s)
# Each step says how long the run has taken so far (CI must stay under 25 minutes on 2 cores).
step() { printf '\n==> [%ss] %s\n' "$(($(date +%s) - started))" "$*"; }

step "format"
cargo fmt --all -- --check
step "lints"
cargo clippy --workspace --all-targets -- -D warnings
step "docs (rustdoc's link checks; the dependencies' metadata is clippy's, so this is seconds)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --quiet
step "dependency licences, bans and sources (cargo-deny; the advisories need GitHub: scripts/deny.sh --advisories)"
scripts/deny.sh
step "release build of htbd, htb-cli and htb-xdp-gen (the lab tests shape up to 1 Gbit/s; a debug build cannot)"
cargo build --release --quiet -p htbd -p htb-cli -p htb-xdp-gen --bins
# The netns lab tests are #[ignore]d (they need root and network namespaces): included here when
# root, otherwise the summary lists them as ignored.
LAB=()
if [ "$(id -u)" -eq 0 ]; then
    LAB=(-- --include-ignored)
else
    echo "not root: the netns lab tests are reported as ignored (run this script as root to include them)"
fi
step "unit, property, simulation, CLI and netns lab tests"
HTBD_BIN="$PWD/target/release/htbd" HTB_CLI_BIN="$PWD/target/release/htb-cli" \
    HTB_XDP_GEN_BIN="$PWD/target/release/htb-xdp-gen" cargo test --workspace "${LAB[@]}"
step "fuzz targets, 3 s each, unoptimized and without ASan to build fast (long runs: scripts/fuzz.sh SECONDS)"
FUZZ_BUILD="--dev --sanitizer none" scripts/fuzz.sh 3
# The benchmarks are type-checked and linted with every target by the lints step (clippy
# --all-targets); building them again in the bench profile cost CI a minute and a half.
step "htb-core builds and runs in a #![no_std] program"
(cd crates/htb-nostd-check && cargo run --release --quiet && echo "no_std program: ok")
step "all checks passed"
