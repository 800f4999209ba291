#!/usr/bin/env bash
# Seed 001's sweep (issue 20): one class from 100 Mbit/s up at MTU 1500 and 9000, UDP from the
# AF_XDP generator and TCP from iperf3, htbd against the kernel's HTB, then a root shared by
# every worker -> target/htb-bench/sweep.json and sweep.svg. Needs root. Options go to
# `htb-lab sweep` (--quick: ~2 min; --queues N: N generators and N workers; --max-rate 10gbit).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
LAB=htbsweep
cleanup() { LAB=$LAB scripts/lab.sh down; }
trap cleanup EXIT
cargo build --release --quiet -p htbd -p htb-cli -p htb-lab -p htb-xdp-gen --bins
target/release/htb-lab sweep --lab "$LAB" "$@" &
bench=$!
trap 'kill -TERM $bench 2>/dev/null; exit 130' INT TERM
wait $bench
