#!/usr/bin/env bash
# Forwarding against cores (issue 20): 1..N pinned generators (one TX queue each), htbd with as
# many pinned workers, kernel HTB with one root, kernel mq + HTB per queue; 64 and 1514-byte
# frames -> target/htb-bench/cores.json and cores.svg. Needs root. Options go to `htb-lab cores`
# (--max N: the most generators, default 2; --quick: shorter windows).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
LAB=htbcores
cleanup() { LAB=$LAB scripts/lab.sh down; }
trap cleanup EXIT
cargo build --release --quiet -p htbd -p htb-cli -p htb-lab -p htb-xdp-gen --bins
target/release/htb-lab cores --lab "$LAB" "$@" &
bench=$!
trap 'kill -TERM $bench 2>/dev/null; exit 130' INT TERM
wait $bench
