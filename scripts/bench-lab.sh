#!/usr/bin/env bash
# The lab benchmark (issue 4): htbd against kernel forwarding and kernel HTB in the same lab, in
# one run -> target/htb-bench/lab.json. `--quick` for a short run. Needs root. Takes ~10 min.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
LAB=htbbench
cleanup() { LAB=$LAB scripts/lab.sh down; }
trap cleanup EXIT
cargo build --release --quiet -p htbd -p htb-lab -p htb-xdp-gen
target/release/htb-lab bench --lab "$LAB" "$@" &
bench=$!
trap 'kill -TERM $bench 2>/dev/null; exit 130' INT TERM
wait $bench
