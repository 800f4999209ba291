//! `htb-lab scale`: 100 000 subscribers on one box (issue 10's goals), writing
//! `target/htb-bench/scale.json`.
//!
//! htbd shapes r2 (towards node-2, the download direction) with an empty tree under `1:1`.
//! A steady 64-byte UDP flow (`htb-xdp-gen`, paced at 20 000 packets/s) crosses htbd to node-2
//! through the default class the whole time, passing the classifier with every subscriber
//! filter in it; `tcpdump` at node-2 timestamps each packet in the kernel. Then:
//!
//! 0. the same CPU load as an import (two parses of the file) without touching htbd: the gaps
//!    this 2-core machine shows anyway;
//! 1. `htb-cli import` of a LibreQoS `ShapedDevices.csv` with N circuits (one class and one
//!    `/32` filter each): total time, and the longest gap between two packets of the flow
//!    while it runs (forwarding stalls show as gaps), against the longest gap before;
//! 2. a Prometheus scrape of every class: time, size, longest gap;
//! 3. `htb-cli -s class show dev r2`: time, size, longest gap;
//! 4. htbd's RSS before and after.
//!
//! htbd's own stall is measured exactly as well: the data plane times every control job it runs
//! between packet batches (`htb-cli status`: the longest since the start).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::proc_status::{peak_rss_kib, rss_kib};
use crate::{Htbd, Lab, N1, N2, R, cli_bin, gen_bin};

/// What to run.
#[derive(Clone, Debug)]
pub struct ScaleOptions {
    /// Where scale.json goes.
    pub out: PathBuf,
    /// Circuits to import.
    pub subscribers: u32,
    /// Namespace prefix.
    pub lab: String,
    /// Data-plane workers (the lab gets as many queues per veth).
    pub workers: u32,
}

/// The flow's rate: one packet per 50 µs.
const PPS: u32 = 20_000;
/// Its frames (L2 bytes without FCS).
const FRAME: u32 = 64;

const CONFIG: &str = "[daemon]\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\
     metrics = \"127.0.0.1:9469\"\n\
     [[interface]]\nname = \"r1\"\n\
     [[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"99\"\n\
     [[interface.class]]\nid = \"1:1\"\nrate = \"10gbit\"\n\
     [[interface.class]]\nid = \"1:99\"\nparent = \"1:1\"\nrate = \"1gbit\"\n";

/// A LibreQoS `ShapedDevices.csv`: the rows `first` (whole lines), then `n` circuits in
/// 100.64.0.0/10, one device and one address each, 10–100 Mbit/s plans.
#[must_use]
pub fn shaped_devices(first: &str, n: u32) -> String {
    let mut s = String::from(
        "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,\
         Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n",
    );
    s.push_str(first);
    for i in 0..n {
        let a = 64 + (i >> 16);
        let (b, c) = ((i >> 8) & 0xff, i & 0xff);
        s.push_str(&format!(
            "{i},Subscriber {i},{i},cpe,,,100.{a}.{b}.{c},,1,1,{},20,\n",
            10 + i % 91
        ));
    }
    s
}

