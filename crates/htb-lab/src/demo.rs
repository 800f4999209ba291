//! `htb-lab demo`: the same tree and the same UDP flows through htbd and through the kernel's
//! HTB, in the same lab, measured the same way; per-class rates against HTB's theory (our
//! simulator on the same tree), side by side.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

use htb_cli::plot::{LineChart, Series};
use htb_cli::sim::{Flow, FlowRate, Scenario};
use htb_core::{ClassId, Instant, Target};
use htbd::DaemonConfig;

use crate::latency::{Pinger, Rtts};
use crate::shaper::apply_tc;
use crate::traffic::{FlowResult, FlowSpec, udp_flows};
use crate::{Htbd, Lab, R};

/// What to run.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// htbd config (router mode, the lab's r1/r2).
    pub config: PathBuf,
    /// Seconds of traffic per shaper.
    pub seconds: u32,
    /// Where the SVG and JSON go.
    pub out: PathBuf,
    /// Namespace prefix.
    pub lab: String,
}

/// One class's results.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClassRow {
    /// Class id.
    pub class: String,
    /// UDP port that selects it.
    pub port: u16,
    /// HTB's steady state for this tree with every class busy (the simulator's result).
    pub expected_bps: f64,
    /// Measured through htbd.
    pub htbd_bps: f64,
    /// Measured through the kernel's HTB.
    pub kernel_bps: f64,
    #[serde(skip)]
    htbd_series: Vec<(f64, f64)>,
    #[serde(skip)]
    kernel_series: Vec<(f64, f64)>,
}

