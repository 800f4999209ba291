//! Latency under load: ping RTT from node-1 to node-2 through a class that four TCP flows
//! (`iperf3 -P 4`) keep full — what a user of a saturated link feels. htbd with its default
//! leaf (fq_codel), htbd with pfifo leaves and the kernel's HTB with pfifo leaves (the kernel
//! here has no sch_fq_codel) in the same lab, one after the other; with ECN on, how often the
//! leaf marked instead of dropping. `htb-lab bench` runs [`bench()`] and `htb-lab latency` runs
//! it alone; the lab tests use [`ping_through_tcp_load`].

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use htb_cli::plot::{LineChart, Series};
use serde_json::{Value, json};

pub use crate::rtts::Rtts;
use crate::shaper::{Installed, Shaper, install, one_class_tree, uninstall};
use crate::{Lab, N1, N2, R};

/// Pings node-2 from node-1 in the background; dropping it stops the ping.
#[derive(Debug)]
pub struct Pinger {
    child: Option<Child>,
    count: u32,
}

impl Pinger {
    /// Starts `count` echo requests, one every `interval` seconds (below 0.2 s needs root).
    ///
    /// # Panics
    /// When ping cannot be started.
    #[must_use]
    pub fn start(lab: &Lab, count: u32, interval: f64) -> Self {
        Self::start_marked(lab, count, interval, None)
    }

