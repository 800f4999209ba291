#!/usr/bin/env bash
# Counts the core's hot path in another commit and in this working tree: instructions and
# simulated cache misses per enqueue + dequeue pair, by cachegrind. Counts do not move with a
# noisy host (a VM's neighbours, a stolen vCPU) as times do, so one run of each build says
# whether a change executes more or misses more; scripts/bench-compare.sh says what that costs
# in time, interleaved. The simulated caches are the host's sizes; TLB misses and the real
# machine's memory are not simulated.
#
#   scripts/bench-count.sh REV [CLASSES] [LEAF]
#
# REV: the commit to compare with. CLASSES: leaves round-robin (default 100000). LEAF: pfifo
# (default), fq_codel or cake. The driver (scripts/hotcount/main.rs) is built against each tree's
# htb-core; it runs twice per build (N and 2N pairs) and the difference is divided by N, so the
# tree's building is not counted. Needs valgrind (apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:?usage: scripts/bench-count.sh REV [CLASSES] [LEAF]}"
classes="${2:-100000}"
leaf="${3:-pfifo}"
n=300000
command -v valgrind >/dev/null || { echo "bench-count: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
sha=$(git rev-parse --short "$rev")
out=target/bench-count
mkdir -p "$out"
old="$PWD/target/bench-compare/tree-$sha"
[ -d "$old" ] || git worktree add --detach "$old" "$sha" >/dev/null

# A crate of the driver against one tree's htb-core, built in release.
build() {
    local name=$1 core=$2 dir="$PWD/$out/driver-$1"
    mkdir -p "$dir/src"
    cp scripts/hotcount/main.rs "$dir/src/main.rs"
    if ! grep -rq CakeConfig "$core/src"; then
        # A tree from before cake (fe81c1e, issue 41's baseline): the driver without it.
        sed -i -e 's/CakeConfig, //' -e '/"cake" => LeafConfig::Cake/d' \
            -e '/One subscriber host per leaf/,/^    }$/d' "$dir/src/main.rs"
    fi
    cat >"$dir/Cargo.toml" <<TOML
[package]
name = "hotcount"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
htb-core = { path = "$core" }

[profile.release]
debug = "line-tables-only"

[workspace]
TOML
    (cd "$dir" && CARGO_TARGET_DIR="$dir/target" cargo build --release -q) >&2
    echo "$dir/target/release/hotcount"
}

# cachegrind's totals for one run: instructions, D1 misses, LL misses.
counts() {
    valgrind --tool=cachegrind --cache-sim=yes --cachegrind-out-file=/dev/null "$@" 2>&1 >/dev/null |
        awk '/I +refs:/ { gsub(",", "", $4); i = $4 }
             /D1  misses:/ { gsub(",", "", $4); d = $4 }
             /LL misses:/ { gsub(",", "", $4); l = $4 }
             END { print i, d, l }'
}

echo "building the driver against $sha and this tree" >&2
old_bin=$(build "$sha" "$old/crates/htb-core")
new_bin=$(build tree "$PWD/crates/htb-core")
results="$out/$sha-vs-tree-$leaf-$classes.txt"
: >"$results"
for which in "$sha:$old_bin" "tree:$new_bin"; do
    name=${which%%:*} bin=${which#*:}
    read -r i1 d1 l1 < <(counts "$bin" "$classes" "$n" "$leaf")
    read -r i2 d2 l2 < <(counts "$bin" "$classes" $((2 * n)) "$leaf")
    awk -v name="$name" -v n="$n" -v i="$((i2 - i1))" -v d="$((d2 - d1))" -v l="$((l2 - l1))" \
        'BEGIN { printf "%-8s %8.1f instructions  %6.3f D1 misses  %6.3f LL misses per pair\n", name, i / n, d / n, l / n }' |
        tee -a "$results"
done
echo "hotpath/$leaf/backlogged_1/$classes (cachegrind): $results"