/// `htb-cli import CSV` of the circuits into r2's `1:1`, through `htbd`'s socket.
fn run_import(htbd: &Htbd, csv: &std::path::Path) -> anyhow::Result<std::process::Output> {
    Command::new(cli_bin())
        .args(["import", csv.to_str().unwrap_or_default()])
        .args([
            "--download-dev",
            "r2",
            "--parent",
            "1:1",
            "--timeout",
            "600",
        ])
        .arg("--socket")
        .arg(htbd.socket())
        .output()
        .with_context(|| format!("htb-cli import {}", csv.display()))
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The longest gap between consecutive arrivals inside `[from, to]` (unix seconds), and how
/// many arrived there.
fn longest_gap(arrivals: &[f64], from: f64, to: f64) -> (f64, usize) {
    let inside: Vec<f64> = arrivals
        .iter()
        .copied()
        .filter(|t| (from..=to).contains(t))
        .collect();
    let gap = inside
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(0.0_f64, f64::max);
    (gap, inside.len())
}

/// One measured step: its wall time, the flow during it, and htbd's control jobs.
struct Step {
    from: f64,
    to: f64,
    /// htbd's job counters before and after.
    jobs: (Jobs, Jobs),
}

/// htbd's control-job counters (`htb-cli -j status`).
#[derive(Clone, Copy, Debug)]
struct Jobs {
    /// Jobs run.
    count: u64,
    /// The longest since the start, µs of wall time (what forwarding waited).
    longest_us: u64,
    /// The most CPU time one took since the start, µs (the job's own work).
    longest_cpu_us: u64,
    /// How late the workers' passes ended in all, µs (`htb-cli status`'s "kept from
    /// forwarding": jobs they waited for, and the host's and the kernel's interruptions).
    late_us: u64,
}

fn jobs(htbd: &Htbd) -> Jobs {
    let status = htbd.status();
    Jobs {
        count: status.jobs,
        longest_us: status.longest_job_us,
        longest_cpu_us: status.longest_job_cpu_us,
        late_us: status.late_us(),
    }
}

/// A longest-since-the-start figure over a step: the new one if the step beat the one before
/// it, else "at most" the old one (no job of the step ran longer).
fn longest_in_step(before: u64, after: u64) -> Value {
    if after > before {
        json!(after)
    } else {
        json!(format!("<= {before}"))
    }
}

fn window(arrivals: &[f64], name: &str, step: &Step) -> Value {
    let (gap, packets) = longest_gap(arrivals, step.from, step.to);
    let expected = (step.to - step.from) * f64::from(PPS);
    let (before, after) = step.jobs;
    let longest = longest_in_step(before.longest_us, after.longest_us);
    let longest_cpu = longest_in_step(before.longest_cpu_us, after.longest_cpu_us);
    eprintln!(
        "{name}: {:.1} ms; longest gap at node-2 {:.3} ms over {packets} packets ({expected:.0} \
         expected); {} data-plane jobs, longest {longest} µs ({longest_cpu} µs of CPU); the \
         workers kept from forwarding {:.1} ms",
        (step.to - step.from) * 1e3,
        gap * 1e3,
        after.count - before.count,
        (after.late_us - before.late_us) as f64 / 1e3
    );
    json!({
        "seconds": step.to - step.from,
        "longest_gap_ms": gap * 1e3,
        "packets": packets,
        "packets_expected": expected,
        "dataplane_jobs": after.count - before.count,
        "longest_dataplane_job_us": longest,
        "longest_dataplane_job_cpu_us": longest_cpu,
        "dataplane_kept_from_forwarding_ms": (after.late_us - before.late_us) as f64 / 1e3,
    })
}

/// Runs the benchmark; writes and returns the report.
///
/// # Errors
/// The lab or a tool failed, or a premise did not hold (the flow did not arrive).
pub fn run(options: &ScaleOptions) -> anyhow::Result<Value> {
    let workers = options.workers.max(1);
    let lab = Lab::try_up_with_queues(&options.lab, "router", workers)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let config = CONFIG.replacen(
        "realtime = 1\n",
        &format!("realtime = 1\nworkers = {workers}\n"),
        1,
    );
    let htbd = Htbd::start(&lab, &config);
    let csv = htbd.dir().join("ShapedDevices.csv");
    std::fs::write(&csv, shaped_devices("", options.subscribers))?;
    let rss_before = rss_kib(htbd.pid())?;

    let mut dump = lab
        .cmd(N2, "tcpdump")
        .args([
            "-i", "eth0", "-n", "-tt", "-l", "-q", "udp", "and", "dst", "port", "9",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("tcpdump (scripts/setup.sh installs it)")?;
    let stdout = dump.stdout.take().context("tcpdump's output")?;
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| l.split_whitespace().next()?.parse::<f64>().ok())
            .collect::<Vec<f64>>()
    });
    std::thread::sleep(Duration::from_secs(1));
    // Long enough for a slow import; stopped once the steps are done.
    let seconds = 600;
    let rate = format!("{}bit", PPS * FRAME * 8);
    let generator = lab
        .cmd(N1, gen_bin().to_str().unwrap_or("htb-xdp-gen"))
        .args(["eth0", "--src-mac", "02:00:0a:c9:01:02"])
        .args(["--dst-mac", "02:00:0a:c9:01:01", "--src-ip", "10.201.1.2"])
        .args(["--dst-ip", "10.201.2.2", "--dport", "9"])
        .args(["--size", &FRAME.to_string(), "--rate", &rate])
        .args(["--seconds", &seconds.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("htb-xdp-gen")?;
    let flow_start = unix_now();
    let jobs0 = jobs(&htbd);
    std::thread::sleep(Duration::from_secs(3));
    let baseline = Step {
        from: flow_start + 1.0,
        to: unix_now(),
        jobs: (jobs0, jobs0),
    };

    // The same CPU load without touching htbd: two parses of the file (`--print`), as the
    // import's client and daemon load both cores. What the flow's gaps are on this 2-core
    // machine when htbd's data plane has nothing to do with it.
    let before = jobs(&htbd);
    let t0 = unix_now();
    let parses: Vec<_> = (0..2)
        .map(|_| {
            Command::new(cli_bin())
                .args(["import", csv.to_str().unwrap_or_default(), "--print"])
                .args(["--download-dev", "r2", "--parent", "1:1"])
                .stdout(Stdio::null())
                .spawn()
        })
        .collect::<Result<_, _>>()
        .context("htb-cli import --print")?;
    for mut p in parses {
        p.wait()?;
    }
    let load_window = Step {
        from: t0,
        to: unix_now(),
        jobs: (before, jobs(&htbd)),
    };
    std::thread::sleep(Duration::from_secs(1));

    let before = jobs(&htbd);
    let t0 = unix_now();
    let started = Instant::now();
    let import = run_import(&htbd, &csv)?;
    let import_secs = started.elapsed().as_secs_f64();
    let import_window = Step {
        from: t0,
        to: unix_now(),
        jobs: (before, jobs(&htbd)),
    };
    if !import.status.success() {
        bail!(
            "htb-cli import failed: {}",
            String::from_utf8_lossy(&import.stderr)
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    let rss_after = rss_kib(htbd.pid())?;
    let peak_after_import = peak_rss_kib(htbd.pid())?;

    let before = jobs(&htbd);
    let t0 = unix_now();
    let scrape = lab.exec(
        R,
        &["curl", "-sS", "--fail", "http://127.0.0.1:9469/metrics"],
    );
    let scrape_window = Step {
        from: t0,
        to: unix_now(),
        jobs: (before, jobs(&htbd)),
    };
    if !scrape.status.success() {
        bail!("scrape: {}", String::from_utf8_lossy(&scrape.stderr));
    }
    let scraped_classes = String::from_utf8_lossy(&scrape.stdout)
        .lines()
        .filter(|l| l.starts_with("htb_class_bytes_total{"))
        .count();
    std::thread::sleep(Duration::from_secs(1));
    // What a scrape leaves in htbd's resident set (its text and counters are freed once sent;
    // the memory lock keeps what the allocator does not give back).
    let rss_after_scrape = rss_kib(htbd.pid())?;

    let before = jobs(&htbd);
    let t0 = unix_now();
    let shown = htbd.cli(&["-s", "class", "show", "dev", "r2"]);
    let show_window = Step {
        from: t0,
        to: unix_now(),
        jobs: (before, jobs(&htbd)),
    };
    let show_ok = shown.status.success();
    std::thread::sleep(Duration::from_secs(1));
    let rss_after_show = rss_kib(htbd.pid())?;
    let show_note = if show_ok {
        String::new()
    } else {
        String::from_utf8_lossy(&shown.stderr).trim().to_owned()
    };

    // Every subscriber but the first out again in one batch: a sync with a file of one circuit
    // deletes each other circuit's filter and class (a 2(N-1)-line batch of `filter del` and
    // `class del`; htb-cli refuses a file without circuits, a likely mistake).
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(&csv, shaped_devices("", 1))?;
    let before = jobs(&htbd);
    let t0 = unix_now();
    let started = Instant::now();
    let delete = run_import(&htbd, &csv)?;
    let delete_secs = started.elapsed().as_secs_f64();
    let delete_window = Step {
        from: t0,
        to: unix_now(),
        jobs: (before, jobs(&htbd)),
    };
    if !delete.status.success() {
        bail!(
            "htb-cli import of one circuit failed: {}",
            String::from_utf8_lossy(&delete.stderr)
        );
    }
    std::thread::sleep(Duration::from_millis(500));

    let mut generator = generator;
    if let Some(status) = generator.try_wait()? {
        bail!("htb-xdp-gen stopped early ({status}): the flow did not last the steps");
    }
    let _ = generator.kill();
    let _ = generator.wait();
    std::thread::sleep(Duration::from_millis(500));
    let _ = lab.exec(N2, &["pkill", "-INT", "tcpdump"]);
    let _ = dump.wait();
    let arrivals = reader.join().unwrap_or_default();

    let base = window(&arrivals, "baseline", &baseline);
    let expected = base["packets_expected"].as_f64().unwrap_or(0.0);
    if (base["packets"].as_u64().unwrap_or(0) as f64) < 0.9 * expected {
        bail!(
            "premise failed: the flow did not arrive at {PPS} packets/s before the import \
             ({} of {expected:.0} packets)",
            base["packets"]
        );
    }
    // Every class has its series: 1:1, 1:99 and the subscribers'.
    let classes = options.subscribers as usize + 2;
    if scraped_classes != classes {
        bail!("the scrape held {scraped_classes} classes' counters, not {classes}");
    }
    let report = json!({
        "subscribers": options.subscribers,
        "workers": workers,
        "flow_pps": PPS,
        "baseline": base,
        "cpu_load_only": window(&arrivals, "CPU load only", &load_window),
        "import": {
            "total_seconds": import_secs,
            "flow": window(&arrivals, "import", &import_window),
            "cli": String::from_utf8_lossy(&import.stderr).trim(),
        },
        "scrape": {
            "bytes": scrape.stdout.len(),
            "classes": scraped_classes,
            "flow": window(&arrivals, "scrape", &scrape_window),
        },
        "class_show_stats": {
            "ok": show_ok,
            "bytes": shown.stdout.len(),
            "error": show_note,
            "flow": window(&arrivals, "class show -s", &show_window),
        },
        "delete_all_but_one": {
            "total_seconds": delete_secs,
            "flow": window(&arrivals, "delete all but one", &delete_window),
            "cli": String::from_utf8_lossy(&delete.stderr).trim(),
        },
        "rss_kib": {
            "before": rss_before,
            "after": rss_after,
            "peak_through_import": peak_after_import,
            "after_scrape": rss_after_scrape,
            "after_class_show": rss_after_show,
        },
        "peak_rss_bytes_per_subscriber":
            (peak_after_import.saturating_sub(rss_before) * 1024) as f64 / f64::from(options.subscribers.max(1)),
        "rss_bytes_per_subscriber":
            (rss_after.saturating_sub(rss_before) * 1024) as f64 / f64::from(options.subscribers.max(1)),
    });
    std::fs::create_dir_all(&options.out)?;
    let path = options.out.join("scale.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    eprintln!("{}", serde_json::to_string_pretty(&report)?);
    eprintln!("wrote {}", path.display());
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_is_taken_inside_the_window() {
        let t = [0.0, 1.0, 1.25, 1.75, 2.0, 3.5];
        assert_eq!(longest_gap(&t, 1.0, 2.0), (0.5, 4));
        assert_eq!(longest_gap(&t, 0.0, 3.5).0, 1.5);
        assert_eq!(longest_gap(&t, 5.0, 6.0), (0.0, 0));
    }

    #[test]
    fn circuits_get_distinct_addresses() {
        let csv = shaped_devices("", 70_000);
        let addrs: std::collections::HashSet<&str> = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(6).unwrap())
            .collect();
        assert_eq!(addrs.len(), 70_000);
        assert!(addrs.contains("100.65.17.111"));
    }
}
