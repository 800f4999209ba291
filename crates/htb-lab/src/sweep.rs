//! `htb-lab sweep`: seed 001's experiment as a benchmark. One class, rate = ceil, from
//! 100 Mbit/s up to what the lab can offer, at MTU 1500 and 9000, UDP from the AF_XDP generator
//! (`htb-xdp-gen`, jumbo frames as multi-buffer chains, one generator per queue) and TCP from
//! iperf3 with several streams, htbd and the kernel's HTB side by side in one run; then a root
//! shared by every worker with one subscriber per queue below it. Writes `sweep.json` and
//! `sweep.svg` (delivered as a share of the target against the target, one line per shaper).
//!
//! Every point proves its premise: UDP counts as a shaper's error only when the generators
//! offered at least 1.05× the rate, TCP only when unshaped forwarding at that MTU carries 1.05×
//! the rate (else `generator_bound`) and the same shaper with a 100 Gbit/s class carries 1.05×
//! the rate (else `path_bound`: its forwarding path, not its shaping, is the limit).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use htb_cli::plot::{LineChart, Series};
use serde_json::{Value, json};

use crate::bench::{blackhole_sink, spawn_generator, write_report};
use crate::shaper::{Installed, Shaper, install, uninstall};
use crate::{Lab, N1, N2, Reaped};

/// What to run.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// Where sweep.json and sweep.svg go.
    pub out: PathBuf,
    /// Fewer rates, shorter windows.
    pub quick: bool,
    /// Namespace prefix of the lab.
    pub lab: String,
    /// Queues per veth: generators, and htbd's workers.
    pub queues: u32,
    /// The highest rate to try, bit/s.
    pub max_bps: f64,
    /// One class's rates, bit/s; empty: the default set.
    pub rates: Vec<f64>,
    /// The shared root's rates, bit/s; empty: the one class's.
    pub shared_rates: Vec<f64>,
    /// The MTUs; empty: 1500 and 9000.
    pub mtus: Vec<u32>,
    /// Seconds of traffic per point; `None`: 4 with `quick`, else 6.
    pub seconds: Option<u32>,
    /// CPUs htbd's workers are pinned to (`[daemon] cpus`); empty: not pinned.
    pub htbd_cpus: Vec<usize>,
    /// RPS mask (hex, as `rps_cpus` takes it) for node-1's and node-2's receive queues: their
    /// TCP stacks then run on those CPUs instead of in the sender's context, which on veths is
    /// htbd's worker when htbd sends to them.
    pub endpoint_rps: Option<String>,
}

/// The premise margin: offered (or unshaped capacity) at least this times the rate.
const PREMISE: f64 = 1.05;
/// Where UDP goes: node-2's blackhole route (no receiver, no ICMP: a sink that costs every
/// shaper the same).
const SINK: &str = "10.201.3.1";

/// An htbd config: r2 shaped by `classes` (TOML) under `workers` workers.
fn config(workers: u32, classes: &str) -> String {
    format!(
        "[daemon]\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\nworkers = {workers}\n\
         [[interface]]\nname = \"r1\"\n[[interface]]\nname = \"r2\"\n{classes}"
    )
}

/// One class at `bps`, rate = ceil, taking everything.
fn one_class(workers: u32, bps: f64) -> String {
    config(
        workers,
        &format!(
            "[interface.qdisc]\ndefault = \"1\"\n[[interface.class]]\nid = \"1:1\"\nrate = \"{bps:.0}bit\"\n"
        ),
    )
}

/// A root at `bps` shared by one subscriber per queue (rate a share of the root, ceil the
/// root), each picked by its generator's destination port `5201 + q`.
fn shared_root(workers: u32, queues: u32, bps: f64) -> String {
    let mut classes =
        format!("[interface.qdisc]\n[[interface.class]]\nid = \"1:1\"\nrate = \"{bps:.0}bit\"\n");
    for q in 0..queues {
        classes += &format!(
            "[[interface.class]]\nid = \"1:{:x}\"\nparent = \"1:1\"\nrate = \"{:.0}bit\"\nceil = \"{bps:.0}bit\"\n\
             [[interface.filter]]\nmatch = {{ dport = \"{}\" }}\nclassid = \"1:{:x}\"\n",
            0x10 + q,
            bps / f64::from(queues) / 2.0,
            5201 + q,
            0x10 + q
        );
    }
    config(workers, &classes)
}

