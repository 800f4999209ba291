//! The event loop: flows enqueue, the link (if any) pulls packets, time jumps to the next
//! event — an arrival, a change, the link becoming free, or the scheduler's `next_wakeup`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use htb_core::{ClassId, Instant, Packet, Scheduler, TcpAck};

use super::histogram::Histogram;
use super::report::{ClassReport, DirectReport, FlowReport, Report, Sample};
use super::scenario::{FlowRate, Scenario};

/// A simulated packet: its flow, length and arrival time, its ECN bits, and what `cake` reads
/// (hosts, DSCP, the ACK of a TCP flow of ACKs).
#[derive(Clone, Copy, Debug)]
struct SimPacket {
    flow: u32,
    len: u32,
    born: u64,
    ect: bool,
    ce: bool,
    hosts: (u32, u32),
    dscp: u8,
    tcp: Option<TcpAck>,
}

/// A pure ACK (IPv4, TCP, no options) of flow `flow`'s connection acknowledging up to `ack`.
fn pure_ack(flow: u32, ack: u32) -> Option<TcpAck> {
    let mut seg = [0u8; 40];
    seg[0] = 0x45;
    seg[3] = 40;
    seg[8] = 64;
    seg[9] = 6;
    seg[12..16].copy_from_slice(&[10, 0, 0, 1]);
    seg[16..20].copy_from_slice(&[10, 1, 0, 1]);
    seg[20..22].copy_from_slice(&(1024 + flow as u16).to_be_bytes());
    seg[22..24].copy_from_slice(&443u16.to_be_bytes());
    seg[28..32].copy_from_slice(&ack.to_be_bytes());
    seg[32] = 5 << 4;
    seg[33] = 0x10; // ACK
    TcpAck::parse(&seg)
}

impl Packet for SimPacket {
    fn len_bytes(&self) -> u32 {
        self.len
    }

    /// Flows spread over the hash space (Fibonacci hashing), so each scenario flow is its own
    /// flow to `sfq` and `fq_codel`, as distinct 5-tuples would be.
    fn flow_hash(&self) -> u32 {
        self.flow.wrapping_add(1).wrapping_mul(0x9e37_79b9)
    }

    fn set_ce(&mut self) -> bool {
        if self.ect {
            self.ce = true;
        }
        self.ect
    }

    fn host_hashes(&self) -> (u32, u32) {
        self.hosts
    }

    fn dscp(&self) -> u8 {
        self.dscp
    }

    fn wash_dscp(&mut self) {
        self.dscp = 0;
    }

    fn tcp_ack(&self) -> Option<&TcpAck> {
        self.tcp.as_ref()
    }
}

/// A pure ACK acknowledges this many bytes more than the one before (two full segments, as a
/// delayed ACK does).
const ACKED_PER_ACK: u32 = 2 * 1448;

/// Packets a `rate = "max"` flow keeps queued: enough that its class never runs dry.
const MAX_FLOW_DEPTH: u32 = 16;
/// Points of the rate-over-time chart.
const SAMPLES: u64 = 250;

#[derive(Default)]
struct FlowState {
    next_size: usize,
    /// Bytes generated so far (constant-rate flows: spaces arrivals exactly).
    generated: u128,
    /// Packets of a "max" flow currently queued.
    queued: u32,
    offered_window: u64,
    delivered_window: u64,
    dropped: u64,
    /// Packets delivered with Congestion Experienced set.
    ce_marks: u64,
    /// The next pure ACK's acknowledgement number (flows of TCP ACKs).
    acked: u32,
    delays: Histogram,
}

/// The egress link: serialization at `rate`, tracked exactly (no per-packet rounding drift).
struct Link {
    rate: u128,
    busy_since: u64,
    bytes_since: u128,
    free_at: u64,
}

impl Link {
    fn transmit(&mut self, now: u64, len: u32) {
        if now >= self.free_at {
            self.busy_since = now;
            self.bytes_since = 0;
        }
        self.bytes_since += u128::from(len);
        let busy = (self.bytes_since * 8_000_000_000).div_ceil(self.rate);
        self.free_at = self.busy_since + u64::try_from(busy).unwrap_or(u64::MAX);
    }
}

