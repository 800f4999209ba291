#!/usr/bin/env bash
# The main job: the netns lab demo. Installs what is missing, builds, brings up seed 003's
# node-1 - router - node-2 lab, runs htbd in the router with examples/lab.toml while iperf3
# drives UDP through every class at once, then does the same through the kernel's HTB (same
# tree via `htbd --print-tc`), prints both side by side against HTB's theory, writes
# target/demo/demo.svg, and tears the lab down -- also when interrupted. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
LAB=htbdemo
cleanup() { LAB=$LAB scripts/lab.sh down; }
trap cleanup EXIT
cargo build --release --quiet -p htbd -p htb-lab
# In the background and waited for, so that an interrupt is handled at once (bash defers traps
# while a foreground child runs); the lab teardown stops everything running inside it.
target/release/htb-lab demo --config examples/lab.toml --lab "$LAB" "$@" &
demo=$!
trap 'kill -TERM $demo 2>/dev/null; exit 130' INT TERM
wait $demo
