#!/usr/bin/env bash
# One data-plane worker against two, and against the kernel's HTB (issue 11): 64-byte packets/s
# and machine CPU per packet on veths with two queues, two generators (one per queue)
# -> target/htb-bench/workers.json. Needs root. Takes ~3 min (--quick: ~1 min).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
LAB=htbwork
cleanup() { LAB=$LAB scripts/lab.sh down; }
trap cleanup EXIT
cargo build --release --quiet -p htbd -p htb-cli -p htb-lab -p htb-xdp-gen --bins
target/release/htb-lab workers --lab "$LAB" "$@" &
bench=$!
trap 'kill -TERM $bench 2>/dev/null; exit 130' INT TERM
wait $bench
