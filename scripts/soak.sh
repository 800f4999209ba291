#!/usr/bin/env bash
# Soak (issue 12): htbd under maximum-rate traffic through 1 003 classes with a live change every
# second, for DURATION (default 1h; 3600, 90s, 10m, 1h). Prints frames in use, RSS and drops at
# each report (every minute, or a tenth of a shorter run) and ends with a verdict: every frame
# back, RSS grown at most 1 MiB after the first report, no panic. -> target/htb-bench/soak.json.
# Needs root; uses both cores flat out: run nothing else meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
LAB=htbsoak
cleanup() { LAB=$LAB scripts/lab.sh down; }
trap cleanup EXIT
cargo build --release --quiet -p htbd -p htb-cli -p htb-lab -p htb-xdp-gen --bins
target/release/htb-lab soak --lab "$LAB" --duration "${1:-1h}" "${@:2}" &
soak=$!
trap 'kill -TERM $soak 2>/dev/null; exit 130' INT TERM
wait $soak
