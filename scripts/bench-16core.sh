#!/usr/bin/env bash
# The 16-core runs of issue 20 in one command, for the lent machine (../shared/device/README.md):
# `htb-lab cores` at 1, 2, 4 and 7 generators, then seed 001's sweep with 7 queues (one class at
# 1 to 10 Gbit/s, MTU 1500 and 9000, UDP and TCP; a root shared by 7 workers at 5 to 40 Gbit/s),
# then one class at 20 Gbit/s of 1514-byte UDP split over the 7 workers (its rate is above
# htbd's split_above, 4gbit: docs/several-cores.md, "Split classes"; the goal is within 0.1 %),
# into OUT/split. About 7 minutes (the first two parts: 5 min 11 s on the lent machine,
# 2026-11-26). Each part writes its JSON, SVG and log into OUT (default target/htb-bench);
# a part that fails does not stop the next. Binaries: HTBD_BIN's directory (htbd, htb-xdp-gen,
# htb-cli) and htb-lab on PATH, as ../shared/device/remote.sh sets them up; here, after
# `cargo build --release`, target/release.
# Usage: scripts/bench-16core.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/htb-bench}
mkdir -p "$out"
export HTB_REPO=$PWD
lab_bin=$(command -v htb-lab || echo target/release/htb-lab)
export HTBD_BIN=${HTBD_BIN:-$(dirname "$lab_bin")/htbd}
{ echo "nproc $(nproc), kernel $(uname -r)"; grep -m1 'model name' /proc/cpuinfo; } | tee "$out/machine.txt"
status=0
"$lab_bin" cores --quick --max 7 --generators 1,2,4,7 --out "$out" 2>&1 | tee "$out/cores.log" \
    || status=1
"$lab_bin" sweep --queues 7 --seconds 5 --rates 1gbit,3gbit,10gbit \
    --shared-rates 5gbit,10gbit,20gbit,40gbit --out "$out" 2>&1 | tee "$out/sweep.log" || status=1
mkdir -p "$out/split"
"$lab_bin" sweep --queues 7 --seconds 5 --mtu 1500 --rates 20gbit --shared-rates 20gbit \
    --out "$out/split" 2>&1 | tee "$out/split/sweep.log" || status=1
exit $status
