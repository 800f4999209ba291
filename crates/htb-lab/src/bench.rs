//! `htb-lab bench`: htbd against kernel forwarding and the kernel's HTB in the same lab, in
//! one run, writing `target/htb-bench/lab.json`:
//!
//! 1. forwarding capacity: 64-byte UDP packets/s (from the AF_XDP generator) and TCP Gbit/s,
//!    with the endpoints' GSO/TSO/GRO off (htbd needs them off) and, for the kernel, also on;
//! 2. accuracy sweep (seed 001): one class from 1 Mbit/s up, UDP and TCP, L2 bytes at node-2;
//! 3. latency under load: ping RTT through a class four TCP flows keep full, per leaf
//!    ([`crate::latency`]), with `latency.svg` of the RTT distributions.
//!
//! Each shaper uses its own default burst (htbd: 1 ms of rate + mtu; kernel: ~mtu): the
//! comparison is of what users get without tuning.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::shaper::{Shaper, install, one_class_tree, uninstall};
use crate::{Lab, N1, N2, R, Reaped};

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Where lab.json goes.
    pub out: PathBuf,
    /// Fewer points and repetitions.
    pub quick: bool,
    /// Namespace prefix.
    pub lab: String,
}

/// A node-2 eth0 receive counter: `rx_bytes` or `rx_packets`.
fn counter(lab: &Lab, name: &str) -> u64 {
    let (bytes, packets) = lab.rx_counters(N2, "eth0");
    if name == "rx_packets" { packets } else { bytes }
}

