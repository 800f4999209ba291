//! `htb-lab workers`: htbd with one data-plane worker against two, and against the kernel's
//! HTB, on a lab whose veths have two queues, writing `target/htb-bench/workers.json`.
//!
//! The tree on r2 is a root of 10 Gbit/s and two subscribers (1:10 and 1:20, 5 Gbit/s each,
//! ceil 10 Gbit/s) matched by destination. Two AF_XDP generators flood 64-byte frames, one on
//! each of node-1's TX queues (so on each of r1's RX queues), to two addresses behind the
//! blackhole sink. With two workers htbd gives 1:20 (and the root) to worker 0 and 1:10 to
//! worker 1 (class-id order, fewest subtrees first):
//!
//! - `aligned`: queue 0 carries 1:20's traffic and queue 1 1:10's, so each frame is received by
//!   the worker serving its class;
//! - `crossed`: the other way round, so every frame is handed to the other worker.
//!
//! Per configuration: packets/s at node-2 and the machine's busy CPU per packet (median of the
//! repetitions), as `htb-lab bench` measures them. This machine has two vCPUs and the two
//! generators are busy loops: they take as much CPU as the workers do, so the ratio of 2 to 1
//! workers here is a floor, not what two free cores would give.

use std::path::PathBuf;

use anyhow::bail;
use serde_json::{Value, json};

use crate::Lab;
use crate::bench::{CPU_NS, PPS, Ratio, blackhole_sink, pps_64_median, ratios, write_report};
use crate::shaper::{Installed, Shaper, install, uninstall};

/// The report's ratios: scaling with a second worker, aligned and crossed, and htbd against
/// the kernel in throughput and CPU per packet.
#[rustfmt::skip]
const RATIOS: &[Ratio] = &[
    ("htbd_2_workers_over_1", PPS, "htbd_2_workers_aligned", "htbd_1_worker"),
    ("htbd_2_workers_crossed_over_1", PPS, "htbd_2_workers_crossed", "htbd_1_worker"),
    ("htbd_1_worker_over_kernel_htb", PPS, "htbd_1_worker", "kernel_htb"),
    ("htbd_2_workers_over_kernel_htb", PPS, "htbd_2_workers_aligned", "kernel_htb"),
    ("cpu_per_packet_htbd_1_worker_over_kernel_htb", CPU_NS, "htbd_1_worker", "kernel_htb"),
    ("cpu_per_packet_htbd_2_workers_over_kernel_htb", CPU_NS, "htbd_2_workers_aligned", "kernel_htb"),
];

/// What to run.
#[derive(Clone, Debug)]
pub struct WorkersBenchOptions {
    /// Where workers.json goes.
    pub out: PathBuf,
    /// One repetition instead of three.
    pub quick: bool,
    /// Namespace prefix of the lab.
    pub lab: String,
}

/// The addresses the generators flood: 1:20's and 1:10's.
const TO_1_20: &str = "10.201.3.1";
const TO_1_10: &str = "10.201.3.2";

/// htbd's config (also the kernel's, through `htbd --print-tc`) with `workers` workers.
fn config(workers: u32) -> String {
    format!(
        "[daemon]\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\nworkers = {workers}\n\
         [[interface]]\nname = \"r1\"\n\
         [[interface]]\nname = \"r2\"\n[interface.qdisc]\nleaf = \"pfifo\"\n\
         [[interface.class]]\nid = \"1:1\"\nrate = \"10gbit\"\n\
         [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"5gbit\"\nceil = \"10gbit\"\n\
         [[interface.class]]\nid = \"1:20\"\nparent = \"1:1\"\nrate = \"5gbit\"\nceil = \"10gbit\"\n\
         [[interface.filter]]\nmatch = {{ dst = \"{TO_1_10}/32\" }}\nclassid = \"1:10\"\n\
         [[interface.filter]]\nmatch = {{ dst = \"{TO_1_20}/32\" }}\nclassid = \"1:20\"\n"
    )
}

/// Runs the benchmark; prints a summary and writes `workers.json` into `out`.
///
/// # Errors
/// The lab or tc failed, or no packet arrived (the premise of every figure), or frames did not
/// go where the configuration says (the premise of `aligned` and `crossed`).
pub fn run(options: &WorkersBenchOptions) -> anyhow::Result<Value> {
    let lab = Lab::try_up_with_queues(&options.lab, "router", 2)
        .map_err(|why| anyhow::anyhow!("the lab cannot run here: {why}"))?;
    let reps = if options.quick { 1 } else { 3 };
    blackhole_sink(&lab);
    let aligned = [(0, TO_1_20), (1, TO_1_10)];
    let crossed = [(0, TO_1_10), (1, TO_1_20)];
    println!(
        "== 64-byte packets/s, two generators (one per queue), 2-queue veths, median of {reps}"
    );
    let mut rows = serde_json::Map::new();
    let mut record = |key: &str, (pps, ns): (f64, f64), extra: Value| -> anyhow::Result<()> {
        println!("  {key:<22} {pps:>10.0} pps, {ns:>7.0} ns of machine CPU per packet");
        if pps <= 0.0 {
            bail!("premise failed: no packet reached node-2 with {key}");
        }
        rows.insert(
            key.into(),
            json!({"pps": pps, "cpu_ns_per_packet": ns, "handoffs": extra}),
        );
        Ok(())
    };
    install(&lab, Shaper::KernelHtb, &config(1))?;
    let kernel = pps_64_median(&lab, reps, &aligned);
    uninstall(&lab, Installed::Tc);
    record("kernel_htb", kernel, Value::Null)?;
    for (key, workers, flows) in [
        ("htbd_1_worker", 1, &aligned),
        ("htbd_2_workers_aligned", 2, &aligned),
        ("htbd_2_workers_crossed", 2, &crossed),
    ] {
        let installed = install(&lab, Shaper::Htbd, &config(workers))?;
        let result = pps_64_median(&lab, reps, flows);
        let handoffs = installed.htbd().map(|h| {
            let status = h.status();
            let handed: u64 = status.workers.iter().map(|w| w.handed_out).sum();
            let received: u64 = status.ports.iter().map(|p| p.rx_packets).sum();
            (handed, received)
        });
        uninstall(&lab, installed);
        let (handed, received) = handoffs.unwrap_or((0, 0));
        let share = handed as f64 / (received as f64).max(1.0);
        println!("    frames handed to the other worker: {handed} of {received} received");
        if workers == 2 && key.ends_with("aligned") && share > 0.05 {
            bail!(
                "premise failed: {key} handed over {:.0} % of the frames",
                share * 100.0
            );
        }
        if key.ends_with("crossed") && share < 0.9 {
            bail!(
                "premise failed: {key} handed over only {:.0} % of the frames",
                share * 100.0
            );
        }
        record(
            key,
            result,
            json!({"handed_over": handed, "received": received}),
        )?;
    }
    let report = json!({
        "ratios": ratios(&rows, RATIOS),
        "configurations": rows,
    });
    println!(
        "ratios: {}",
        serde_json::to_string_pretty(&report["ratios"])?
    );
    write_report(&options.out, "workers.json", &report)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_parses_and_the_kernel_gets_the_same_tree() {
        for workers in [1, 2] {
            let c = config(workers)
                .replace("@SOCKET@", "/x")
                .replace("@STATE@", "/x");
            let parsed = htbd::DaemonConfig::parse(&c).unwrap();
            assert_eq!(parsed.engine.workers, Some(workers as usize));
        }
    }
}
