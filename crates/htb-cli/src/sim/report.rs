//! The simulation report: the JSON contract, a readable table and the SVG chart.

use std::fmt::Write;

use htb_core::ClassId;
use serde::Serialize;

use crate::plot::{LineChart, Series};

/// Per-class results. `rate_bps` covers [warmup, duration]; counters cover the whole run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClassReport {
    /// Class id, `"1:10"` in the JSON.
    pub id: ClassId,
    /// Bytes sent (inner classes: by their subtree).
    pub sent_bytes: u64,
    /// Packets sent.
    pub sent_packets: u64,
    /// Packets dropped (queue full).
    pub dropped: u64,
    /// Bits sent during [warmup, duration] divided by that window.
    pub rate_bps: f64,
    /// `lended` (packets sent on own rate, or lent to the subtree).
    pub lended: u64,
    /// `borrowed`.
    pub borrowed: u64,
    /// Transitions into "can't send" (ceil exhausted).
    pub overlimits: u64,
}

/// Per-flow results over [warmup, duration] (drops over the whole run).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FlowReport {
    /// Position in the scenario's `[[flow]]` list.
    pub index: usize,
    /// Offered load.
    pub offered_bps: f64,
    /// Delivered (dequeued) load.
    pub delivered_bps: f64,
    /// Packets dropped (refused, or dropped by the leaf: CoDel, a full flow, over limit).
    pub dropped: u64,
    /// Median sojourn time, enqueue to dequeue.
    pub delay_p50_ns: u64,
    /// 99th percentile of that time.
    pub delay_p99_ns: u64,
    /// Longest sojourn.
    pub delay_max_ns: u64,
    /// Packets delivered with Congestion Experienced (ECN-capable flows only).
    pub ce_marks: u64,
}

/// The direct queue (unclassified traffic without a default class).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct DirectReport {
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Packets sent.
    pub sent_packets: u64,
    /// Packets dropped (direct queue full).
    pub dropped: u64,
}

/// Per-class cumulative bytes at one instant, for the rate-over-time chart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Time, ns.
    pub at_ns: u64,
    /// Bytes sent so far, per class in report order.
    pub bytes: Vec<u64>,
}

/// Everything a run produced. Serializes to exactly the JSON contract.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    /// Simulated time.
    pub duration_ns: u64,
    /// Classes in scenario order.
    pub classes: Vec<ClassReport>,
    /// Flows in scenario order.
    pub flows: Vec<FlowReport>,
    /// The direct queue.
    pub direct: DirectReport,
    /// Warnings about the tree and changes (quantum clamps, …).
    pub warnings: Vec<String>,
    /// Samples for the chart (not part of the JSON).
    #[serde(skip)]
    pub samples: Vec<Sample>,
    /// Whether each class is inner (drawn dashed).
    #[serde(skip)]
    pub inner: Vec<bool>,
    /// Flow labels (their target class), for the table.
    #[serde(skip)]
    pub flow_labels: Vec<String>,
}

fn mbit(bps: f64) -> String {
    format!("{:.3}", bps / 1e6)
}

fn time(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{:.1}us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.3}s", ns as f64 / 1e9),
    }
}

impl Report {
    /// The JSON contract, one line.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report always serializes")
    }

    /// A readable table.
    #[must_use]
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "simulated {}", time(self.duration_ns));
        let _ = writeln!(
            out,
            "{:<10} {:>14} {:>14} {:>10} {:>9} {:>10} {:>10} {:>10}",
            "class",
            "rate Mbit/s",
            "sent bytes",
            "packets",
            "dropped",
            "lended",
            "borrowed",
            "overlimits"
        );
        for c in &self.classes {
            let _ = writeln!(
                out,
                "{:<10} {:>14} {:>14} {:>10} {:>9} {:>10} {:>10} {:>10}",
                c.id.to_string(),
                mbit(c.rate_bps),
                c.sent_bytes,
                c.sent_packets,
                c.dropped,
                c.lended,
                c.borrowed,
                c.overlimits
            );
        }
        if !self.flows.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "{:<5} {:<13} {:>14} {:>14} {:>9} {:>9} {:>11} {:>11} {:>11}",
                "flow",
                "class",
                "offered Mbit/s",
                "deliv. Mbit/s",
                "dropped",
                "CE",
                "delay p50",
                "delay p99",
                "delay max"
            );
            for (f, label) in self.flows.iter().zip(&self.flow_labels) {
                let _ = writeln!(
                    out,
                    "{:<5} {:<13} {:>14} {:>14} {:>9} {:>9} {:>11} {:>11} {:>11}",
                    f.index,
                    label,
                    mbit(f.offered_bps),
                    mbit(f.delivered_bps),
                    f.dropped,
                    f.ce_marks,
                    time(f.delay_p50_ns),
                    time(f.delay_p99_ns),
                    time(f.delay_max_ns)
                );
            }
        }
        let d = &self.direct;
        if d.sent_packets > 0 || d.dropped > 0 {
            let _ = writeln!(
                out,
                "\ndirect queue: {} bytes, {} packets, {} dropped",
                d.sent_bytes, d.sent_packets, d.dropped
            );
        }
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        out
    }

    /// Per-class rate over time (inner classes dashed), each point averaged over the last
    /// 4 % of the run so that packet quantization does not hide the shape.
    #[must_use]
    pub fn to_svg(&self, title: &str) -> String {
        let span = (self.samples.len() / 25).max(1);
        let series = self
            .classes
            .iter()
            .enumerate()
            .map(|(i, class)| Series {
                name: class.id.to_string(),
                dashed: self.inner.get(i).copied().unwrap_or(false),
                points: self
                    .samples
                    .windows(span + 1)
                    .map(|w| {
                        let (first, last) = (&w[0], &w[span]);
                        let dt = (last.at_ns - first.at_ns).max(1) as f64;
                        let bits = (last.bytes[i] - first.bytes[i]) as f64 * 8.0;
                        (last.at_ns as f64 / 1e9, bits / dt * 1e3)
                    })
                    .collect(),
            })
            .collect();
        LineChart {
            title: title.to_owned(),
            x_label: "time (s)".into(),
            y_label: "rate (Mbit/s)".into(),
            x_log: false,
            series,
        }
        .to_svg()
    }
}
