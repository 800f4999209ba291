//! `htb-lab cores`: forwarding against cores. For G = 1 … N generators, each on its own TX
//! queue of node-1 (so its own RX queue of r1) and pinned to its own CPU, three shapers with no
//! shaping limit forward 64-byte and 1514-byte frames to node-2's blackhole sink:
//!
//! - `htbd`: G pinned data-plane workers, G top-level classes (one per generator, matched by
//!   destination), assigned one per worker in class-id order, so that no frame is handed over
//!   (checked: at most 5 % may be);
//! - `kernel_htb`: the same tree on one root HTB qdisc (`htbd --print-tc`);
//! - `kernel_mq_htb`: LibreQoS's layout, `mq` with one HTB per TX queue (no shared root).
//!
//! Per point: packets/s and Gbit/s at node-2, and CPU per packet of the shaper alone. For the
//! kernel: the system and softirq time of the CPUs that forward, which on veths are the
//! generators' CPUs (a veth delivers in its sender's context); it includes the generators' own
//! send calls, so it is an upper bound. For htbd, on CPUs of its own (twice as many CPUs as
//! generators): the user, system and softirq time of its workers' CPUs; where it shares them
//! with the generators (this 2-vCPU VM): its threads' time (`/proc/PID/task/*/stat`), which
//! without `CONFIG_IRQ_TIME_ACCOUNTING` includes the softirq work run in their context (adding
//! the CPUs' softirq time as well would count it twice). No figure counts a generator's
//! spinning. The machine's busy CPU per packet is reported beside them.
//! Writes `cores.json` and `cores.svg` (packets/s against generators, one line per shaper and
//! frame size).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use htb_cli::plot::{LineChart, Series};
use serde_json::{Value, json};

use crate::bench::{blackhole_sink, spawn_generator, write_report};
use crate::shaper::{Installed, Shaper, apply_tc, install, uninstall};
use crate::{Lab, N2, Reaped};

/// What to run.
#[derive(Clone, Debug)]
pub struct CoresOptions {
    /// Where cores.json and cores.svg go.
    pub out: PathBuf,
    /// Shorter windows.
    pub quick: bool,
    /// Namespace prefix of the lab.
    pub lab: String,
    /// The most generators (and queues, and htbd workers).
    pub max: u32,
    /// Only these generator counts (each at most `max`); empty: 1 … `max`.
    pub generators: Vec<u32>,
}

/// Generator `g`'s destination behind node-2's blackhole route.
fn sink(g: u32) -> String {
    format!("10.201.3.{}", g + 1)
}

/// htbd's config: `workers` workers pinned to `cpus`, one top-level class per generator.
fn config(workers: u32, cpus: &[usize]) -> String {
    let cpus: Vec<String> = cpus.iter().map(ToString::to_string).collect();
    let mut tree = String::from("[interface.qdisc]\nleaf = \"pfifo\"\n");
    for g in 0..workers {
        tree += &format!(
            "[[interface.class]]\nid = \"1:{:x}\"\nrate = \"100gbit\"\n\
             [[interface.filter]]\nmatch = {{ dst = \"{}/32\" }}\nclassid = \"1:{:x}\"\n",
            0x10 + g,
            sink(g),
            0x10 + g
        );
    }
    format!(
        "[daemon]\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\nworkers = {workers}\n\
         cpus = [{}]\n[[interface]]\nname = \"r1\"\n[[interface]]\nname = \"r2\"\n{tree}",
        cpus.join(", ")
    )
}

/// LibreQoS's layout on r2: `mq`, and one HTB per TX queue whose default class has no limit.
fn mq_htb(queues: u32) -> Vec<String> {
    let mut lines = vec!["tc qdisc add dev r2 root handle 7fff: mq".to_owned()];
    for q in 1..=queues {
        lines.push(format!(
            "tc qdisc add dev r2 parent 7fff:{q:x} handle {q:x}: htb default 1"
        ));
        lines.push(format!(
            "tc class add dev r2 parent {q:x}: classid {q:x}:1 htb rate 100gbit"
        ));
        lines.push(format!(
            "tc qdisc add dev r2 parent {q:x}:1 handle {:x}: pfifo limit 1000",
            q + 0x100
        ));
    }
    lines
}

