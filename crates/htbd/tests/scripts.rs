//! Real tc scripts, kept under `tests/scripts/` with their sources named, run verbatim through
//! `htb-cli -b` and, in the same lab, through the kernel's own `tc`: every class delivers what
//! HTB's arithmetic says it owed in its window, within 1 %, through htbd and through the kernel
//! alike (each judged with what kept it from forwarding: htbd's stalls, the host's stolen time
//! for the kernel), so the two shape alike.
//!
//! Needs root and network namespaces, so each test is `#[ignore]`d; `scripts/test.sh` includes
//! them as root. The kernel here has no sfq or fq_codel: its classes keep pfifo where a script
//! gives those (which does not change a saturated class's rate).

use htb_lab::shaper::apply_tc;
use htb_lab::traffic::{FRAME as FRAME_LEN, FlowSpec, script, udp_flows};
use htb_lab::{Htbd, Lab, Promise, R, assert_owed, host_accounted};

/// Router mode with no tree on either port: the script builds them.
const NO_TREES: &str = "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\n\
     [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n";

/// The L2 length of the lab's UDP frames.
const FRAME: f64 = FRAME_LEN as f64;

/// Seconds each measurement runs, and the first ones it leaves out.
const SECS: u32 = 5;
const WARMUP: f64 = 1.5;

/// The batch's commands as `tc` command lines (continuations joined, comments dropped).
fn tc_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            continue;
        }
        pending.push_str(line);
        let words: Vec<&str> = pending.split_whitespace().collect();
        if !words.is_empty() {
            lines.push(format!("tc {}", words.join(" ")));
        }
        pending.clear();
    }
    lines
}

/// One flow of a case: its port at node-2, the class it should land in, and the L2 rate HTB's
/// arithmetic gives that class.
struct Flow {
    port: u16,
    class: &'static str,
    expected_bps: f64,
}

