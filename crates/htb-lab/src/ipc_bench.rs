//! `htb-lab bench-ipc`: live changes while traffic flows, writing `target/htb-bench/ipc.json`.
//!
//! htbd shapes r2 with a tree of 1 000 leaves under one root; a UDP flow crosses the default
//! class the whole time. Then, in three ways, 10 000 class changes (each leaf's and the busy
//! class's rate, alternating):
//!
//! 1. one request per change over one connection (an automation client using the IPC
//!    directly): changes/s and the time from sending a change to htbd's answer — by then the
//!    change is journaled and live in the data plane;
//! 2. all of them as one atomic batch (`htb-cli -b FILE`);
//! 3. one `htb-cli class change …` process per change (how tc scripts run), for 1 000 changes.
//!
//! Packets lost: a UDP flow runs around each phase; iperf3 counts lost and out-of-order
//! datagrams by sequence number, and htbd its own drops — both should be 0: the flow is below every rate
//! the busy class is changed to.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use htb_ipc::{
    ClassSpec, Command as Change, InterfaceName, ReplyBody, Request, RequestBody, Response,
};
use serde_json::{Value, json};

use crate::{Htbd, Lab, N2, cli_bin};

/// What to run.
#[derive(Clone, Debug)]
pub struct IpcBenchOptions {
    /// Where ipc.json goes.
    pub out: PathBuf,
    /// Changes per phase (10 000; phase 3 runs a tenth).
    pub changes: usize,
    /// Namespace prefix.
    pub lab: String,
}

const LEAVES: u32 = 1000;
/// The UDP flow, below both rates the busy class alternates between.
const FLOW: &str = "40M";

fn tree() -> String {
    let mut t = String::from(
        "[daemon]\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n[[interface]]\nname = \"r1\"\n\
         [[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"10\"\n\
         [[interface.class]]\nid = \"1:1\"\nrate = \"1gbit\"\n\
         [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"100mbit\"\n",
    );
    for i in 0..LEAVES {
        t.push_str(&format!(
            "[[interface.class]]\nid = \"1:{:x}\"\nparent = \"1:1\"\nrate = \"1mbit\"\nceil = \"1gbit\"\n",
            0x1000 + i
        ));
    }
    t
}

/// The n-th change: most go to the idle leaves, every tenth to the busy class.
fn change(n: usize, dev: &InterfaceName) -> ClassSpec {
    let busy = n.is_multiple_of(10);
    let id = if busy {
        htb_core::ClassId::new(1, 0x10)
    } else {
        htb_core::ClassId::new(1, 0x1000 + (n as u32 % LEAVES))
    };
    let rate = if busy {
        if n.is_multiple_of(20) {
            80_000_000
        } else {
            100_000_000
        }
    } else {
        1_000_000 + (n as u64 % 7) * 100_000
    };
    ClassSpec {
        parent: Some(htb_core::ClassId::new(1, 1)),
        ceil: (!busy).then_some(htb_core::Rate::from_gbit(1)),
        ..ClassSpec::new(dev.clone(), id, htb_core::Rate::from_bits_per_sec(rate))
    }
}

fn tc_line(c: &ClassSpec) -> String {
    let mut line = format!(
        "class change dev {} parent 1:1 classid {} htb rate {}bit",
        c.dev, c.id, c.rate
    );
    if let Some(ceil) = c.ceil {
        line.push_str(&format!(" ceil {ceil}bit"));
    }
    line
}

