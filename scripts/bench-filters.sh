#!/usr/bin/env bash
# 10 000 subscriber filters against 1 (issue 10): 64-byte packets/s and CPU per packet through
# htbd and through the kernel's HTB with flat u32 filters and with u32 hash tables
# -> target/htb-bench/filters.json. Needs root. Takes ~2 min (--quick: ~1 min).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
LAB=htbfilt
cleanup() { LAB=$LAB scripts/lab.sh down; }
trap cleanup EXIT
cargo build --release --quiet -p htbd -p htb-cli -p htb-lab -p htb-xdp-gen --bins
target/release/htb-lab filters --lab "$LAB" "$@" &
bench=$!
trap 'kill -TERM $bench 2>/dev/null; exit 130' INT TERM
wait $bench
