#!/usr/bin/env bash
# The test command: installs what is missing, then runs every check CI runs. A failing step
# does not stop the others: the run ends with a summary of every failed step and every failing
# test with its one-line reason, and exits 1 if there was any.
#
# HTB_LAB_STALLS=4/50 imitates a noisy host (every CPU taken for 4 ms every 50 ms) in each
# netns lab the tests build; see "Tests on a noisy machine" in docs/tests.md.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
# setup.sh stops at its first error; from here a failed step is noted and the run goes on.
set +e

# No line tables in CI's builds (panics still name their file and line): ~20 s less of
# compiling and linking the test binaries on 2 cores, where CI's 40 minutes are the budget.
export CARGO_PROFILE_DEV_DEBUG=false CARGO_PROFILE_RELEASE_DEBUG=false

logs=target/test-logs
mkdir -p "$logs"
started=$(date +%s)
failed_steps=()
# Each step says how long the run has taken so far (CI must stay under 40 minutes on 2 cores).
step() { printf '\n==> [%ss] %s\n' "$(($(date +%s) - started))" "$*"; }
# Runs a step's command; a failure is noted for the summary and the run goes on.
check() {
    local name="$1"
    shift
    if ! "$@"; then
        failed_steps+=("$name")
        echo "==> step failed: $name"
    fi
}

if [ -n "${HTB_LAB_STALLS:-}" ]; then
    echo "HTB_LAB_STALLS=$HTB_LAB_STALLS: every netns lab runs beside an imitated noisy host"
fi

step "format"
check "format" cargo fmt --all -- --check
step "lints"
check "lints" cargo clippy --workspace --all-targets -- -D warnings
step "docs (rustdoc's link checks; the dependencies' metadata is clippy's, so this is seconds)"
RUSTDOCFLAGS="-D warnings" check "docs" cargo doc --no-deps --workspace --quiet
step "the book (mdbook build docs into target/book) and its links, and the README's"
# RUST_LOG=warn: mdbook's progress lines are INFO; its warnings and errors still show.
check "book" bash -c 'RUST_LOG=warn mdbook build docs && scripts/check-links.py target/book README.md'
step "dependency licences, bans and sources (cargo-deny; the advisories need GitHub: scripts/deny.sh --advisories)"
check "dependencies" scripts/deny.sh
step "release build of htbd, htb-cli and htb-xdp-gen (the lab tests shape up to 1 Gbit/s; a debug build cannot)"
check "release build" cargo build --release --quiet -p htbd -p htb-cli -p htb-xdp-gen --bins
# The netns lab tests are #[ignore]d (they need root and network namespaces): included here when
# root, otherwise the summary lists them as ignored.
LAB=()
if [ "$(id -u)" -eq 0 ]; then
    LAB=(--include-ignored)
else
    echo "not root: the netns lab tests are reported as ignored (run this script as root to include them)"
fi
step "unit, property, simulation, CLI and netns lab tests (every one, failures or not)"
tests_log="$logs/cargo-test.log"
# Every rate check of the lab tests, passed or failed, with its raw and accounted error.
rates_log="$logs/rates.log"
: >"$rates_log"
HTBD_BIN="$PWD/target/release/htbd" HTB_CLI_BIN="$PWD/target/release/htb-cli" \
    HTB_XDP_GEN_BIN="$PWD/target/release/htb-xdp-gen" HTB_LAB_REPORT="$PWD/$rates_log" \
    cargo test --workspace --no-fail-fast -- "${LAB[@]}" 2>&1 | tee "$tests_log"
[ "${PIPESTATUS[0]}" -eq 0 ] || failed_steps+=("tests")
step "fuzz targets, 3 s each, unoptimized and without ASan to build fast (long runs: scripts/fuzz.sh SECONDS)"
FUZZ_BUILD="--dev --sanitizer none" check "fuzz" scripts/fuzz.sh 3
# The benchmarks are type-checked and linted with every target by the lints step (clippy
# --all-targets); building them again in the bench profile cost CI a minute and a half.
step "htb-core builds and runs in a #![no_std] program"
check "no_std" bash -c 'cd crates/htb-nostd-check && cargo run --release --quiet && echo "no_std program: ok"'

step "summary"
if [ -s "$rates_log" ]; then
    echo "rate checks ($(wc -l <"$rates_log"), each judged by what its class owed in its window; \"unmeasured\": a window the host took, measured again):"
    sed 's/^/  /' "$rates_log"
fi
scripts/test-summary.sh "$tests_log" "$rates_log"
tests_ok=$?
if ((${#failed_steps[@]} == 0)) && ((tests_ok == 0)); then
    echo "==> all checks passed in $(($(date +%s) - started)) s"
    exit 0
fi
echo "==> failed steps: ${failed_steps[*]:-none} (the tests' log: $tests_log)"
exit 1