fn htbd_drops(htbd: &Htbd) -> u64 {
    let text = htbd.cli_ok(&["-j", "-s", "qdisc", "show", "dev", "r2"]);
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    v[0]["drops"].as_u64().unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `changes` changes since `start`, at what rate, and the median and 99th percentile of their
/// `latencies` (sorted here) under `key`.
fn summary(changes: usize, start: Instant, latencies: &mut [f64], key: &str) -> Value {
    let total = start.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let mut report = json!({
        "changes": changes,
        "seconds": total,
        "changes_per_s": changes as f64 / total,
    });
    report[key] = json!({
        "p50": percentile(latencies, 0.5),
        "p99": percentile(latencies, 0.99),
    });
    report
}

/// Seconds of UDP flow around each phase (which starts one second in).
const FLOW_SECS: u32 = 6;

/// Runs `phase` inside a UDP flow through the busy class; returns its result with what the
/// flow lost (iperf3's sequence numbers: lost and out-of-order datagrams) and htbd's drops.
fn with_loss(
    lab: &Lab,
    htbd: &Htbd,
    phase: impl FnOnce() -> anyhow::Result<Value>,
) -> anyhow::Result<Value> {
    let drops0 = htbd_drops(htbd);
    let flow = lab.udp_flow(5201, FLOW, FLOW_SECS);
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    let result = phase();
    let phase_secs = started.elapsed().as_secs_f64();
    let output = flow.wait_with_output();
    let mut result = result?;
    let report: Value = serde_json::from_slice(&output?.stdout).context("iperf3's report")?;
    let received = &report["end"]["sum_received"];
    result["flow_packets"] = received["packets"].clone();
    result["flow_lost_packets"] = received["lost_packets"].clone();
    result["flow_out_of_order"] = report["end"]["streams"][0]["udp"]["out_of_order"].clone();
    result["phase_within_flow"] = json!(phase_secs + 1.0 < f64::from(FLOW_SECS));
    result["htbd_drops"] = json!(htbd_drops(htbd) - drops0);
    Ok(result)
}

fn one_per_request(htbd: &Htbd, changes: usize) -> anyhow::Result<Value> {
    let dev: InterfaceName = "r2".parse()?;
    let mut stream = UnixStream::connect(htbd.socket()).context("connecting to htbd")?;
    let mut latencies = Vec::with_capacity(changes);
    let start = Instant::now();
    for n in 0..changes {
        let request = Request::new(RequestBody::Apply {
            commands: vec![Change::ClassChange(Box::new(change(n, &dev)))],
        });
        let t0 = Instant::now();
        htb_ipc::write_frame(&mut stream, &request)?;
        let response: Response = htb_ipc::read_frame(&mut stream)?;
        latencies.push(t0.elapsed().as_secs_f64() * 1e6);
        match response.result {
            Ok(ReplyBody::Applied { .. }) => {}
            other => anyhow::bail!("change {n} refused: {other:?}"),
        }
    }
    let mut report = summary(changes, start, &mut latencies, "apply_latency_us");
    report["apply_latency_us"]["max"] = json!(latencies.last().copied().unwrap_or(0.0));
    Ok(report)
}

fn one_batch(htbd: &Htbd, changes: usize) -> anyhow::Result<Value> {
    let dev: InterfaceName = "r2".parse()?;
    let file = htbd.dir().join("bench.batch");
    let text: String = (0..changes)
        .map(|n| tc_line(&change(n, &dev)) + "\n")
        .collect();
    std::fs::write(&file, text)?;
    let start = Instant::now();
    let out = Command::new(cli_bin())
        .arg("--socket")
        .arg(htbd.socket())
        .arg("-b")
        .arg(&file)
        .output()?;
    let seconds = start.elapsed().as_secs_f64();
    anyhow::ensure!(
        out.status.success(),
        "htb-cli -b: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(json!({
        "changes": changes,
        "seconds": seconds,
        "changes_per_s": changes as f64 / seconds,
    }))
}

fn one_process_each(htbd: &Htbd, changes: usize) -> anyhow::Result<Value> {
    let dev: InterfaceName = "r2".parse()?;
    let mut latencies = Vec::with_capacity(changes);
    let start = Instant::now();
    for n in 0..changes {
        let line = tc_line(&change(n, &dev));
        let t0 = Instant::now();
        let status = Command::new(cli_bin())
            .arg("--socket")
            .arg(htbd.socket())
            .args(line.split_whitespace())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        latencies.push(t0.elapsed().as_secs_f64() * 1e6);
        anyhow::ensure!(status.success(), "{line} failed");
    }
    Ok(summary(
        changes,
        start,
        &mut latencies,
        "process_latency_us",
    ))
}

/// Runs the benchmark; writes and returns the JSON.
///
/// # Errors
/// When the lab cannot run or a change is refused.
pub fn run(options: &IpcBenchOptions) -> anyhow::Result<Value> {
    let lab = Lab::try_up(&options.lab, "router")
        .map_err(|why| anyhow::anyhow!("the lab cannot run here: {why}"))?;
    let htbd = Htbd::start(&lab, &tree());
    let _server = crate::Reaped(
        lab.cmd(N2, "iperf3")
            .args(["-s", "-p", "5201"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    std::thread::sleep(Duration::from_millis(300));
    let n = options.changes;
    println!("{n} changes, one request each (IPC) ...");
    let single = with_loss(&lab, &htbd, || one_per_request(&htbd, n))?;
    println!("{single}");
    println!("{n} changes in one atomic batch (htb-cli -b) ...");
    let batch = with_loss(&lab, &htbd, || one_batch(&htbd, n))?;
    println!("{batch}");
    let each = (n / 10).max(1);
    println!("{each} changes, one htb-cli process each ...");
    let processes = with_loss(&lab, &htbd, || one_process_each(&htbd, each))?;
    println!("{processes}");
    let result = json!({
        "setup": format!("{LEAVES} leaves + 1 busy class on r2; UDP {FLOW}bit/s of 1400-byte datagrams through the busy class throughout; every tenth change hits the busy class (80 <-> 100 Mbit/s)"),
        "anchor": "LibreQoS: 13 190 tc operations in ~0.5 s; each full reload loses 0-50 ms of traffic",
        "ipc_one_request_per_change": single,
        "cli_one_batch": batch,
        "cli_one_process_per_change": processes,
    });
    crate::bench::write_report(&options.out, "ipc.json", &result)?;
    Ok(result)
}