/// UDP from one generator per `(queue, dport)`, each paced to `bps_each` of `frame`-byte frames
/// (flat out when `None`); returns (offered, delivered) bit/s.
fn udp(
    lab: &Lab,
    flows: &[(u32, u16)],
    frame: u32,
    bps_each: Option<f64>,
    secs: u32,
) -> (f64, f64) {
    let (size, rate) = (
        frame.to_string(),
        bps_each.map(|bps| format!("{bps:.0}bit")),
    );
    let generators: Vec<Reaped> = flows
        .iter()
        .filter_map(|&(queue, dport)| {
            let dport = dport.to_string();
            let mut extra = vec!["--dport", &dport, "--size", &size];
            if let Some(rate) = &rate {
                extra.extend(["--rate", rate.as_str()]);
            }
            spawn_generator(lab, None, queue, SINK, secs, &extra)
        })
        .collect();
    if generators.len() != flows.len() {
        return (0.0, 0.0);
    }
    let load = lab.measure_load(
        Duration::from_millis(1500),
        Duration::from_secs(u64::from(secs).saturating_sub(2).max(1)),
    );
    for mut g in generators {
        let _ = g.0.wait();
    }
    (load.offered_bps(), load.delivered_bps())
}

/// TCP from iperf3 with `streams` streams to node-2; returns node-2's L2 receive rate, bit/s.
fn tcp(lab: &Lab, streams: u32, secs: u32) -> f64 {
    let _server = lab.iperf_server(N2, 5301);
    let client = lab
        .cmd(N1, "iperf3")
        .args(["-c", "10.201.2.2", "-p", "5301", "-P", &streams.to_string()])
        .args(["-t", &secs.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped);
    let Ok(mut client) = client else { return 0.0 };
    let load = lab.measure_load(
        Duration::from_millis(2000),
        Duration::from_secs(u64::from(secs).saturating_sub(3).max(1)),
    );
    let _ = client.0.wait();
    load.delivered_bps()
}

/// Installs `shaper` with `config`, runs `measure_it`, removes the shaper. With htbd, also
/// where it lost frames meanwhile (what a shortfall comes from: its queues, the UMEM pool, the
/// kernel's RX ring or fill ring, handoffs between workers).
fn through<T>(
    lab: &Lab,
    shaper: Shaper,
    config: &str,
    measure_it: impl FnOnce() -> T,
) -> anyhow::Result<(T, Value)> {
    let installed: Installed = install(lab, shaper, config)?;
    let value = measure_it();
    let drops = installed.htbd().map_or(Value::Null, |htbd| {
        let status = htbd.status();
        let sum = |f: fn(&htb_ipc::PortStatus) -> u64| status.ports.iter().map(f).sum::<u64>();
        json!({
            "rx_packets": sum(|p| p.rx_packets),
            "queue": sum(|p| p.drops_queue),
            "pool": sum(|p| p.drops_pool),
            "kernel_rx_ring_full": sum(|p| p.kernel_rx_ring_full),
            "kernel_fill_ring_empty": sum(|p| p.kernel_fill_ring_empty),
            "kernel_rx_dropped": sum(|p| p.kernel_rx_dropped),
            "handoff": status.workers.iter().map(|w| w.handoff_drops).sum::<u64>(),
            "handed_out": status.workers.iter().map(|w| w.handed_out).sum::<u64>(),
            // Subtrees every worker served at once (one class above split_above).
            "split_subtrees": status.split_subtrees,
        })
    });
    uninstall(lab, installed);
    if drops.is_object() {
        println!("    htbd's losses meanwhile: {drops}");
    }
    Ok((value, drops))
}

/// One point of the sweep as JSON, printed as it is measured.
fn point(
    part: &str,
    mtu: u32,
    proto: &str,
    shaper: Shaper,
    target: f64,
    offered: f64,
    delivered: f64,
) -> Value {
    let bound = offered < PREMISE * target;
    let error = (delivered - target) / target * 100.0;
    println!(
        "  {part:<11} MTU {mtu:>4} {proto} {:>7.0} Mbit/s  {:<10} offered {:>9.1}  delivered {:>9.3} Mbit/s  {}",
        target / 1e6,
        shaper.name(),
        offered / 1e6,
        delivered / 1e6,
        if bound {
            "generator-bound".to_owned()
        } else {
            format!("{error:+.3} %")
        }
    );
    json!({
        "part": part, "mtu": mtu, "proto": proto, "shaper": shaper.name(), "target_bps": target,
        "offered_bps": offered, "delivered_bps": delivered,
        "error_pct": if bound { Value::Null } else { json!(error) },
        "status": if bound { "generator_bound" } else { "ok" },
    })
}

/// Runs the sweep; prints every point and writes `sweep.json` and `sweep.svg` into `out`.
///
/// # Errors
/// When the lab cannot run here or a shaper cannot be installed.
pub fn run(options: &SweepOptions) -> anyhow::Result<Value> {
    let queues = options.queues.max(1);
    let lab = Lab::try_up_with_queues(&options.lab, "router", queues)
        .map_err(|why| anyhow::anyhow!("the lab cannot run here: {why}"))?;
    blackhole_sink(&lab);
    if let Some(mask) = &options.endpoint_rps {
        if mask.is_empty() || !mask.chars().all(|c| c.is_ascii_hexdigit() || c == ',') {
            anyhow::bail!("--endpoint-rps {mask:?}: a hex CPU mask, as rps_cpus takes it (ff00)");
        }
        for node in [N1, N2] {
            let out = lab.exec(
                node,
                &[
                    "sh",
                    "-c",
                    &format!(
                        "for q in /sys/class/net/eth0/queues/rx-*/rps_cpus; do echo {mask} > $q || exit 1; done"
                    ),
                ],
            );
            if !out.status.success() {
                anyhow::bail!(
                    "--endpoint-rps {mask}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
    }
    // htbd's workers pinned where asked.
    let cpus: Vec<String> = options.htbd_cpus.iter().map(ToString::to_string).collect();
    let pin = |config: String| {
        if cpus.is_empty() {
            config
        } else {
            config.replacen(
                "realtime = 1\n",
                &format!("realtime = 1\ncpus = [{}]\n", cpus.join(", ")),
                1,
            )
        }
    };
    let secs = options
        .seconds
        .unwrap_or(if options.quick { 4 } else { 6 })
        .max(4);
    let all_rates: &[f64] = if options.quick {
        &[100e6, 1e9, 5e9]
    } else {
        &[100e6, 200e6, 500e6, 1e9, 2e9, 5e9, 10e9, 20e9, 40e9]
    };
    let chosen = |given: &[f64], default: &[f64]| -> Vec<f64> {
        let from = if given.is_empty() { default } else { given };
        from.iter()
            .copied()
            .filter(|&r| r > 0.0 && r <= options.max_bps)
            .collect()
    };
    let rates = chosen(&options.rates, all_rates);
    let shared_rates = chosen(&options.shared_rates, &rates);
    let mtus = if options.mtus.is_empty() {
        vec![1500, 9000]
    } else {
        options.mtus.clone()
    };
    if let Some(&mtu) = mtus.iter().find(|&&m| !(576..=9000).contains(&m)) {
        anyhow::bail!("--mtu {mtu}: the lab takes 576 to 9000");
    }
    let flows: Vec<(u32, u16)> = (0..queues).map(|q| (q, 5201)).collect();
    let shapers = [Shaper::Htbd, Shaper::KernelHtb];
    let mut points = Vec::new();
    let mut capacity = serde_json::Map::new();

    for &mtu in &mtus {
        lab.set_mtu(mtu);
        let frame = mtu + 14;
        // What the lab carries unshaped (the kernel forwarding): the premises' reference.
        let (udp_cap, _) = udp(&lab, &flows, frame, None, secs);
        let tcp_cap = tcp(&lab, 4, secs);
        println!(
            "== MTU {mtu}: unshaped, the generators offer {:.2} Gbit/s of UDP; TCP (4 streams) \
             carries {:.2} Gbit/s",
            udp_cap / 1e9,
            tcp_cap / 1e9
        );
        // What TCP each shaper carries with a class far above the rates (100 Gbit/s): a point
        // its own path cannot carry 1.05x of is the path's limit, not the shaping's error.
        let mut tcp_through = Vec::new();
        for shaper in shapers {
            let (bps, _) = through(&lab, shaper, &pin(one_class(queues, 100e9)), || {
                tcp(&lab, 4, secs)
            })?;
            println!(
                "   TCP through {} with a 100 Gbit/s class: {:.2} Gbit/s",
                shaper.name(),
                bps / 1e9
            );
            tcp_through.push((shaper, bps));
        }
        capacity.insert(
            format!("mtu_{mtu}"),
            json!({
                "udp_offered_bps": udp_cap, "tcp_bps": tcp_cap,
                "tcp_through_bps": tcp_through.iter()
                    .map(|(s, bps)| (s.name().to_owned(), json!(bps)))
                    .collect::<serde_json::Map<_, _>>(),
            }),
        );
        for &target in &rates {
            for shaper in shapers {
                let each = target * 1.2 / f64::from(queues);
                let ((offered, delivered), drops) =
                    through(&lab, shaper, &pin(one_class(queues, target)), || {
                        udp(&lab, &flows, frame, Some(each), secs)
                    })?;
                let mut p = point("one_class", mtu, "udp", shaper, target, offered, delivered);
                p["htbd_drops"] = drops;
                points.push(p);
                let (delivered, drops) =
                    through(&lab, shaper, &pin(one_class(queues, target)), || {
                        tcp(&lab, 4, secs)
                    })?;
                let own = tcp_through
                    .iter()
                    .find(|(s, _)| *s == shaper)
                    .map_or(0.0, |&(_, bps)| bps);
                let mut p = point("one_class", mtu, "tcp", shaper, target, tcp_cap, delivered);
                if p["status"] == "ok" && own < PREMISE * target {
                    println!(
                        "    (path-bound: TCP through {} carries {:.2} Gbit/s unlimited, \
                         under 1.05x the rate)",
                        shaper.name(),
                        own / 1e9
                    );
                    p["status"] = json!("path_bound");
                    p["error_pct"] = Value::Null;
                }
                p["tcp_through_bps"] = json!(own);
                p["htbd_drops"] = drops;
                points.push(p);
            }
        }
    }

    // A root shared by every worker, one busy subscriber per queue.
    lab.set_mtu(1500);
    let shared_flows: Vec<(u32, u16)> = (0..queues).map(|q| (q, 5201 + q as u16)).collect();
    if queues < 2 {
        println!("== shared root: needs --queues 2 or more (one worker per queue); skipped");
    } else {
        println!("== a root shared by {queues} workers, one subscriber per queue, MTU 1500");
        for &target in &shared_rates {
            for shaper in shapers {
                let each = target * 1.2 / f64::from(queues);
                let ((offered, delivered), drops) = through(
                    &lab,
                    shaper,
                    &pin(shared_root(queues, queues, target)),
                    || udp(&lab, &shared_flows, 1514, Some(each), secs),
                )?;
                let mut p = point(
                    "shared_root",
                    1500,
                    "udp",
                    shaper,
                    target,
                    offered,
                    delivered,
                );
                p["htbd_drops"] = drops;
                points.push(p);
            }
        }
    }
    drop(lab);

    let report = json!({
        "machine": crate::machine(),
        "queues": queues,
        "htbd_cpus": options.htbd_cpus,
        "endpoint_rps": options.endpoint_rps,
        "premise": "UDP: offered >= 1.05x the rate; TCP: unshaped TCP at that MTU >= 1.05x the rate (else generator_bound) and TCP through the same shaper with a 100 Gbit/s class >= 1.05x the rate (else path_bound: the shaper's forwarding path, not its shaping, is the limit)",
        "leaf": "each shaper's default (htbd: fq_codel; this kernel has no fq_codel: pfifo)",
        "capacity": capacity,
        "points": points,
    });
    write_report(&options.out, "sweep.json", &report)?;
    let svg = options.out.join("sweep.svg");
    std::fs::write(&svg, chart(&points).to_svg())?;
    println!("wrote {}", svg.display());
    Ok(report)
}

/// Delivered as a share of the target against the target, one line per shaper, MTU, protocol
/// and part; generator-bound points are left out.
fn chart(points: &[Value]) -> LineChart {
    let mut series: Vec<Series> = Vec::new();
    for p in points.iter().filter(|p| p["status"] == "ok") {
        let name = format!(
            "{} {} MTU {}{}",
            p["shaper"].as_str().unwrap_or("?"),
            p["proto"].as_str().unwrap_or("?"),
            p["mtu"],
            if p["part"] == "shared_root" {
                " shared root"
            } else {
                ""
            }
        );
        let target = p["target_bps"].as_f64().unwrap_or(0.0);
        let share = p["delivered_bps"].as_f64().unwrap_or(0.0) / target * 100.0;
        let at = (target / 1e6, share);
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(at),
            None => series.push(Series {
                dashed: name.starts_with("kernel"),
                name,
                points: vec![at],
            }),
        }
    }
    LineChart {
        title: "Seed 001's sweep: one class, rate = ceil (dashed: kernel HTB)".into(),
        x_label: "target rate (Mbit/s)".into(),
        y_label: "delivered, % of the target".into(),
        x_log: true,
        series,
    }
}