struct Sim<'a> {
    scenario: &'a Scenario,
    htb: Scheduler<SimPacket>,
    flows: Vec<FlowState>,
    in_window: bool,
}

impl Sim<'_> {
    /// Generates the next packet of flow `f` at `now`; returns whether it was queued.
    fn generate(&mut self, f: usize, now: u64) -> bool {
        let flow = &self.scenario.flows[f];
        let state = &mut self.flows[f];
        let len = flow.sizes[state.next_size % flow.sizes.len()];
        state.next_size += 1;
        state.generated += u128::from(len);
        if self.in_window {
            state.offered_window += u64::from(len);
        }
        let acked = state.acked;
        state.acked = state.acked.wrapping_add(ACKED_PER_ACK);
        let packet = SimPacket {
            flow: f as u32,
            len,
            born: now,
            ect: flow.ecn,
            ce: false,
            hosts: flow.hosts,
            dscp: flow.dscp,
            tcp: flow.tcp_acks.then(|| pure_ack(f as u32, acked)).flatten(),
        };
        let queued = match self
            .htb
            .enqueue(Instant::from_nanos(now), flow.target, packet)
        {
            Ok(()) => true,
            Err(_) => {
                self.flows[f].dropped += 1;
                false
            }
        };
        self.count_leaf_drops();
        queued
    }

    /// Packets the leaves dropped (CoDel, a full flow, a batch from the fattest flow) count
    /// against their flows; a "max" flow makes up for them.
    fn count_leaf_drops(&mut self) {
        for p in self.htb.drain_dropped() {
            let f = p.flow as usize;
            self.flows[f].dropped += 1;
            if self.scenario.flows[f].rate == FlowRate::Max {
                self.flows[f].queued -= 1;
            }
        }
    }

    /// Refills a "max" flow to its depth.
    fn top_up(&mut self, f: usize, now: u64) {
        if now >= self.scenario.flows[f].stop.as_nanos() {
            return;
        }
        while self.flows[f].queued < MAX_FLOW_DEPTH {
            if !self.generate(f, now) {
                break;
            }
            self.flows[f].queued += 1;
        }
    }

    fn class_bytes(&self, ids: &[ClassId]) -> Vec<u64> {
        ids.iter()
            .map(|&id| self.htb.class_stats(id).map_or(0, |s| s.queue.bytes))
            .collect()
    }
}

