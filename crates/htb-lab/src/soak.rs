//! `htb-lab soak`: htbd under maximum-rate traffic for a long time, with a live change every
//! second, watched for leaks.
//!
//! htbd shapes r2 with 1 003 classes (1 000 idle leaves, a busy default class 1:10 at
//! 100 Mbit/s and a TCP class 1:20, all with the default fq_codel leaf). node-1 floods 1:10
//! with 64-byte UDP frames from the AF_XDP generator as fast as it can (far above the rate:
//! the queue stays full and CoDel drops) and runs a TCP flow through 1:20. Every second one
//! change, in a cycle: 1:10's rate to 80 Mbit/s and back, a pfifo leaf under 1:10 (its queued
//! frames purged), that leaf deleted again (back to fq_codel, purged again), an idle leaf
//! deleted and re-added. Every report interval: frames in use, queued, RSS, drops. At the end
//! the traffic stops and the verdict is: every frame back (none held, none in TX rings, free +
//! fill = total), RSS grown at most 1 MiB since the first report, htbd alive, no panic in its
//! log.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use htb_ipc::Status;
use serde_json::{Value, json};

use crate::proc_status::rss_kib;
use crate::{Htbd, Lab, N1, N2, gen_bin};

/// What to run.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// How long the traffic runs.
    pub duration: Duration,
    /// How often to report (a minute for long runs).
    pub every: Duration,
    /// Where soak.json goes.
    pub out: PathBuf,
    /// Namespace prefix.
    pub lab: String,
}

const IDLE_LEAVES: u32 = 1000;
/// RSS may grow this much after the first report.
const RSS_SLACK_KIB: u64 = 1024;

fn config() -> String {
    let mut t = String::from(
        "[daemon]\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\
         [[interface]]\nname = \"r1\"\n[[interface]]\nname = \"r2\"\n\
         [interface.qdisc]\ndefault = \"10\"\n\
         [[interface.class]]\nid = \"1:1\"\nrate = \"1gbit\"\n\
         [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"100mbit\"\n\
         [[interface.class]]\nid = \"1:20\"\nparent = \"1:1\"\nrate = \"50mbit\"\n\
         [[interface.filter]]\nprio = 1\nmatch = { dport = \"5202\" }\nclassid = \"1:20\"\n",
    );
    for i in 0..IDLE_LEAVES {
        t.push_str(&format!(
            "[[interface.class]]\nid = \"1:{:x}\"\nparent = \"1:1\"\nrate = \"1mbit\"\n\
             ceil = \"1gbit\"\n",
            0x1000 + i
        ));
    }
    t
}

/// The change made at second `n`.
fn change(n: u64) -> Vec<String> {
    let line = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let leaf = format!("1:{:x}", 0x1000 + (n / 6) as u32 % IDLE_LEAVES);
    match n % 6 {
        0 => line("class change dev r2 parent 1:1 classid 1:10 htb rate 80mbit"),
        1 => line("class change dev r2 parent 1:1 classid 1:10 htb rate 100mbit"),
        2 => line("qdisc add dev r2 parent 1:10 handle 10: pfifo limit 500"),
        3 => line("qdisc del dev r2 parent 1:10 handle 10:"),
        4 => line(&format!("class del dev r2 classid {leaf}")),
        _ => line(&format!(
            "class add dev r2 parent 1:1 classid {leaf} htb rate 1mbit ceil 1gbit"
        )),
    }
}

fn drops(s: &Status) -> u64 {
    s.ports
        .iter()
        .map(|p| p.drops_queue + p.drops_pool + p.drops_police + p.drops_purged + p.drops_no_egress)
        .sum()
}

