//! `htb-lab filters`: what 10 000 subscriber filters cost per packet, htbd against the
//! kernel's HTB, writing `target/htb-bench/filters.json`.
//!
//! The tree on r2 is a root, the default class 1:10 and one leaf per subscriber (pfifo leaves
//! on both sides: this kernel has no fq_codel). 64-byte packets flood node-1 → 10.201.3.1 (the
//! blackhole sink behind node-2) and match the *last* filter, after every subscriber filter:
//!
//! - `htbd`: 1 filter, and 10 000 subscriber `dst A/32` filters before it (compiled: the cost
//!   should not grow);
//! - `kernel_htb_flat`: the same filters as tc lines (`htbd --print-tc`): u32 walks them all;
//! - `kernel_htb_hashed`: the 10 000 filters in u32 hash tables, one per /24 linked from the
//!   root table by the destination's /24 and hashed on its last byte (LARTC's way), the flood's
//!   filter in the root table after the 40 links.
//!
//! Each configuration: packets/s at node-2 and the machine's busy CPU per packet (median of the
//! repetitions), as in `htb-lab bench`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::bench::{ONE_FLOOD, PPS, Ratio, blackhole_sink, pps_64_median, ratios, write_report};
use crate::shaper::{Installed, Shaper, install, uninstall};
use crate::{Lab, R};

/// The report's goals: htbd's cost of 10 000 subscriber filters, the kernel's flat and
/// hashed, and htbd against the kernel's best.
#[rustfmt::skip]
const GOALS: &[Ratio] = &[
    ("htbd_subscribers_over_1_filter", PPS, "htbd_subscriber_filters", "htbd_1_filter"),
    ("kernel_flat_over_1_filter", PPS, "kernel_htb_flat", "kernel_htb_1_filter"),
    ("kernel_hashed_over_1_filter", PPS, "kernel_htb_hashed", "kernel_htb_1_filter"),
    ("htbd_over_kernel_hashed", PPS, "htbd_subscriber_filters", "kernel_htb_hashed"),
];

/// What to run.
#[derive(Clone, Debug)]
pub struct FilterBenchOptions {
    /// Where filters.json goes.
    pub out: PathBuf,
    /// One repetition instead of three.
    pub quick: bool,
    /// Subscriber filters in the large configuration.
    pub subscribers: u32,
    /// Namespace prefix.
    pub lab: String,
}

/// Subscriber `i`'s address and class minor.
fn subscriber(i: u32) -> (String, u32) {
    (format!("100.64.{}.{}", i / 250, i % 250 + 1), 0x1000 + i)
}

/// htbd's config: the tree with `subscribers` leaves, their filters, then the flood's filter.
fn config(subscribers: u32, filters: bool) -> String {
    let mut c = String::from(
        "[daemon]\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\
         [[interface]]\nname = \"r1\"\n\
         [[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"10\"\nleaf = \"pfifo\"\n\
         [[interface.class]]\nid = \"1:1\"\nrate = \"10gbit\"\n\
         [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"10gbit\"\n",
    );
    for i in 0..subscribers {
        let (_, minor) = subscriber(i);
        let _ = write!(
            c,
            "[[interface.class]]\nid = \"1:{minor:x}\"\nparent = \"1:1\"\nrate = \"1mbit\"\nceil = \"100mbit\"\n"
        );
    }
    if filters {
        for i in 0..subscribers {
            let (addr, minor) = subscriber(i);
            let _ = write!(
                c,
                "[[interface.filter]]\nprio = 1\nmatch = {{ dst = \"{addr}/32\" }}\nclassid = \"1:{minor:x}\"\n"
            );
        }
    }
    c.push_str(
        "[[interface.filter]]\nprio = 1\nmatch = { dst = \"10.201.3.0/24\" }\nclassid = \"1:10\"\n",
    );
    c
}