/// Per CPU: (user + nice, system, softirq) clock ticks so far (/proc/stat).
fn cpu_ticks() -> Vec<(u64, u64, u64)> {
    std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            let at = |i: usize| f.get(i).copied().unwrap_or(0);
            (at(0) + at(1), at(2), at(6))
        })
        .collect()
}

/// User + system clock ticks of every thread of process `pid` so far.
fn process_ticks(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
        .map(|stat| {
            // Fields after the command name (which may hold spaces) in parentheses.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let f: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            // utime and stime are fields 14 and 15 of the line: 11 and 12 after the state.
            f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0)
        })
        .sum()
}

/// A clock tick in ns (USER_HZ is 100 on Linux).
const TICK_NS: f64 = 1e7;

/// One measurement window.
struct Window {
    pps: f64,
    bps: f64,
    /// The shaper's CPU ns per delivered packet (see the module docs).
    shaper_ns: f64,
    /// The whole machine's busy CPU ns per delivered packet.
    machine_ns: f64,
}

/// htbd while it shapes: its pid, its workers' CPUs, and whether those are its own.
#[derive(Clone, Copy)]
struct Shaping<'a> {
    pid: u32,
    cpus: &'a [usize],
    dedicated: bool,
}

/// Floods from `gens` generators (generator g on queue g, pinned to `gen_cpus[g]`) with
/// `size`-byte frames, and measures at node-2.
fn flood(
    lab: &Lab,
    gens: u32,
    gen_cpus: &[usize],
    size: u32,
    secs: u32,
    htbd: Option<Shaping<'_>>,
) -> Window {
    let size = size.to_string();
    let generators: Vec<Reaped> = (0..gens)
        .filter_map(|g| {
            let cpu = gen_cpus[g as usize % gen_cpus.len()];
            spawn_generator(lab, Some(cpu), g, &sink(g), secs, &["--size", &size])
        })
        .collect();
    let none = Window {
        pps: 0.0,
        bps: 0.0,
        shaper_ns: 0.0,
        machine_ns: 0.0,
    };
    if generators.len() != gens as usize {
        return none;
    }
    std::thread::sleep(Duration::from_millis(1500));
    let window = Duration::from_secs(u64::from(secs).saturating_sub(2).max(1));
    let (cpu0, proc0, rx0, t0) = (
        cpu_ticks(),
        htbd.map_or(0, |h| process_ticks(h.pid)),
        lab.rx_counters(N2, "eth0"),
        Instant::now(),
    );
    std::thread::sleep(window);
    let (cpu1, proc1, rx1, t1) = (
        cpu_ticks(),
        htbd.map_or(0, |h| process_ticks(h.pid)),
        lab.rx_counters(N2, "eth0"),
        Instant::now(),
    );
    for mut g in generators {
        let _ = g.0.wait();
    }
    let secs = (t1 - t0).as_secs_f64();
    let packets = (rx1.1 - rx0.1) as f64;
    let delta = |cpu: usize| {
        let (a, b) = (cpu0.get(cpu), cpu1.get(cpu));
        match (a, b) {
            (Some(a), Some(b)) => (b.0 - a.0, b.1 - a.1, b.2 - a.2),
            _ => (0, 0, 0),
        }
    };
    let machine: u64 = (0..cpu1.len())
        .map(|c| {
            let d = delta(c);
            d.0 + d.1 + d.2
        })
        .sum();
    let shaper_ticks: u64 = match htbd {
        Some(h) if h.dedicated => {
            let cpus: BTreeSet<usize> = h.cpus.iter().copied().collect();
            cpus.iter()
                .map(|&c| {
                    let d = delta(c);
                    d.0 + d.1 + d.2
                })
                .sum()
        }
        Some(_) => proc1 - proc0,
        None => {
            let cpus: BTreeSet<usize> = gen_cpus.iter().take(gens as usize).copied().collect();
            cpus.iter()
                .map(|&c| {
                    let d = delta(c);
                    d.1 + d.2
                })
                .sum()
        }
    };
    let per_packet = |ticks: u64| ticks as f64 * TICK_NS / packets.max(1.0);
    Window {
        pps: packets / secs,
        bps: (rx1.0 - rx0.0) as f64 * 8.0 / secs,
        shaper_ns: per_packet(shaper_ticks),
        machine_ns: per_packet(machine),
    }
}