/// Runs `traffic` (already started) and measures a node-2 counter's rate from `skip` on for
/// `window`.
fn rate_at_n2(lab: &Lab, name: &str, skip: Duration, window: Duration) -> f64 {
    std::thread::sleep(skip);
    let (a, t0) = (counter(lab, name), Instant::now());
    std::thread::sleep(window);
    let (b, t1) = (counter(lab, name), Instant::now());
    (b - a) as f64 / (t1 - t0).as_secs_f64()
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn generator() -> PathBuf {
    crate::htbd_bin().with_file_name("htb-xdp-gen")
}

/// Makes node-2 a cheap sink for 10.201.3.0/24: the router routes it to node-2, which drops it
/// on a blackhole route (one route lookup, no ICMP). A veth delivers to its peer in the
/// sender's softirq, so an expensive sink (UDP port-unreachable replies) would be charged to
/// whichever shaper sends to it.
pub(crate) fn blackhole_sink(lab: &Lab) {
    let _ = lab.exec(N2, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    let _ = lab.exec(N2, &["ip", "route", "add", "blackhole", "10.201.3.0/24"]);
    let _ = lab.exec(
        R,
        &["ip", "route", "add", "10.201.3.0/24", "via", "10.201.2.2"],
    );
}

/// Busy and total CPU time of the machine so far, in clock ticks (/proc/stat).
fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// 64-byte packets/s reaching node-2 while generators flood node-1 → the sink behind node-2, and
/// the machine's busy CPU time per delivered packet (ns) over the same window: on two vCPUs the
/// generator often cannot offer more than a forwarder takes, and then the CPU cost per packet is
/// what tells the forwarders apart. One generator per `(queue, destination)`: each sends on that
/// TX queue of node-1 (which a veth delivers to the same RX queue of r1).
pub(crate) fn pps_64_flows(lab: &Lab, flows: &[(u32, &str)]) -> (f64, f64) {
    let generators: Vec<Reaped> = flows
        .iter()
        .filter_map(|&(queue, dst)| spawn_generator(lab, None, queue, dst, 5, &[]))
        .collect();
    if generators.len() != flows.len() {
        return (0.0, 0.0);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let (busy0, _) = cpu_ticks();
    let pps = rate_at_n2(lab, "rx_packets", Duration::ZERO, Duration::from_secs(3));
    let (busy1, _) = cpu_ticks();
    for mut g in generators {
        let _ = g.0.wait();
    }
    // USER_HZ is 100 on Linux: a tick is 10 ms.
    let busy_ns = (busy1 - busy0) as f64 * 1e7;
    (pps, busy_ns / (pps * 3.0).max(1.0))
}

/// Starts `htb-xdp-gen` in node-1, in the background: node-1 → `dst` (behind node-2) on TX
/// queue `queue` for `secs`, pinned to `cpu` when given, with `extra` arguments (`--size`,
/// `--rate`, `--dport`: 64-byte frames flat out without them). `None` when it cannot start.
pub(crate) fn spawn_generator(
    lab: &Lab,
    cpu: Option<usize>,
    queue: u32,
    dst: &str,
    secs: u32,
    extra: &[&str],
) -> Option<Reaped> {
    let mut cmd = match cpu {
        Some(cpu) => {
            let mut c = lab.cmd(N1, "taskset");
            c.args(["-c", &cpu.to_string()]).arg(generator());
            c
        }
        None => lab.cmd(N1, generator().to_str().unwrap_or("htb-xdp-gen")),
    };
    cmd.args(["eth0", "--src-mac", "02:00:0a:c9:01:02"])
        .args(["--dst-mac", "02:00:0a:c9:01:01", "--src-ip", "10.201.1.2"])
        .args(["--dst-ip", dst, "--seconds", &secs.to_string()])
        .args(["--queue", &queue.to_string()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
        .map(Reaped)
}

/// [`pps_64_flows`] `reps` times: the medians of the packets/s and of the CPU per packet.
pub(crate) fn pps_64_median(lab: &Lab, reps: usize, flows: &[(u32, &str)]) -> (f64, f64) {
    let runs: Vec<(f64, f64)> = (0..reps).map(|_| pps_64_flows(lab, flows)).collect();
    (
        median(runs.iter().map(|r| r.0).collect()),
        median(runs.iter().map(|r| r.1).collect()),
    )
}

/// The usual flood: one generator on queue 0 to 10.201.3.1 (the sink).
pub(crate) const ONE_FLOOD: &[(u32, &str)] = &[(0, "10.201.3.1")];

/// A figure of a report that a goal compares, `(name, field, over, under)`: the ratio `name`
/// is `rows[over][field] / rows[under][field]`.
pub(crate) type Ratio = (&'static str, &'static str, &'static str, &'static str);

/// Packets per second, a row's throughput.
pub(crate) const PPS: &str = "pps";
/// Machine CPU nanoseconds per packet.
pub(crate) const CPU_NS: &str = "cpu_ns_per_packet";

/// `{name: ratio}` for each of `table` over `rows` (keyed by configuration); a missing figure
/// counts 0 and a zero divisor 1, so a ratio is always a number.
pub(crate) fn ratios(rows: &serde_json::Map<String, Value>, table: &[Ratio]) -> Value {
    let figure = |row: &str, field: &str| rows.get(row).and_then(|r| r[field].as_f64());
    table
        .iter()
        .map(|&(name, field, over, under)| {
            let over = figure(over, field).unwrap_or(0.0);
            let under = figure(under, field).unwrap_or(0.0).max(1.0);
            (name.to_string(), Value::from(over / under))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Writes `report` as `out/name` (pretty JSON), creating `out`, and says so.
pub(crate) fn write_report(
    out: &std::path::Path,
    name: &str,
    report: &Value,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out)?;
    let path = out.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(report)?)?;
    println!("wrote {}", path.display());
    Ok(path)
}

/// TCP goodput node-1 → node-2 over 5 s, bit/s.
fn tcp_bps(lab: &Lab) -> f64 {
    let _server = lab.iperf_server(N2, 5201);
    let report = lab.iperf(N1, "10.201.2.2", 5201, 5, None, false);
    report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
}

fn offloads(lab: &Lab, on: bool) {
    let state = if on { "on" } else { "off" };
    for ns in [N1, N2] {
        let _ = lab.exec(
            ns,
            &[
                "ethtool", "-K", "eth0", "tx", state, "tso", state, "gso", state, "gro", state,
            ],
        );
    }
}

/// L2 bit/s through a class at `bps` for UDP (offered 1.2×) or TCP, at node-2's veth.
fn shaped_bps(lab: &Lab, bps: f64, udp: bool) -> f64 {
    let _server = lab.iperf_server(N2, 5201);
    let mut args = vec![
        "-c".to_owned(),
        "10.201.2.2".into(),
        "-p".into(),
        "5201".into(),
        "-t".into(),
        "7".into(),
    ];
    if udp {
        args.extend([
            "-u".into(),
            "-l".into(),
            "1400".into(),
            "-b".into(),
            format!("{:.0}", bps * 1.2),
        ]);
    }
    let client = lab
        .cmd(N1, "iperf3")
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped);
    let Ok(mut client) = client else { return 0.0 };
    let rate = rate_at_n2(
        lab,
        "rx_bytes",
        Duration::from_secs(2),
        Duration::from_secs(4),
    ) * 8.0;
    let _ = client.0.wait();
    rate
}

/// Runs the benchmark; prints a summary and writes `lab.json` into `out`.
///
/// # Errors
/// When the lab cannot run here.
pub fn run(options: &BenchOptions) -> anyhow::Result<Value> {
    let lab = Lab::try_up(&options.lab, "router")
        .map_err(|why| anyhow::anyhow!("the lab cannot run here: {why}"))?;
    let reps = if options.quick { 1 } else { 3 };
    let shapers = [Shaper::Htbd, Shaper::Kernel, Shaper::KernelHtb];

    println!("== capacity: 64-byte UDP packets/s (AF_XDP generator), median of {reps}");
    blackhole_sink(&lab);
    let mut pps = serde_json::Map::new();
    let mut cpu = serde_json::Map::new();
    for shaper in shapers {
        let installed = install(&lab, shaper, &one_class_tree("10gbit", None))?;
        let (value, ns) = pps_64_median(&lab, reps, ONE_FLOOD);
        uninstall(&lab, installed);
        println!(
            "  {:<11} {:>10.0} pps, {ns:>7.0} ns of machine CPU per packet",
            shaper.name(),
            value
        );
        pps.insert(shaper.name().into(), json!(value));
        cpu.insert(shaper.name().into(), json!(ns));
    }

    println!("== capacity: TCP goodput node-1 → node-2 (iperf3, one stream), median of {reps}");
    let mut tcp = serde_json::Map::new();
    for shaper in shapers {
        for on in [false, true] {
            if on && shaper == Shaper::Htbd {
                continue; // AF_XDP copy mode needs whole frames: offloads stay off for htbd
            }
            offloads(&lab, on);
            let installed = install(&lab, shaper, &one_class_tree("10gbit", None))?;
            let value = median((0..reps).map(|_| tcp_bps(&lab)).collect());
            uninstall(&lab, installed);
            let key = format!(
                "{}_offloads_{}",
                shaper.name(),
                if on { "on" } else { "off" }
            );
            println!("  {key:<26} {:>8.3} Gbit/s", value / 1e9);
            tcp.insert(key, json!(value));
        }
    }
    offloads(&lab, false);

    println!("== accuracy sweep: one class, L2 at node-2 (seed 001)");
    let targets: &[f64] = if options.quick {
        &[1e6, 10e6, 100e6, 1e9]
    } else {
        &[
            1e6, 2e6, 5e6, 10e6, 20e6, 50e6, 100e6, 200e6, 500e6, 1e9, 1.5e9,
        ]
    };
    let mut sweep = Vec::new();
    for &target in targets {
        for udp in [true, false] {
            let mut row = serde_json::Map::new();
            row.insert("target_bps".into(), json!(target));
            row.insert("proto".into(), json!(if udp { "udp" } else { "tcp" }));
            let mut line = format!(
                "  {:>7.0} Mbit/s {}",
                target / 1e6,
                if udp { "UDP" } else { "TCP" }
            );
            for shaper in [Shaper::Htbd, Shaper::KernelHtb] {
                let installed = install(
                    &lab,
                    shaper,
                    &one_class_tree(&format!("{target:.0}bit"), None),
                )?;
                let measured = shaped_bps(&lab, target, udp);
                uninstall(&lab, installed);
                let error = (measured - target) / target * 100.0;
                row.insert(format!("{}_bps", shaper.name()), json!(measured));
                row.insert(format!("{}_error_pct", shaper.name()), json!(error));
                line += &format!(
                    "   {} {:>9.3} ({:+6.2} %)",
                    shaper.name(),
                    measured / 1e6,
                    error
                );
            }
            println!("{line}");
            sweep.push(Value::Object(row));
        }
    }

    let (latency, latency_svg) = crate::latency::bench(&lab, options.quick)?;
    drop(lab);

    let pps_ratio =
        pps["htbd"].as_f64().unwrap_or(0.0) / pps["kernel_htb"].as_f64().unwrap_or(1.0).max(1.0);
    let worst = |proto: &str, shaper: &str| {
        sweep
            .iter()
            .filter(|r| r["proto"] == proto)
            .map(|r| {
                r[format!("{shaper}_error_pct")]
                    .as_f64()
                    .unwrap_or(f64::NAN)
                    .abs()
            })
            .fold(0.0f64, f64::max)
    };
    let result = json!({
        "offloads": "endpoints' tx checksum, TSO, GSO, GRO off unless a key says offloads_on; router veths default",
        "burst": "each shaper's default (htbd: 1 ms of rate + 1600 B; kernel: ~1600 B)",
        "capacity": {"pps_64b": pps, "cpu_ns_per_packet_64b": cpu, "tcp_bps": tcp},
        "sweep": sweep,
        "latency": latency,
        "goals": {
            "htbd_pps_over_kernel_htb": pps_ratio,
            "kernel_htb_cpu_over_htbd_cpu": cpu["kernel_htb"].as_f64().unwrap_or(0.0) / cpu["htbd"].as_f64().unwrap_or(1.0).max(1.0),
            "htbd_worst_udp_error_pct": worst("udp", "htbd"),
            "htbd_worst_tcp_error_pct": worst("tcp", "htbd"),
            "kernel_htb_worst_udp_error_pct": worst("udp", "kernel_htb"),
            "kernel_htb_worst_tcp_error_pct": worst("tcp", "kernel_htb"),
        }
    });
    println!("goals: {}", serde_json::to_string_pretty(&result["goals"])?);
    std::fs::create_dir_all(&options.out).context("creating the output directory")?;
    let path = options.out.join("lab.json");
    std::fs::write(&path, serde_json::to_string_pretty(&result)?)?;
    let svg = options.out.join("latency.svg");
    std::fs::write(&svg, latency_svg)?;
    println!("wrote {} and {}", path.display(), svg.display());
    Ok(result)
}
