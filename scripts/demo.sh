#!/usr/bin/env bash
# The main job (until the netns lab exists): run every example scenario on the simulator and
# write its per-class rate chart to target/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -q -p htb-cli
mkdir -p target/demo
for scenario in examples/*.toml; do
    name=$(basename "$scenario" .toml)
    printf '\n=== %s\n' "$scenario"
    target/release/htb-cli sim "$scenario" --svg "target/demo/$name.svg"
done
printf '\ncharts: %s\n' "$(ls target/demo/*.svg | tr '\n' ' ')"
