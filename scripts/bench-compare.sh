#!/usr/bin/env bash
# Compares the core's benchmarks of another commit with this working tree in one run, the two
# builds interleaved round by round, so that the machine's drift (a VM's neighbours, its
# clock) falls on both alike. Absolute figures move between runs and machines; only a
# comparison like this one can say "faster" or "no slower".
#
#   scripts/bench-compare.sh REV [FILTER] [ROUNDS]
#
# REV: the commit to compare with (e.g. HEAD~3, fe81c1e). FILTER: criterion's benchmark filter
# (default: hotpath/pfifo/backlogged_1/100000). ROUNDS: runs of each build (default 5). Each run
# is `cargo bench --bench complexity` with HTB_BENCH_QUICK=1. Prints each round's median per
# benchmark and the ratio of the medians of the rounds (this tree / REV).
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:?usage: scripts/bench-compare.sh REV [FILTER] [ROUNDS]}"
filter="${2:-hotpath/pfifo/backlogged_1/100000}"
rounds="${3:-5}"
sha=$(git rev-parse --short "$rev")
out=target/bench-compare
mkdir -p "$out"
old="$out/tree-$sha"
if [ ! -d "$old" ]; then
    git worktree add --detach "$old" "$sha" >/dev/null
fi
# Each tree builds into its own target directory: the two builds never overwrite each other.
build() {
    (cd "$1" && cargo bench --bench complexity --no-run 2>&1 |
        grep -o '(target/[^)]*complexity-[0-9a-f]*)' | tr -d '()' | tail -1)
}
echo "building $sha and this tree's complexity benchmark"
old_bin="$PWD/$old/$(build "$old")"
new_bin="$PWD/$(build .)"
[ -x "$old_bin" ] && [ -x "$new_bin" ] || { echo "no benchmark binary: $old_bin $new_bin" >&2; exit 1; }

# Criterion's median: the middle figure of "time: [low median high]", in ns.
median() {
    awk '/time:/ {
        gsub(/[\[\]]/, "")
        for (i = 1; i <= NF; i++) if ($i == "time:") { v = $(i + 3); u = $(i + 4) }
        f = (u == "ps") ? 0.001 : (u == "µs" || u == "us") ? 1000 : (u == "ms") ? 1e6 : 1
        printf "%.2f\n", v * f
    }'
}
results="$out/$sha-vs-tree.txt"
: >"$results"
for round in $(seq 1 "$rounds"); do
    for which in old new; do
        bin=$old_bin
        [ "$which" = new ] && bin=$new_bin
        m=$(cd "$([ "$which" = old ] && echo "$old" || echo .)" &&
            HTB_BENCH_QUICK=1 "$bin" --bench "$filter" 2>/dev/null | median | head -1)
        echo "round $round $which $m" | tee -a "$results"
    done
done
# The median of a list of numbers.
mid() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
old_m=$(awk '$3 == "old" { print $4 }' "$results" | mid)
new_m=$(awk '$3 == "new" { print $4 }' "$results" | mid)
echo "$filter: $sha $(awk '$3 == "old" { printf "%s ", $4 }' "$results")ns (median $old_m)"
echo "$filter: this tree $(awk '$3 == "new" { printf "%s ", $4 }' "$results")ns (median $new_m)"
awk -v a="$new_m" -v b="$old_m" -v sha="$sha" 'BEGIN { printf "this tree / %s: %.3f\n", sha, a / b }'