/// The config with its control socket and state directory moved into `dir`.
fn relocate(text: &str, dir: &Path) -> String {
    text.lines()
        .map(|line| match line.split_once('=').map(|(k, _)| k.trim()) {
            Some("socket") => format!("socket = \"{}\"", dir.join("htbd.sock").display()),
            Some("state_dir") => format!("state_dir = \"{}\"", dir.join("state").display()),
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// HTB's allocation for `classes` all busy, from the simulator.
fn expected(tree: &htb_config::TreeSpec, classes: &[ClassId]) -> Vec<f64> {
    let flows = classes
        .iter()
        .map(|&id| Flow {
            target: Target::Class(id),
            label: id.to_string(),
            sizes: vec![crate::traffic::DATAGRAM + 42],
            rate: FlowRate::Max,
            start: Instant::ZERO,
            stop: Instant::from_nanos(20_000_000_000),
            ecn: false,
            hosts: (0, 0),
            dscp: 0,
            tcp_acks: false,
        })
        .collect();
    let scenario = Scenario {
        duration: htb_core::Duration::from_secs(20),
        warmup: htb_core::Duration::from_secs(5),
        link: None,
        tree: tree.clone(),
        flows,
        changes: Vec::new(),
    };
    let report = htb_cli::sim::run(&scenario);
    classes
        .iter()
        .map(|id| {
            report
                .classes
                .iter()
                .find(|c| c.id == *id)
                .map_or(0.0, |c| c.rate_bps)
        })
        .collect()
}

/// Runs the demo; prints the table and writes `demo.svg` and `demo.json` into `out`.
///
/// # Errors
/// When the config has no shaped port with port-selected classes, or the lab cannot run.
pub fn run(options: &DemoOptions) -> anyhow::Result<Vec<ClassRow>> {
    let text = std::fs::read_to_string(&options.config)
        .with_context(|| format!("cannot read {}", options.config.display()))?;
    let config = DaemonConfig::parse(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", options.config.display()))?;
    let (trees, port) = config
        .interfaces
        .iter()
        .zip(&config.engine.ports)
        .find(|(_, p)| p.trees.len() == 1 && !p.filters.is_empty())
        .context("the config shapes no port with one tree and filters")?;
    let tree = &port.trees[0].tree;
    // One flow per class, on the destination port its filter selects.
    let mut classes: Vec<(ClassId, u16)> = Vec::new();
    for filter in &port.filters {
        if let Some(range) = filter.matcher.dport
            && range.first == range.last
            && !classes.iter().any(|(c, _)| *c == filter.class)
        {
            classes.push((filter.class, range.first));
        }
    }
    if classes.is_empty() {
        bail!("no filter selects a class by a single destination port");
    }
    let ids: Vec<ClassId> = classes.iter().map(|(c, _)| *c).collect();
    let expect = expected(tree, &ids);
    let flows: Vec<FlowSpec> = classes
        .iter()
        .zip(&expect)
        .map(|(&(_, port), &bps)| FlowSpec {
            port,
            offered_bps: (bps * 1.3).max(bps + 5e6),
        })
        .collect();

    let lab = Lab::try_up(&options.lab, "router")
        .map_err(|why| anyhow::anyhow!("the lab cannot run here: {why}"))?;
    let warmup = 2.0;
    println!(
        "== htbd: {} flows for {} s through {} ({})",
        flows.len(),
        options.seconds,
        port.name,
        options.config.display()
    );
    let dir = tempfile::tempdir()?;
    let htbd = Htbd::start(&lab, &relocate(&text, dir.path()));
    let (through_htbd, htbd_ping) = flows_and_pings(&lab, &flows, options.seconds, warmup);
    drop(htbd);
    std::thread::sleep(Duration::from_millis(500));

    println!("== kernel HTB: the same tree through tc (htbd --print-tc), kernel forwarding");
    let notes = apply_tc(&lab, &htbd::tc_export::port_commands(trees, port)?)?;
    for note in &notes {
        println!("   note: {note}");
    }
    let (through_kernel, kernel_ping) = flows_and_pings(&lab, &flows, options.seconds, warmup);
    let _ = lab.exec(R, &["tc", "qdisc", "del", "dev", &port.name, "root"]);
    drop(lab);

    let rows: Vec<ClassRow> = classes
        .iter()
        .zip(&expect)
        .zip(through_htbd.into_iter().zip(through_kernel))
        .map(
            |((&(class, port), &expected_bps), (h, k)): ((_, _), (FlowResult, FlowResult))| {
                ClassRow {
                    class: class.to_string(),
                    port,
                    expected_bps,
                    htbd_bps: h.mean_bps(),
                    kernel_bps: k.mean_bps(),
                    htbd_series: h.series,
                    kernel_series: k.series,
                }
            },
        )
        .collect();
    print!("{}", table(&rows, tree));
    let (default_class, leaf) = default_leaf(tree);
    // The kernel keeps pfifo where it lacks the leaf htbd uses.
    let kernel_leaf = if notes.is_empty() { leaf } else { "pfifo" };
    println!("\nping RTT through the default class {default_class} while its flow keeps it full:");
    for (who, rtts) in [
        (format!("htbd ({leaf} leaf)"), &htbd_ping),
        (format!("kernel HTB ({kernel_leaf} leaf)"), &kernel_ping),
    ] {
        println!("  {who:<26} {}", ping_line(rtts));
    }
    std::fs::create_dir_all(&options.out)?;
    std::fs::write(
        options.out.join("demo.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    let chart = chart(&rows);
    std::fs::write(options.out.join("demo.svg"), chart)?;
    println!(
        "wrote {0}/demo.svg and {0}/demo.json",
        options.out.display()
    );
    Ok(rows)
}

/// Runs `flows` as [`udp_flows`] does while node-1 pings node-2 at 10 Hz over the steady part.
fn flows_and_pings(
    lab: &Lab,
    flows: &[FlowSpec],
    secs: u32,
    warmup: f64,
) -> (Vec<FlowResult>, Rtts) {
    let pings = ((f64::from(secs) - warmup - 1.5) * 10.0).max(10.0) as u32;
    std::thread::scope(|scope| {
        let pinger = scope.spawn(|| {
            // udp_flows starts its senders 0.4 s in.
            std::thread::sleep(Duration::from_secs_f64(warmup + 0.4));
            Pinger::start(lab, pings, 0.1).finish()
        });
        let results = udp_flows(lab, flows, secs, warmup);
        (results, pinger.join().unwrap_or_default())
    })
}

/// The class unclassified traffic (ping) goes to, and its leaf's kind.
fn default_leaf(tree: &htb_config::TreeSpec) -> (String, &'static str) {
    let c = &tree.config;
    let id = format!("{:x}:{:x}", c.major, c.default_minor);
    let leaf = tree
        .classes
        .iter()
        .find(|class| class.id.to_string() == id)
        .and_then(|class| class.leaf.as_ref())
        .map_or(c.default_leaf, |l| l.config);
    (id, leaf.kind().name())
}

fn ping_line(rtts: &Rtts) -> String {
    format!(
        "p50 {:>8.2} ms  p95 {:>8.2} ms  max {:>8.2} ms  {:.0} % lost",
        rtts.quantile(0.5),
        rtts.quantile(0.95),
        rtts.quantile(1.0),
        rtts.loss_pct()
    )
}

fn error(measured: f64, expected: f64) -> String {
    if expected > 0.0 {
        format!("{:+.2} %", (measured - expected) / expected * 100.0)
    } else {
        "-".into()
    }
}

fn table(rows: &[ClassRow], tree: &htb_config::TreeSpec) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nper-class L2 rate, all classes busy (mean of the steady part, Mbit/s)"
    );
    let _ = writeln!(
        out,
        "{:<6} {:>5} {:>9} {:>9} {:>4} {:>10} {:>10} {:>9} {:>12} {:>9}",
        "class", "port", "rate", "ceil", "prio", "expected", "htbd", "error", "kernel HTB", "error"
    );
    for r in rows {
        let spec = tree
            .classes
            .iter()
            .find(|c| c.id.to_string() == r.class)
            .map(|c| &c.spec);
        let (rate, ceil, prio) = spec.map_or((0, 0, 0), |s| {
            (
                s.rate.bits_per_sec(),
                s.ceil.unwrap_or(s.rate).bits_per_sec(),
                s.prio,
            )
        });
        let _ = writeln!(
            out,
            "{:<6} {:>5} {:>9.1} {:>9.1} {:>4} {:>10.2} {:>10.2} {:>9} {:>12.2} {:>9}",
            r.class,
            r.port,
            rate as f64 / 1e6,
            ceil as f64 / 1e6,
            prio,
            r.expected_bps / 1e6,
            r.htbd_bps / 1e6,
            error(r.htbd_bps, r.expected_bps),
            r.kernel_bps / 1e6,
            error(r.kernel_bps, r.expected_bps)
        );
    }
    let sum = |f: fn(&ClassRow) -> f64| rows.iter().map(f).sum::<f64>();
    let (e, h, k) = (
        sum(|r| r.expected_bps),
        sum(|r| r.htbd_bps),
        sum(|r| r.kernel_bps),
    );
    let _ = writeln!(
        out,
        "{:<6} {:>5} {:>9} {:>9} {:>4} {:>10.2} {:>10.2} {:>9} {:>12.2} {:>9}",
        "total",
        "",
        "",
        "",
        "",
        e / 1e6,
        h / 1e6,
        error(h, e),
        k / 1e6,
        error(k, e)
    );
    out
}

fn chart(rows: &[ClassRow]) -> String {
    let mut series = Vec::new();
    for r in rows {
        series.push(Series {
            name: format!("{} htbd", r.class),
            points: mbit(&r.htbd_series),
            dashed: false,
        });
    }
    for r in rows {
        series.push(Series {
            name: format!("{} kernel HTB", r.class),
            points: mbit(&r.kernel_series),
            dashed: true,
        });
    }
    LineChart {
        title: "per-class rate: htbd (solid) and kernel HTB (dashed), same tree, same flows".into(),
        x_label: "time (s)".into(),
        y_label: "L2 rate at node-2 (Mbit/s)".into(),
        x_log: false,
        series,
    }
    .to_svg()
}

fn mbit(series: &[(f64, f64)]) -> Vec<(f64, f64)> {
    series.iter().map(|&(t, bps)| (t, bps / 1e6)).collect()
}