fn flood(lab: &Lab, secs: u64) -> anyhow::Result<Child> {
    let generator = gen_bin();
    lab.cmd(N1, generator.to_str().unwrap_or("htb-xdp-gen"))
        .args(["eth0", "--src-mac", "02:00:0a:c9:01:02"])
        .args(["--dst-mac", "02:00:0a:c9:01:01", "--src-ip", "10.201.1.2"])
        .args(["--dst-ip", "10.201.2.2", "--dport", "5201", "--size", "64"])
        .args(["--seconds", &secs.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", generator.display()))
}

fn tcp(lab: &Lab, secs: u64) -> anyhow::Result<Child> {
    lab.cmd(N1, "iperf3")
        .args(["-c", "10.201.2.2", "-p", "5202", "-t", &secs.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3")
}

/// Parses a duration: `3600`, `90s`, `10m`, `1h`.
///
/// # Errors
/// Anything else.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, ""), |i| text.split_at(i));
    let n: u64 = number
        .parse()
        .with_context(|| format!("invalid duration {text:?}: a number, then s, m or h"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => bail!("invalid duration {text:?}: a number, then s, m or h"),
    };
    Ok(Duration::from_secs(secs))
}

/// Runs the soak; prints a line per report and the verdict, writes `soak.json`. Fails when
/// the verdict is negative.
///
/// # Errors
/// The lab cannot be set up, htbd dies, or the verdict is negative.
pub fn run(options: &SoakOptions) -> anyhow::Result<Value> {
    let lab = Lab::try_up(&options.lab, "router")?;
    let htbd = Htbd::start(&lab, &config());
    let pid = htbd.pid();
    let baseline = htbd.status();
    let secs = options.duration.as_secs().max(10);
    println!(
        "soak: {secs} s of 64-byte frames flat out into 1:10 plus TCP into 1:20, {} classes, \
         a change every second; htbd pid {pid}, {} frames",
        IDLE_LEAVES + 3,
        baseline.frames.total
    );
    println!(
        "{:>8} {:>9} {:>9} {:>9} {:>10} {:>12} {:>14} {:>8}",
        "elapsed", "in use", "queued", "free", "RSS KiB", "drops", "tx pkts", "changes"
    );
    let _tcp_server = lab.iperf_server(N2, 5202);
    let generator = flood(&lab, secs)?;
    let mut tcp = tcp(&lab, secs.saturating_sub(1))?;
    let start = Instant::now();
    let mut reports = Vec::new();
    let mut changes = 0u64;
    let mut change_errors = Vec::new();
    let mut next_report = options.every;
    let mut first_rss = None;
    while start.elapsed() < Duration::from_secs(secs) {
        // One change per second, on the second.
        if let Some(wait) = Duration::from_secs(changes + 1).checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        let words = change(changes);
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        let out = htbd.cli(&args);
        if !out.status.success() {
            change_errors.push(format!(
                "{}: {}",
                words.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        changes += 1;
        if start.elapsed() >= next_report {
            next_report += options.every;
            let s = htbd.status();
            let rss = rss_kib(pid)?;
            first_rss.get_or_insert(rss);
            let tx: u64 = s.ports.iter().map(|p| p.tx_packets).sum();
            println!(
                "{:>7.0}s {:>9} {:>9} {:>9} {:>10} {:>12} {:>14} {:>8}",
                start.elapsed().as_secs_f64(),
                s.frames.in_use(),
                s.frames.queued,
                s.frames.free,
                rss,
                drops(&s),
                tx,
                changes
            );
            reports.push(json!({
                "elapsed_s": start.elapsed().as_secs_f64(),
                "frames_in_use": s.frames.in_use(),
                "queued": s.frames.queued,
                "free": s.frames.free,
                "rss_kib": rss,
                "drops": drops(&s),
                "tx_packets": tx,
                "changes": changes,
            }));
        }
    }
    let flooded = generator.wait_with_output().context("htb-xdp-gen")?;
    let _ = tcp.wait();
    // Let the queues drain (1:10 holds at most a second's worth).
    std::thread::sleep(Duration::from_secs(3));
    let end = htbd.status();
    let rss_end = rss_kib(pid)?;
    let log = htbd.log_text();
    let f = end.frames;
    let mut failures = Vec::new();
    if f.held != 0 || f.queued != 0 || f.in_tx != 0 || f.free + f.in_fill != f.total {
        failures.push(format!(
            "frames not back: {f:?} (baseline {:?})",
            baseline.frames
        ));
    }
    let rss_growth = rss_end.saturating_sub(first_rss.unwrap_or(rss_end));
    if rss_growth > RSS_SLACK_KIB {
        failures.push(format!(
            "RSS grew {rss_growth} KiB after the first report (at most {RSS_SLACK_KIB})"
        ));
    }
    if log.contains("panicked") {
        failures.push("htbd's log reports a panic".into());
    }
    if !change_errors.is_empty() {
        failures.push(format!(
            "{} live changes failed, first: {}",
            change_errors.len(),
            change_errors[0]
        ));
    }
    if !flooded.status.success() {
        failures.push(format!(
            "htb-xdp-gen failed: {}",
            String::from_utf8_lossy(&flooded.stderr).trim()
        ));
    }
    let tx: u64 = end.ports.iter().map(|p| p.tx_packets).sum();
    if tx == 0 {
        failures.push("nothing was forwarded".into());
    }
    let verdict = if failures.is_empty() { "pass" } else { "FAIL" };
    println!(
        "soak {verdict}: {secs} s, {changes} changes, {tx} frames forwarded, {} dropped; frames \
         at the end: {} held, {} in TX rings, {} free + {} in fill rings of {}; RSS {} KiB \
         (+{rss_growth} KiB since the first report)",
        drops(&end),
        f.held,
        f.in_tx,
        f.free,
        f.in_fill,
        f.total,
        rss_end
    );
    for failure in &failures {
        println!("  {failure}");
    }
    let result = json!({
        "seconds": secs,
        "classes": IDLE_LEAVES + 3,
        "changes": changes,
        "change_errors": change_errors.len(),
        "forwarded": tx,
        "dropped": drops(&end),
        "frames_end": {
            "total": f.total, "free": f.free, "in_fill": f.in_fill, "in_tx": f.in_tx,
            "held": f.held, "queued": f.queued,
        },
        "rss_first_kib": first_rss,
        "rss_end_kib": rss_end,
        "rss_growth_kib": rss_growth,
        "reports": reports,
        "verdict": verdict,
        "failures": failures,
    });
    crate::bench::write_report(&options.out, "soak.json", &result)?;
    drop(htbd);
    if !failures.is_empty() {
        bail!("soak failed: {}", failures.join("; "));
    }
    Ok(result)
}