/// Runs tc's batch mode in the router (10 000 lines as one process, not 10 000).
fn tc_batch(lab: &Lab, lines: &[String]) -> anyhow::Result<()> {
    let file = std::env::temp_dir().join(format!("htb-filters-{}.tc", std::process::id()));
    let text: String = lines
        .iter()
        .map(|l| format!("{}\n", l.strip_prefix("tc ").unwrap_or(l)))
        .collect();
    std::fs::write(&file, text)?;
    let out = lab.exec(R, &["tc", "-b", file.to_str().unwrap_or_default()]);
    let _ = std::fs::remove_file(&file);
    if !out.status.success() {
        bail!("tc -b: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The kernel's HTB with `config`'s tree: its filters flat (as `--print-tc` writes them), or
/// the subscribers' in hash tables.
fn install_kernel(lab: &Lab, config: &str, subscribers: u32, hashed: bool) -> anyhow::Result<()> {
    let parsed = htbd::DaemonConfig::parse(
        &config
            .replace("@SOCKET@", "/tmp/x")
            .replace("@STATE@", "/tmp/x"),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut lines: Vec<String> = htbd::tc_export::commands(&parsed)?
        .into_iter()
        .filter(|l| !l.contains("|| true"))
        .filter(|l| !(hashed && l.starts_with("tc filter")))
        .collect();
    let _ = lab.exec(R, &["tc", "qdisc", "del", "dev", "r2", "root"]);
    if hashed {
        let tables = subscribers.div_ceil(250);
        for t in 0..tables {
            let ht = 0x10 + t;
            lines.push(format!(
                "filter add dev r2 parent 1: prio 1 handle {ht:x}: protocol ip u32 divisor 256"
            ));
            lines.push(format!(
                "filter add dev r2 parent 1: protocol ip prio 1 u32 ht 800:: match ip dst \
                 100.64.{t}.0/24 hashkey mask 0x000000ff at 16 link {ht:x}:"
            ));
        }
        for i in 0..subscribers {
            let (addr, minor) = subscriber(i);
            let (t, last) = (i / 250, i % 250 + 1);
            lines.push(format!(
                "filter add dev r2 parent 1: protocol ip prio 1 u32 ht {:x}:{last:x}: match ip \
                 dst {addr}/32 flowid 1:{minor:x}",
                0x10 + t
            ));
        }
        lines.push(
            "filter add dev r2 parent 1: protocol ip prio 1 u32 ht 800:: match ip dst \
             10.201.3.0/24 flowid 1:10"
                .into(),
        );
    }
    tc_batch(lab, &lines).context("installing the kernel's tree")
}

/// Packets/s and CPU ns per packet, median of `reps`.
/// Runs the comparison; writes and returns the report.
///
/// # Errors
/// The lab or tc failed, or no packet arrived (the premise of every figure).
pub fn run(options: &FilterBenchOptions) -> anyhow::Result<Value> {
    let lab = Lab::try_up(&options.lab, "router")
        .map_err(|why| anyhow::anyhow!("the lab cannot run here: {why}"))?;
    let reps = if options.quick { 1 } else { 3 };
    let n = options.subscribers;
    blackhole_sink(&lab);
    println!("== 64-byte packets/s matching the last filter, median of {reps}");
    let mut rows = serde_json::Map::new();
    let mut record = |key: &str, (pps, ns): (f64, f64)| -> anyhow::Result<()> {
        println!("  {key:<28} {pps:>10.0} pps, {ns:>7.0} ns of machine CPU per packet");
        if pps <= 0.0 {
            bail!("premise failed: no packet reached node-2 with {key}");
        }
        rows.insert(key.into(), json!({"pps": pps, "cpu_ns_per_packet": ns}));
        Ok(())
    };
    for (key, filters) in [("htbd_1_filter", false), ("htbd_subscriber_filters", true)] {
        let installed = install(&lab, Shaper::Htbd, &config(n, filters))?;
        let result = pps_64_median(&lab, reps, ONE_FLOOD);
        uninstall(&lab, installed);
        record(key, result)?;
    }
    for (key, filters, hashed) in [
        ("kernel_htb_1_filter", false, false),
        ("kernel_htb_flat", true, false),
        ("kernel_htb_hashed", true, true),
    ] {
        install_kernel(&lab, &config(n, filters), n, hashed)?;
        let result = pps_64_median(&lab, reps, ONE_FLOOD);
        uninstall(&lab, Installed::Tc);
        record(key, result)?;
    }
    let report = json!({
        "subscriber_filters": n,
        "goals": ratios(&rows, GOALS),
        "configurations": rows,
    });
    println!("goals: {}", serde_json::to_string_pretty(&report["goals"])?);
    write_report(&options.out, "filters.json", &report)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribers_fill_their_24s_and_the_flood_filter_comes_last() {
        assert_eq!(subscriber(0), ("100.64.0.1".into(), 0x1000));
        assert_eq!(subscriber(249).0, "100.64.0.250");
        assert_eq!(subscriber(250).0, "100.64.1.1");
        let c = config(3, true);
        let flood = c.find("10.201.3.0/24").unwrap();
        assert!(c.find("100.64.0.3/32").unwrap() < flood);
        htbd::DaemonConfig::parse(&c.replace("@SOCKET@", "/x").replace("@STATE@", "/x")).unwrap();
    }
}
