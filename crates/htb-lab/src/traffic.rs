//! Traffic through the lab: concurrent UDP flows from node-1 to node-2 (or back, a download
//! arriving on r2), measured by the iperf3 receivers every half second — the same way for htbd
//! and for the kernel's HTB.

use std::process::Stdio;
use std::time::Duration;

use crate::{Lab, N1, N2};

/// UDP payload per datagram; with UDP, IPv4 and Ethernet headers a frame is 42 bytes more.
pub const DATAGRAM: u32 = 1400;

/// The L2 length of the lab's UDP frames (payload, UDP, IPv4 and Ethernet headers).
pub const FRAME: u32 = DATAGRAM + 42;

/// A shell script of the repository's `tests/scripts/` (real operators' scripts the lab runs).
#[must_use]
pub fn script(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/scripts")
        .join(name)
}

/// L2 bytes of `payload` bytes of full datagrams.
fn l2(payload: f64) -> f64 {
    payload * f64::from(FRAME) / f64::from(DATAGRAM)
}

/// One flow to run.
#[derive(Clone, Debug)]
pub struct FlowSpec {
    /// Destination port at node-2 (picks the class).
    pub port: u16,
    /// Offered rate in bit/s (iperf3 payload rate).
    pub offered_bps: f64,
}

/// What the receiver saw.
#[derive(Clone, Debug, Default)]
pub struct FlowResult {
    /// `(interval end in s, L2 bit/s)` every 0.5 s.
    pub series: Vec<(f64, f64)>,
    /// L2 bytes over the measurement window, on the receiver's clock.
    pub counted: crate::owed::Counted,
}

impl FlowResult {
    /// The mean L2 rate over the measurement window.
    #[must_use]
    pub fn mean_bps(&self) -> f64 {
        self.counted.bps()
    }
}

/// Runs `flows` at once for `secs` seconds; the mean excludes the first `warmup` seconds and
/// the last half second.
///
/// # Panics
/// When iperf3 cannot be started or its report is unreadable.
#[must_use]
pub fn udp_flows(lab: &Lab, flows: &[FlowSpec], secs: u32, warmup: f64) -> Vec<FlowResult> {
    flows_between(lab, (N1, N2, "10.201.2.2"), flows, secs, warmup)
}

/// As [`udp_flows`], from node-2 to node-1 (`port` is node-1's): a download, which reaches
/// the router on r2 and leaves through r1.
///
/// # Panics
/// As [`udp_flows`].
#[must_use]
pub fn udp_flows_down(lab: &Lab, flows: &[FlowSpec], secs: u32, warmup: f64) -> Vec<FlowResult> {
    flows_between(lab, (N2, N1, "10.201.1.2"), flows, secs, warmup)
}

/// `flows` from namespace `sender` to `receiver` at `address`.
fn flows_between(
    lab: &Lab,
    (sender, receiver, address): (&str, &str, &str),
    flows: &[FlowSpec],
    secs: u32,
    warmup: f64,
) -> Vec<FlowResult> {
    let servers: Vec<_> = flows
        .iter()
        .map(|f| {
            lab.cmd(receiver, "iperf3")
                .args(["-s", "-1", "-J", "-i", "0.5", "-p", &f.port.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("iperf3 -s")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    let clients: Vec<_> = flows
        .iter()
        .map(|f| {
            lab.cmd(sender, "iperf3")
                .args([
                    "-c",
                    address,
                    "-u",
                    "-l",
                    &DATAGRAM.to_string(),
                    "-t",
                    &secs.to_string(),
                ])
                .args([
                    "-p",
                    &f.port.to_string(),
                    "-b",
                    &format!("{:.0}", f.offered_bps),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("iperf3 -c")
        })
        .collect();
    // The stalls that count are those of the receivers' window (after the warm-up, until
    // half a second before the end): its edges, on the clients' clock.
    let started = std::time::Instant::now();
    let at = |secs: f64| {
        let wait = Duration::from_secs_f64(secs).saturating_sub(started.elapsed());
        std::thread::sleep(wait);
    };
    at(warmup);
    crate::accounted::window_edge();
    at(f64::from(secs) - 0.5);
    crate::accounted::window_edge();
    for mut c in clients {
        let _ = c.wait();
    }
    servers
        .into_iter()
        .map(|server| {
            let out = server.wait_with_output().expect("iperf3 -s output");
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let mut result = FlowResult::default();
            let (mut bytes, mut time) = (0.0, 0.0);
            for interval in report["intervals"].as_array().into_iter().flatten() {
                let sum = &interval["sum"];
                let (start, end) = (
                    sum["start"].as_f64().unwrap_or(0.0),
                    sum["end"].as_f64().unwrap_or(0.0),
                );
                let b = sum["bytes"].as_f64().unwrap_or(0.0);
                // The last interval includes the queues draining after the senders stop.
                if end > start && end <= f64::from(secs) - 0.5 {
                    result.series.push((end, l2(b) * 8.0 / (end - start)));
                }
                if start >= warmup && end <= f64::from(secs) - 0.5 {
                    bytes += b;
                    time += end - start;
                }
            }
            result.counted = crate::owed::Counted::exact(l2(bytes), time);
            result
        })
        .collect()
}