/// Runs a scenario to completion.
#[must_use]
pub fn run(scenario: &Scenario) -> Report {
    let htb = scenario
        .tree
        .build::<SimPacket>(Instant::ZERO)
        .expect("the tree was validated");
    let ids: Vec<ClassId> = scenario.tree.classes.iter().map(|c| c.id).collect();
    let inner = ids
        .iter()
        .map(|&id| htb.class_info(id).is_some_and(|i| i.level > 0))
        .collect();
    let mut warnings = scenario.tree.warnings.clone();
    let mut sim = Sim {
        scenario,
        htb,
        flows: scenario
            .flows
            .iter()
            .map(|_| FlowState::default())
            .collect(),
        in_window: scenario.warmup.as_nanos() == 0,
    };
    let end = scenario.duration.as_nanos();
    let warmup = scenario.warmup.as_nanos();
    let mut link = scenario.link.map(|r| Link {
        rate: u128::from(r.bits_per_sec()),
        busy_since: 0,
        bytes_since: 0,
        free_at: 0,
    });

    let mut arrivals: BinaryHeap<Reverse<(u64, usize)>> = scenario
        .flows
        .iter()
        .enumerate()
        .map(|(i, f)| Reverse((f.start.as_nanos(), i)))
        .collect();
    let mut next_change = 0;
    let sample_every = (end / SAMPLES).max(1);
    let mut next_sample = 0;
    let mut samples = Vec::new();
    let mut warm_bytes = if sim.in_window {
        Some(vec![0; ids.len()])
    } else {
        None
    };
    let mut idle_loops = 0u32;
    let mut t = 0u64;

    loop {
        while let Some(change) = scenario
            .changes
            .get(next_change)
            .filter(|c| c.at.as_nanos() <= t)
        {
            match sim
                .htb
                .change_class(Instant::from_nanos(t), change.id, &change.spec)
            {
                Ok(done) => warnings.extend(
                    done.warnings
                        .iter()
                        .map(|w| format!("at {}: {w}", change.at)),
                ),
                Err(e) => warnings.push(format!("at {}: {e}", change.at)),
            }
            if let Some(leaf) = &change.leaf {
                match sim
                    .htb
                    .set_leaf(Instant::from_nanos(t), change.id, Some(leaf))
                {
                    Ok(done) => {
                        for p in done.purged {
                            let f = p.flow as usize;
                            sim.flows[f].dropped += 1;
                            if scenario.flows[f].rate == FlowRate::Max {
                                sim.flows[f].queued -= 1;
                            }
                        }
                    }
                    Err(e) => warnings.push(format!("at {}: {e}", change.at)),
                }
            }
            next_change += 1;
        }
        if warm_bytes.is_none() && t >= warmup {
            warm_bytes = Some(sim.class_bytes(&ids));
            sim.in_window = true;
        }
        while next_sample <= t && next_sample <= end {
            samples.push(Sample {
                at_ns: next_sample,
                bytes: sim.class_bytes(&ids),
            });
            next_sample += sample_every;
        }
        if t >= end {
            break;
        }

        while let Some(&Reverse((at, f))) = arrivals.peek() {
            if at > t {
                break;
            }
            arrivals.pop();
            let flow = &scenario.flows[f];
            match flow.rate {
                FlowRate::Max => sim.top_up(f, t),
                FlowRate::Constant(rate) => {
                    sim.generate(f, t);
                    // Packet k leaves at start + (bytes before k) / rate, exactly.
                    let offset = (sim.flows[f].generated * 8_000_000_000)
                        .div_ceil(u128::from(rate.bits_per_sec()));
                    let next = flow
                        .start
                        .as_nanos()
                        .saturating_add(u64::try_from(offset).unwrap_or(u64::MAX));
                    if next < flow.stop.as_nanos() {
                        arrivals.push(Reverse((next, f)));
                    }
                }
            }
        }

        while link.as_ref().is_none_or(|l| l.free_at <= t) {
            let sent = sim.htb.dequeue(Instant::from_nanos(t));
            sim.count_leaf_drops();
            let Some(packet) = sent else {
                break;
            };
            if let Some(l) = link.as_mut() {
                l.transmit(t, packet.len);
            }
            let f = packet.flow as usize;
            if sim.in_window {
                sim.flows[f].delivered_window += u64::from(packet.len);
                sim.flows[f].delays.record(t - packet.born);
                sim.flows[f].ce_marks += u64::from(packet.ce);
            }
            if scenario.flows[f].rate == FlowRate::Max {
                sim.flows[f].queued -= 1;
                sim.top_up(f, t);
            }
        }

        let mut next = end;
        if let Some(&Reverse((at, _))) = arrivals.peek() {
            next = next.min(at);
        }
        if let Some(change) = scenario.changes.get(next_change) {
            next = next.min(change.at.as_nanos());
        }
        next = next.min(next_sample);
        if warm_bytes.is_none() {
            next = next.min(warmup);
        }
        if !sim.htb.is_empty() {
            match link.as_ref() {
                Some(l) if l.free_at > t => next = next.min(l.free_at),
                _ => {
                    if let Some(wake) = sim.htb.next_wakeup() {
                        next = next.min(wake.as_nanos().max(t));
                    }
                }
            }
        }
        // A wake-up "now" that releases nothing (the event budget ran out) is retried at the
        // same instant; never loop forever on one.
        if next <= t {
            idle_loops += 1;
            if idle_loops > 10_000 {
                next = t + 1;
            }
        } else {
            idle_loops = 0;
        }
        t = next;
    }

    let warm = warm_bytes.unwrap_or_else(|| vec![0; ids.len()]);
    let window = (end - warmup).max(1) as f64;
    let per_sec = |bytes: u64| bytes as f64 * 8.0 * 1e9 / window;
    let classes = ids
        .iter()
        .zip(&warm)
        .map(|(&id, &warm)| {
            let s = sim
                .htb
                .class_stats(id)
                .expect("classes are never deleted by a scenario");
            ClassReport {
                id,
                sent_bytes: s.queue.bytes,
                sent_packets: s.queue.packets,
                dropped: s.queue.drops,
                rate_bps: per_sec(s.queue.bytes - warm),
                lended: s.lends,
                borrowed: s.borrows,
                overlimits: s.queue.overlimits,
            }
        })
        .collect();
    let flows = sim
        .flows
        .iter()
        .enumerate()
        .map(|(index, f)| FlowReport {
            index,
            offered_bps: per_sec(f.offered_window),
            delivered_bps: per_sec(f.delivered_window),
            dropped: f.dropped,
            delay_p50_ns: f.delays.quantile(0.50),
            delay_p99_ns: f.delays.quantile(0.99),
            delay_max_ns: f.delays.max(),
            ce_marks: f.ce_marks,
        })
        .collect();
    let stats = sim.htb.stats();
    Report {
        duration_ns: end,
        classes,
        flows,
        direct: DirectReport {
            sent_bytes: stats.direct_bytes_sent,
            sent_packets: stats.direct_packets_sent,
            dropped: stats.direct_drops,
        },
        warnings,
        samples,
        inner,
        flow_labels: scenario.flows.iter().map(|f| f.label.clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_text(text: &str) -> Report {
        run(&Scenario::parse(text).unwrap())
    }

    #[test]
    fn constant_rate_flow_under_its_class_rate_is_delivered_fully() {
        let r = run_text(
            "duration = \"2s\"\n[[class]]\nid = \"1:1\"\nrate = \"10mbit\"\n\
             [[flow]]\nclass = \"1:1\"\npacket = 1000\nrate = \"4mbit\"\n",
        );
        assert_eq!(r.flows[0].dropped, 0);
        assert!(
            (r.flows[0].delivered_bps - 4e6).abs() / 4e6 < 0.001,
            "{r:?}"
        );
        assert!((r.flows[0].offered_bps - 4e6).abs() / 4e6 < 0.001);
        assert!(r.flows[0].delay_p99_ns < 1000, "unthrottled: no queueing");
    }

    #[test]
    fn link_serializes_and_shaping_limits() {
        let r = run_text(
            "duration = \"3s\"\nwarmup = \"1s\"\nlink = \"100mbit\"\n[[class]]\nid = \"1:1\"\nrate = \"40mbit\"\n\
             [[flow]]\nclass = \"1:1\"\npacket = 1500\nrate = \"max\"\n",
        );
        assert!(
            (r.classes[0].rate_bps - 40e6).abs() / 40e6 < 0.002,
            "{}",
            r.classes[0].rate_bps
        );
        // The queue is 16 packets deep: ~16 × 300 µs of delay at 40 Mbit/s.
        assert!(
            (4_000_000..6_000_000).contains(&r.flows[0].delay_p50_ns),
            "{}",
            r.flows[0].delay_p50_ns
        );
        let json = r.to_json();
        assert!(json.starts_with(
            "{\"duration_ns\":3000000000,\"classes\":[{\"id\":\"1:1\",\"sent_bytes\":"
        ));
        assert!(!json.contains('\n'));
        assert_eq!(r.samples.len() as u64, SAMPLES + 1);
    }

    #[test]
    fn unclassified_without_default_goes_direct() {
        let r = run_text(
            "duration = \"1s\"\n[[class]]\nid = \"1:1\"\nrate = \"1mbit\"\n\
             [[flow]]\nclass = \"unclassified\"\npacket = 100\nrate = \"8mbit\"\n",
        );
        assert_eq!(r.classes[0].sent_packets, 0);
        assert_eq!(r.direct.sent_packets, 10_000);
        assert!((r.flows[0].delivered_bps - 8e6).abs() < 1e3);
    }
}
