#!/usr/bin/env bash
# Summarises a `cargo test --no-fail-fast` log: the totals, and each failing test with the file
# it is in and its one-line reason (the first line of its panic message).
#
#   scripts/test-summary.sh target/test-logs/cargo-test.log [RATES_LOG]
#
# RATES_LOG is the lab tests' report file (HTB_LAB_REPORT, see crates/htb-lab/src/premise.rs):
# a lab test whose every attempt had its window taken by the host returns without a verdict
# and notes "ignored TEST: why" there; libtest counted it as passed, so it is moved to the
# ignored ones here and listed with its reason.
# Exits 1 when the log shows a failure, 0 otherwise.
set -uo pipefail
log="${1:?usage: scripts/test-summary.sh LOG [RATES_LOG]}"
rates="${2:-/dev/null}"

awk -v rates="$rates" '
    # "     Running tests/lab.rs (target/debug/deps/lab-…)" or "unittests src/lib.rs (…)".
    /^ *Running / {
        binary = $2
        if (binary == "unittests") { binary = $3 }
        if (match($0, /\(target\/[^)]*\)/)) {
            path = substr($0, RSTART + 1, RLENGTH - 2)
            n = split(path, parts, "/")
            crate = parts[n]; sub(/-[0-9a-f]+$/, "", crate)
            binary = crate ": " binary
        }
        next
    }
    /^test result: / {
        for (i = 1; i <= NF; i++) {
            if ($(i) ~ /^(passed|failed|ignored);?$/) {
                key = $(i); sub(/;$/, "", key); totals[key] += $(i - 1)
            }
        }
        next
    }
    /^---- .* stdout ----$/ {
        current = $2; reason = ""; want = 0
        where[current] = binary
        next
    }
    current != "" && /panicked at / {
        # The message follows the location on the next line.
        want = 1
        next
    }
    want == 1 {
        reason = $0
        if (length(reason) > 240) { reason = substr(reason, 1, 237) "..." }
        reasons[current] = reason
        want = 0
        current = ""
        next
    }
    # A test binary that died without a result (a crash, a harness error): cargo names it.
    /^error: [0-9]+ targets? failed:$/ { targets = 1; next }
    targets && /^    `/ { broken[++nbroken] = $0; next }
    targets && !/^    `/ { targets = 0 }
    /^failures:$/ { listing = 1; next }
    listing && /^    [^ ]/ {
        name = $1
        if (!(name in failed)) { failed[name] = 1; order[++count] = name }
        next
    }
    listing && !/^    / { listing = 0 }
    END {
        # Lab tests that passed nothing: every attempt unmeasured (the host took the window).
        while ((getline line < rates) > 0) {
            if (line ~ /^ignored /) {
                sub(/^ignored /, "", line)
                unmeasured[++nunmeasured] = line
            }
        }
        totals["passed"] -= nunmeasured
        totals["ignored"] += nunmeasured
        printf "tests: %d passed, %d failed, %d ignored\n", totals["passed"], totals["failed"], totals["ignored"]
        for (i = 1; i <= nunmeasured; i++) {
            printf "  IGNORED at run time (the host took every window) %s\n", unmeasured[i]
        }
        for (i = 1; i <= count; i++) {
            name = order[i]
            r = (name in reasons) ? reasons[name] : "(no panic message: see the log)"
            w = (name in where) ? where[name] ": " : ""
            printf "  FAILED %s%s\n         %s\n", w, name, r
        }
        for (i = 1; i <= nbroken; i++) {
            t = broken[i]; sub(/^ +/, "", t)
            printf "  FAILED target %s\n", t
        }
        exit (count > 0 || totals["failed"] > 0 || nbroken > 0) ? 1 : 0
    }
' "$log"