/// Runs `file` through the kernel's tc, then through htbd, with `flows` offered at `offered`
/// bit/s each, and compares each flow's delivered rate with the kernel's and with its expected
/// rate.
fn kernel_and_htbd_agree(name: &str, file: &str, flows: &[Flow], offered_bps: f64) {
    let path = script(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let specs: Vec<FlowSpec> = flows
        .iter()
        .map(|f| FlowSpec {
            port: f.port,
            offered_bps,
        })
        .collect();
    let lab = Lab::up(name, "router");

    // The kernel: the same lines through tc on the router.
    let notes = apply_tc(&lab, &tc_lines(&text)).unwrap_or_else(|e| panic!("tc: {e}"));
    for note in notes {
        eprintln!("  note: {note}");
    }
    let (kernel, host) = host_accounted(|| udp_flows(&lab, &specs, SECS, WARMUP));
    for dev in ["r1", "r2"] {
        let _ = lab.exec(R, &["tc", "qdisc", "del", "dev", dev, "root"]);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));

    // htbd: the file as it is, through htb-cli -b.
    let htbd = Htbd::start(&lab, NO_TREES);
    htbd.cli_ok(&["-b", path.to_str().unwrap()]);
    let (ours, stalls) = htbd.accounted(|| udp_flows(&lab, &specs, SECS, WARMUP));
    for ((flow, k), h) in flows.iter().zip(&kernel).zip(&ours) {
        let what = format!("{file}: port {} in {}", flow.port, flow.class);
        eprintln!(
            "{what}: kernel {:.3} Mbit/s, htbd {:.3} Mbit/s ({:+.2} %)",
            k.mean_bps() / 1e6,
            h.mean_bps() / 1e6,
            (h.mean_bps() - k.mean_bps()) / k.mean_bps() * 100.0
        );
        // Premise: the class was saturated, so the rate is the shaper's, not the generator's.
        let stats = htbd.class_stats("r2", flow.class);
        let overlimits = stats["overlimits"].as_u64().unwrap_or(0);
        let drops = stats["drops"].as_u64().unwrap_or(0);
        assert!(
            overlimits > 0 || drops > 0,
            "{what}: premise failed: the class was never over its limit ({stats})"
        );
        let promise = Promise::class(flow.expected_bps);
        assert_owed(
            &format!("{what}, htbd"),
            &h.counted,
            &promise,
            &stalls,
            0.01,
        );
        assert_owed(
            &format!("{what}, the kernel"),
            &k.counted,
            &promise,
            &host,
            0.01,
        );
    }
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn sqm_simplest_with_an_ethernet_size_table_shapes_as_the_kernel() {
    htb_lab::remeasured(|| {
        // stab overhead 34: each 1442-byte frame counts 1476 bytes against 20 Mbit/s.
        kernel_and_htbd_agree(
            "htbs1",
            "sqm-simplest.batch",
            &[Flow {
                port: 5201,
                class: "1:10",
                expected_bps: 20e6 * FRAME / (FRAME + 34.0),
            }],
            40e6,
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn sqm_simplest_on_adsl_counts_atm_cells_as_the_kernel() {
    htb_lab::remeasured(|| {
        // stab overhead 44 linklayer atm: 1442 + 44 bytes fill 31 cells of 48, 1643 bytes of 53.
        let cells = ((FRAME + 44.0) / 48.0).ceil();
        kernel_and_htbd_agree(
            "htbs2",
            "sqm-simplest-adsl.batch",
            &[Flow {
                port: 5201,
                class: "1:10",
                expected_bps: 10e6 * FRAME / (cells * 53.0),
            }],
            25e6,
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn wondershaper_uplink_shares_as_the_kernel() {
    htb_lab::remeasured(|| {
        // Bulk (the catch-all, prio 2) and a NOPRIOPORTDST port (prio 3) both saturated under a
        // 40 Mbit/s parent: each gets its rate (16, 8) and the spare 16 goes to the lower prio
        // number.
        kernel_and_htbd_agree(
            "htbs3",
            "wondershaper-1.4.1-uplink.batch",
            &[
                Flow {
                    port: 5201,
                    class: "1:20",
                    expected_bps: 32e6,
                },
                Flow {
                    port: 5202,
                    class: "1:30",
                    expected_bps: 8e6,
                },
            ],
            50e6,
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn lartc_htb_example_shares_as_the_kernel() {
    htb_lab::remeasured(|| {
        // Port 80 to 1:10 (5 Mbit/s, no ceil above it); the rest to the default 1:30, which
        // borrows what 1:1's 6 Mbit/s leave.
        kernel_and_htbd_agree(
            "htbs4",
            "lartc-htb.batch",
            &[
                Flow {
                    port: 80,
                    class: "1:10",
                    expected_bps: 5e6,
                },
                Flow {
                    port: 5201,
                    class: "1:30",
                    expected_bps: 1e6,
                },
            ],
            12e6,
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn lartc_hashing_filters_pick_the_bucket_as_the_kernel() {
    htb_lab::remeasured(|| {
        // node-1's source address hashes to bucket 2 of table 2:, whose filter sends it to 1:1
        // (12 Mbit/s); a miss would land in the default 1:99 (30 Mbit/s).
        kernel_and_htbd_agree(
            "htbs5",
            "lartc-hashing.batch",
            &[Flow {
                port: 5201,
                class: "1:1",
                expected_bps: 12e6,
            }],
            25e6,
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn libreqos_v0_6_hash_tables_shape_each_subscriber_as_the_kernel() {
    htb_lab::remeasured(|| {
        // node-2 (10.201.2.2) is the second subscriber: bucket 2 of table 2:, class 1:102 at
        // 5 Mbit/s; a miss would take the inner default class 1:1 (the direct queue, unshaped).
        kernel_and_htbd_agree(
            "htbs6",
            "libreqos-v0.6-alpha.batch",
            &[Flow {
                port: 5201,
                class: "1:102",
                expected_bps: 5e6,
            }],
            15e6,
        );
    });
}
