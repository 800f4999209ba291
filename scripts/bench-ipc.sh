#!/usr/bin/env bash
# The live-change benchmark (issue 5): 10 000 class changes through the IPC and the CLI while
# UDP flows through htbd; changes/s, time to apply, packets lost -> target/htb-bench/ipc.json.
# Needs root. Takes ~1 min.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
LAB=htbipc
cleanup() { LAB=$LAB scripts/lab.sh down; }
trap cleanup EXIT
cargo build --release --quiet -p htbd -p htb-cli -p htb-lab
target/release/htb-lab bench-ipc --lab "$LAB" "$@" &
bench=$!
trap 'kill -TERM $bench 2>/dev/null; exit 130' INT TERM
wait $bench