    /// As [`start`](Self::start), the requests' TOS byte set to `tos` (`0xb8`: DSCP EF).
    ///
    /// # Panics
    /// When ping cannot be started.
    #[must_use]
    pub fn start_marked(lab: &Lab, count: u32, interval: f64, tos: Option<u8>) -> Self {
        let mut cmd = lab.cmd(N1, "ping");
        if let Some(tos) = tos {
            cmd.args(["-Q", &format!("{tos:#x}")]);
        }
        let child = cmd
            .args(["-n", "-c", &count.to_string(), "-i", &interval.to_string()])
            .args(["-W", "5", "10.201.2.2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("ping");
        Self {
            child: Some(child),
            count,
        }
    }

    /// Waits for the last reply (or its timeout) and returns the RTTs.
    ///
    /// # Panics
    /// When ping's output cannot be read.
    #[must_use]
    pub fn finish(mut self) -> Rtts {
        let child = self.child.take().expect("finished once");
        let out = child.wait_with_output().expect("ping output");
        Rtts::from_ping_output(&String::from_utf8_lossy(&out.stdout), self.count)
    }
}

impl Drop for Pinger {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Counters of the leaf qdisc under class 1:10 on r2, as `tc -s -j qdisc show` prints them
/// (htb-cli prints the same keys).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LeafCounters {
    /// Packets the leaf sent.
    pub packets: u64,
    /// Packets it dropped (CoDel, overflow).
    pub drops: u64,
    /// Packets fq_codel CE-marked instead of dropping (0 for other kinds).
    pub ecn_mark: u64,
}

impl LeafCounters {
    /// The counters of the leaf under `parent` in a qdisc list, if there is one.
    #[must_use]
    pub fn from_qdisc_list(list: &Value, parent: &str) -> Option<Self> {
        let leaf = list
            .as_array()?
            .iter()
            .find(|q| q["parent"].as_str() == Some(parent))?;
        let count = |key: &str| leaf[key].as_u64().unwrap_or(0);
        // cake counts its marks per tin.
        let tin_marks: u64 = leaf["tins"]
            .as_array()
            .map_or(0, |t| t.iter().filter_map(|t| t["ecn_mark"].as_u64()).sum());
        Some(Self {
            packets: count("packets"),
            drops: count("drops"),
            ecn_mark: count("ecn_mark") + tin_marks,
        })
    }

    /// Reads the leaf of class 1:10 on r2 from whoever shapes there.
    ///
    /// # Panics
    /// When htb-cli or tc fails.
    #[must_use]
    pub fn read(lab: &Lab, installed: &Installed) -> Option<Self> {
        let text = match installed {
            Installed::Htbd(htbd) => {
                htbd.cli_ok(&["-s", "-j", "qdisc", "show", "dev", "r2", "invisible"])
            }
            Installed::Tc => {
                let out = lab.exec(R, &["tc", "-s", "-j", "qdisc", "show", "dev", "r2"]);
                String::from_utf8_lossy(&out.stdout).into_owned()
            }
            Installed::Nothing => return None,
        };
        let list: Value = serde_json::from_str(&text).ok()?;
        Self::from_qdisc_list(&list, "1:10")
    }

    /// What happened between `self` and `later`.
    #[must_use]
    pub fn since(self, later: Self) -> Self {
        Self {
            packets: later.packets.saturating_sub(self.packets),
            drops: later.drops.saturating_sub(self.drops),
            ecn_mark: later.ecn_mark.saturating_sub(self.ecn_mark),
        }
    }
}

/// One measurement: pings through a class saturated by four TCP flows.
#[derive(Clone, Debug, Default)]
pub struct Saturated {
    /// The pings' RTTs.
    pub rtts: Rtts,
    /// L2 bytes node-2 received while the pings ran (the class's delivery).
    pub delivered: crate::owed::Counted,
    /// TCP retransmissions of the whole iperf3 run.
    pub retransmits: u64,
    /// The leaf's counters over the ping window (none when nothing shapes).
    pub leaf: Option<LeafCounters>,
    /// node-1's ports of the TCP flows (iperf3's data streams), to find their leaf queues.
    pub tcp_ports: Vec<u16>,
}

impl Saturated {
    /// The measurement as JSON.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let mut v = self.rtts.summary();
        v["delivered_bps"] = json!(self.delivered.bps());
        v["tcp_retransmits"] = json!(self.retransmits);
        if let Some(leaf) = self.leaf {
            v["leaf_packets"] = json!(leaf.packets);
            v["leaf_drops"] = json!(leaf.drops);
            v["leaf_ecn_marks"] = json!(leaf.ecn_mark);
        }
        v
    }
}

/// Four TCP flows node-1 → node-2 (`iperf3 -P 4` to `port`) through whatever `installed` is;
/// after `warmup` (slow start, the queue building up), `pings` pings at 10 Hz, while node-2's
/// L2 receive rate and the leaf's counters are measured over the same window.
///
/// # Panics
/// When iperf3 or ping cannot be run.
#[must_use]
pub fn ping_through_tcp_load(
    lab: &Lab,
    installed: &Installed,
    port: u16,
    warmup: Duration,
    pings: u32,
) -> Saturated {
    ping_marked_through_tcp_load(lab, installed, port, warmup, pings, None)
}

/// As [`ping_through_tcp_load`], the pings' TOS byte set to `tos`.
///
/// # Panics
/// When iperf3 or ping cannot be run.
#[must_use]
pub fn ping_marked_through_tcp_load(
    lab: &Lab,
    installed: &Installed,
    port: u16,
    warmup: Duration,
    pings: u32,
    tos: Option<u8>,
) -> Saturated {
    let _server = lab.iperf_server(N2, port);
    let secs = warmup.as_secs() + u64::from(pings) / 10 + 3;
    let client = lab
        .cmd(N1, "iperf3")
        .args(["-c", "10.201.2.2", "-p", &port.to_string(), "-P", "4"])
        .args(["-t", &secs.to_string(), "-J"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -c");
    std::thread::sleep(warmup);
    let leaf0 = LeafCounters::read(lab, installed);
    crate::accounted::window_edge();
    let (a0, rx0, b0) = (
        Instant::now(),
        lab.rx_counters(N2, "eth0").0,
        Instant::now(),
    );
    let rtts = Pinger::start_marked(lab, pings, 0.1, tos).finish();
    let (a1, rx1, b1) = (
        Instant::now(),
        lab.rx_counters(N2, "eth0").0,
        Instant::now(),
    );
    crate::accounted::window_edge();
    let leaf1 = LeafCounters::read(lab, installed);
    let out = client.wait_with_output().expect("iperf3 -c");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    Saturated {
        rtts,
        delivered: crate::owed::Counted {
            bytes: (rx1 - rx0) as f64,
            shortest: (a1 - b0).as_secs_f64(),
            longest: (b1 - a0).as_secs_f64(),
        },
        retransmits: report["end"]["sum_sent"]["retransmits"]
            .as_u64()
            .unwrap_or(0),
        leaf: leaf0.zip(leaf1).map(|(a, b)| a.since(b)),
        tcp_ports: report["start"]["connected"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| u16::try_from(c["local_port"].as_u64()?).ok())
            .collect(),
    }
}

/// Sets `net.ipv4.tcp_ecn` in both endpoints: 1 requests ECN, 2 (Linux's default) only
/// accepts it.
pub fn set_tcp_ecn(lab: &Lab, on: bool) {
    let value = format!("net.ipv4.tcp_ecn={}", if on { 1 } else { 2 });
    for ns in [N1, N2] {
        let _ = lab.exec(ns, &["sysctl", "-qw", &value]);
    }
}

/// One line of the benchmark: who shaped, with which leaf, at which rate.
struct Case {
    key: String,
    label: String,
    shaper: Shaper,
    leaf: Option<&'static str>,
    rate: &'static str,
    rate_bps: f64,
    ecn: bool,
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (rate, rate_bps) in [("10mbit", 10e6), ("180kbit", 180e3)] {
        for (shaper, leaf, name) in [
            (Shaper::Htbd, None, "htbd fq_codel (default)"),
            (Shaper::Htbd, Some("cake"), "htbd cake"),
            (Shaper::Htbd, Some("pfifo"), "htbd pfifo"),
            (Shaper::KernelHtb, Some("pfifo"), "kernel HTB pfifo"),
        ] {
            cases.push(Case {
                key: format!("{rate}_{}_{}", shaper.name(), leaf.unwrap_or("default")),
                label: format!("{name}, {rate}"),
                shaper,
                leaf,
                rate,
                rate_bps,
                ecn: false,
            });
        }
    }
    cases.push(Case {
        key: "10mbit_htbd_default_ecn".into(),
        label: "htbd fq_codel (default), 10mbit, ECN on".into(),
        shaper: Shaper::Htbd,
        leaf: None,
        rate: "10mbit",
        rate_bps: 10e6,
        ecn: true,
    });
    cases
}

/// Runs every case in `lab`; prints a table and returns the JSON and an SVG of the RTT
/// distributions.
///
/// # Errors
/// When a shaper cannot be installed.
pub fn bench(lab: &Lab, quick: bool) -> anyhow::Result<(Value, String)> {
    let pings = if quick { 100 } else { 200 };
    println!(
        "== ping RTT through one class saturated by 4 TCP flows (iperf3 -P 4), {pings} pings at 10 Hz"
    );
    let idle = Pinger::start(lab, 20, 0.1).finish();
    println!(
        "  idle (kernel forwarding)              p50 {:>8.2} ms",
        idle.quantile(0.5)
    );
    println!(
        "  {:<39} {:>8} {:>8} {:>8} {:>8} {:>6} {:>11} {:>7} {:>6}",
        "", "p50 ms", "p95 ms", "p99 ms", "max ms", "loss", "Mbit/s L2", "drops", "CE"
    );
    let mut results = serde_json::Map::new();
    let mut series = Vec::new();
    for case in cases() {
        set_tcp_ecn(lab, case.ecn);
        let installed = install(lab, case.shaper, &one_class_tree(case.rate, case.leaf))?;
        let warmup = Duration::from_secs(if case.rate_bps < 1e6 { 6 } else { 4 });
        let run = ping_through_tcp_load(lab, &installed, 5201, warmup, pings);
        uninstall(lab, installed);
        set_tcp_ecn(lab, false);
        let leaf = run.leaf.unwrap_or_default();
        println!(
            "  {:<39} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>5.1}% {:>11.3} {:>7} {:>6}",
            case.label,
            run.rtts.quantile(0.5),
            run.rtts.quantile(0.95),
            run.rtts.quantile(0.99),
            run.rtts.quantile(1.0),
            run.rtts.loss_pct(),
            run.delivered.bps() / 1e6,
            leaf.drops,
            leaf.ecn_mark
        );
        let mut value = run.to_json();
        value["rate_bps"] = json!(case.rate_bps);
        value["delivered_error_pct"] =
            json!((run.delivered.bps() - case.rate_bps) / case.rate_bps * 100.0);
        results.insert(case.key.clone(), value);
        if !case.ecn {
            series.push(Series {
                name: case.label,
                points: run.rtts.cdf(),
                dashed: case.rate_bps < 1e6,
            });
        }
    }
    let result = json!({
        "method": "ping -i 0.1 node-1 -> node-2 through class 1:10 of r2 while iperf3 -P 4 keeps it full; RTT includes the unshaped return path",
        "idle": idle.summary(),
        "runs": results,
    });
    let chart = LineChart {
        title: "Ping RTT through a class saturated by 4 TCP flows (CDF)".into(),
        x_label: "RTT (ms, log scale)".into(),
        y_label: "fraction of pings".into(),
        x_log: true,
        series,
    }
    .to_svg();
    Ok((result, chart))
}

/// `htb-lab latency`: [`bench()`] in a lab of its own, writing `latency.json` and
/// `latency.svg` into `out`.
///
/// # Errors
/// When the lab cannot run here or the results cannot be written.
pub fn run(out: &std::path::Path, quick: bool, lab: &str) -> anyhow::Result<()> {
    let lab = Lab::try_up(lab, "router")
        .map_err(|why| anyhow::anyhow!("the lab cannot run here: {why}"))?;
    let (result, svg) = bench(&lab, quick)?;
    drop(lab);
    std::fs::create_dir_all(out)?;
    std::fs::write(
        out.join("latency.json"),
        serde_json::to_string_pretty(&result)?,
    )?;
    std::fs::write(out.join("latency.svg"), svg)?;
    println!("wrote {0}/latency.json and {0}/latency.svg", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_counters_from_a_qdisc_list() {
        let list = json!([
            {"kind": "htb", "handle": "1:", "root": true, "packets": 9, "drops": 9},
            {"kind": "fq_codel", "handle": "0:", "parent": "1:10", "packets": 100, "drops": 3,
             "ecn_mark": 7},
        ]);
        let c = LeafCounters::from_qdisc_list(&list, "1:10").unwrap();
        assert_eq!((c.packets, c.drops, c.ecn_mark), (100, 3, 7));
        assert_eq!(LeafCounters::from_qdisc_list(&list, "1:20"), None);
        let later = LeafCounters {
            packets: 150,
            drops: 3,
            ecn_mark: 10,
        };
        assert_eq!(
            c.since(later),
            LeafCounters {
                packets: 50,
                drops: 0,
                ecn_mark: 3
            }
        );
    }
}