/// Runs the benchmark; prints every point and writes `cores.json` and `cores.svg` into `out`.
///
/// # Errors
/// When the lab cannot run here, a shaper cannot be installed, no packet arrived (every
/// figure's premise) or htbd handed frames between workers that should each serve their own.
pub fn run(options: &CoresOptions) -> anyhow::Result<Value> {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let counts: Vec<u32> = if options.generators.is_empty() {
        (1..=options.max.max(1)).collect()
    } else {
        options.generators.clone()
    };
    if counts.contains(&0) {
        bail!("--generators: a count of 0 measures nothing");
    }
    let max = counts.iter().copied().max().unwrap_or(1);
    // mq needs a multi-queue device: two queues at least, even for one generator.
    let queues = max.max(2);
    let lab = Lab::try_up_with_queues(&options.lab, "router", queues)
        .map_err(|why| anyhow::anyhow!("the lab cannot run here: {why}"))?;
    blackhole_sink(&lab);
    let secs = if options.quick { 4 } else { 7 };
    // With G generators: generators on CPUs 0 … G-1, htbd's workers on G … 2G-1; where the
    // machine has fewer than 2G CPUs, they share (said in each point).
    let gen_cpus: Vec<usize> = (0..max as usize).map(|g| g % cpus).collect();
    let mut points = Vec::new();
    for size in [60u32, 1514] {
        for &gens in &counts {
            let worker_cpus: Vec<usize> = (0..gens as usize)
                .map(|w| (gens as usize + w) % cpus)
                .collect();
            let shared = 2 * gens as usize > cpus;
            for shaper in ["htbd", "kernel_htb", "kernel_mq_htb"] {
                let workers = &worker_cpus[..];
                let (window, handed) = match shaper {
                    "htbd" => {
                        let installed = install(&lab, Shaper::Htbd, &config(gens, workers))?;
                        let shaping = Shaping {
                            pid: installed.htbd().map_or(0, crate::Htbd::pid),
                            cpus: workers,
                            dedicated: !shared,
                        };
                        let w = flood(&lab, gens, &gen_cpus, size, secs, Some(shaping));
                        let handed = installed.htbd().map(|h| {
                            let s = h.status();
                            let out: u64 = s.workers.iter().map(|w| w.handed_out).sum();
                            let rx: u64 = s.ports.iter().map(|p| p.rx_packets).sum();
                            out as f64 / (rx as f64).max(1.0)
                        });
                        uninstall(&lab, installed);
                        (w, handed)
                    }
                    "kernel_htb" => {
                        let installed = install(&lab, Shaper::KernelHtb, &config(gens, workers))?;
                        let w = flood(&lab, gens, &gen_cpus, size, secs, None);
                        uninstall(&lab, installed);
                        (w, None)
                    }
                    _ => {
                        apply_tc(&lab, &mq_htb(queues))?;
                        let w = flood(&lab, gens, &gen_cpus, size, secs, None);
                        uninstall(&lab, Installed::Tc);
                        (w, None)
                    }
                };
                let frame = if size == 60 { 64 } else { size };
                println!(
                    "  {frame:>4} B  {gens} generator(s)  {shaper:<14} {:>10.0} pps {:>7.2} Gbit/s  \
                     shaper {:>6.0} ns/packet  machine {:>6.0} ns/packet",
                    window.pps,
                    window.bps / 1e9,
                    window.shaper_ns,
                    window.machine_ns
                );
                if window.pps <= 0.0 {
                    bail!("premise failed: no packet reached node-2 through {shaper}");
                }
                if let Some(share) = handed
                    && share > 0.05
                {
                    bail!(
                        "premise failed: htbd with {gens} workers handed {:.0} % of the frames \
                         to another worker (each generator's class should be its own worker's)",
                        share * 100.0
                    );
                }
                points.push(json!({
                    "frame_bytes": frame, "generators": gens, "shaper": shaper,
                    "pps": window.pps, "bps": window.bps,
                    "shaper_cpu_ns_per_packet": window.shaper_ns,
                    "machine_cpu_ns_per_packet": window.machine_ns,
                    "handed_over_share": handed,
                    "worker_cpus": worker_cpus, "cpus_shared_with_generators": shared,
                    "cpu_accounting": if shared {
                        "htbd: its threads' user + system time; kernel: system + softirq of the generators' CPUs (where veths forward), their send calls included"
                    } else {
                        "htbd: user + system + softirq of its workers' own CPUs; kernel: system + softirq of the generators' CPUs (where veths forward), their send calls included"
                    },
                }));
            }
        }
    }
    drop(lab);
    let at = |size: u64, gens: u32, shaper: &str, key: &str| {
        points
            .iter()
            .find(|p| p["frame_bytes"] == size && p["generators"] == gens && p["shaper"] == shaper)
            .and_then(|p| p[key].as_f64())
            .unwrap_or(0.0)
    };
    let least = counts.iter().copied().min().unwrap_or(1);
    let ratios = json!({
        "htbd_over_mq_htb_pps_64b": at(64, max, "htbd", "pps") / at(64, max, "kernel_mq_htb", "pps").max(1.0),
        // Scaling from the fewest generators measured to the most (null with only one count).
        "htbd_scaling_from": least,
        "htbd_n_over_least_pps_64b": (least < max).then(|| at(64, max, "htbd", "pps") / at(64, least, "htbd", "pps").max(1.0)),
        "htbd_over_mq_htb_bps_1514b": at(1514, max, "htbd", "bps") / at(1514, max, "kernel_mq_htb", "bps").max(1.0),
        "htbd_cpu_over_mq_htb_cpu_1514b": at(1514, max, "htbd", "shaper_cpu_ns_per_packet") / at(1514, max, "kernel_mq_htb", "shaper_cpu_ns_per_packet").max(1.0),
    });
    println!(
        "ratios at {max} generator(s): {}",
        serde_json::to_string_pretty(&ratios)?
    );
    let report = json!({
        "machine": crate::machine(),
        "generator_cpus": gen_cpus,
        "points": points,
        "ratios": ratios,
    });
    write_report(&options.out, "cores.json", &report)?;
    let svg = options.out.join("cores.svg");
    std::fs::write(&svg, chart(&points).to_svg())?;
    println!("wrote {}", svg.display());
    Ok(report)
}

