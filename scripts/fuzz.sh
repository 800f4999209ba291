#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60), seeded from fuzz/corpus/ (the
# committed seeds; new inputs go to target/fuzz-corpus/, not into the repository), and prints
# and saves each target's executions and outcome in target/htb-bench/fuzz.json.
#   scripts/fuzz.sh 3        # what CI runs (with FUZZ_BUILD below)
#   scripts/fuzz.sh 1800     # a long run
# A crash or a hang (an input running over 10 s) fails the script and leaves the input in
# fuzz/artifacts/TARGET/ (reproduce: cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
root="$PWD"
mkdir -p target/htb-bench
cd fuzz
# FUZZ_BUILD: cargo-fuzz build options (CI builds `--dev --sanitizer none`: a smoke run that
# builds in a fraction of the time; long runs keep the optimized ASan build).
read -r -a build <<<"${FUZZ_BUILD:-}"
# cargo-fuzz has no --locked: a resolve with --locked fails here when fuzz/Cargo.lock is stale,
# instead of the build quietly rewriting it.
if ! cargo +nightly metadata --locked --format-version 1 >/dev/null 2>"$root/target/fuzz-lock.log"; then
    cat "$root/target/fuzz-lock.log"
    echo "fuzz/Cargo.lock is out of date: run (cd fuzz && cargo +nightly update -w) and commit it"
    exit 1
fi
if ! cargo +nightly fuzz build "${build[@]}" >"$root/target/fuzz-build.log" 2>&1; then
    grep -E '^(error|warning: unused)' -A 6 "$root/target/fuzz-build.log" | head -n 40
    echo "the fuzz targets do not build: see target/fuzz-build.log"
    exit 1
fi
results=()
status=0
for target in $(cargo +nightly fuzz list); do
    scratch="$root/target/fuzz-corpus/$target"
    mkdir -p "$scratch" "artifacts/$target"
    log="$root/target/fuzz-$target.log"
    if cargo +nightly fuzz run "${build[@]}" "$target" "$scratch" "corpus/$target" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1; then
        outcome=ok
    else
        outcome=failed
        status=1
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1)
    execs="${execs:-0}"
    printf '%-12s %-7s %12s executions in %ss\n' "$target" "$outcome" "$execs" "$secs"
    if [ "$outcome" = failed ]; then
        grep -E 'ERROR|panicked|SUMMARY|Test unit written' "$log" | head -n 20 || true
    fi
    results+=("{\"target\":\"$target\",\"seconds\":$secs,\"executions\":$execs,\"outcome\":\"$outcome\"}")
done
(IFS=,; echo "[${results[*]}]") >"$root/target/htb-bench/fuzz.json"
echo "saved target/htb-bench/fuzz.json"
exit "$status"
