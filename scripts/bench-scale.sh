#!/usr/bin/env bash
# 100 000 subscribers on one box (issue 10): a ShapedDevices.csv import through htb-cli while a
# steady flow crosses htbd, the longest forwarding gap during it, a Prometheus scrape and
# `class show -s` of every class, htbd's RSS -> target/htb-bench/scale.json.
# Needs root. Takes ~1 min. Options: --subscribers N.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
LAB=htbscale
cleanup() { LAB=$LAB scripts/lab.sh down; }
trap cleanup EXIT
cargo build --release --quiet -p htbd -p htb-cli -p htb-lab -p htb-xdp-gen --bins
target/release/htb-lab scale --lab "$LAB" "$@" &
bench=$!
trap 'kill -TERM $bench 2>/dev/null; exit 130' INT TERM
wait $bench