/// Packets/s against generators, one line per shaper and frame size.
fn chart(points: &[Value]) -> LineChart {
    let mut series: Vec<Series> = Vec::new();
    for p in points {
        let name = format!(
            "{} {} B",
            p["shaper"].as_str().unwrap_or("?"),
            p["frame_bytes"]
        );
        let at = (
            p["generators"].as_f64().unwrap_or(0.0),
            p["pps"].as_f64().unwrap_or(0.0) / 1e6,
        );
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(at),
            None => series.push(Series {
                dashed: p["frame_bytes"] != 64,
                name,
                points: vec![at],
            }),
        }
    }
    LineChart {
        title: "Forwarding against cores (dashed: 1514-byte frames)".into(),
        x_label: "generators (one queue and one CPU each; htbd: as many workers)".into(),
        y_label: "Mpps at node-2".into(),
        x_log: false,
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_parses_with_one_pinned_worker_and_class_per_generator() {
        let c = config(3, &[4, 5, 6])
            .replace("@SOCKET@", "/x")
            .replace("@STATE@", "/x");
        let parsed = htbd::DaemonConfig::parse(&c).unwrap();
        assert_eq!(parsed.engine.workers, Some(3));
        assert_eq!(parsed.engine.cpus, vec![4, 5, 6]);
        assert!(c.contains("10.201.3.3/32") && c.contains("classid = \"1:12\""));
    }

    #[test]
    fn mq_gets_one_htb_per_queue() {
        let lines = mq_htb(2);
        assert_eq!(lines[0], "tc qdisc add dev r2 root handle 7fff: mq");
        assert!(
            lines.contains(&"tc qdisc add dev r2 parent 7fff:2 handle 2: htb default 1".into())
        );
        assert_eq!(lines.len(), 1 + 2 * 3);
    }
}
