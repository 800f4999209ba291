//! The data plane without its I/O: frames from the RX rings through each egress port's
//! classifier and HTB scheduler to its TX ring, over any [`Rings`], at the `now` it is given.
//!
//! [`Engine`](crate::Engine) runs it on AF_XDP sockets and a clock, and sleeps between passes;
//! the property tests run it on a simulated UMEM (`sim`) with random traffic, ring stalls and
//! control changes, and check that every frame comes back.

use std::collections::HashMap;
use std::sync::Arc;

use htb_classify::{Classifier, Verdict};
use htb_core::{Instant, Scheduler, SchedulerConfig};

use crate::crew::{Crew, Handoff};
use crate::frame::{FlowHasher, Frame, FrameNeeds};
use crate::parse::{parse, set_ce, wash_dscp};
use crate::plane_op::{IngressHook, Retired};
use crate::rings::{Chunk, Rings};
use crate::rtt::RttTracker;
use crate::stats::PortStats;

mod control;
mod inspect;
mod metering;
mod port;
mod target_cache;

use self::port::{Ingress, Port, Slot, Tree, resolve_redirects};
use self::target_cache::TargetCache;
#[cfg(test)]
mod ifb_tests;
#[cfg(test)]
mod memory_tests;
#[cfg(test)]
mod metering_tests;
#[cfg(test)]
mod mq_tests;
#[cfg(test)]
mod owners_tests;
#[cfg(test)]
mod rtt_tests;
#[cfg(test)]
mod sequences;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod split_tests;
#[cfg(test)]
mod stall_tests;
#[cfg(test)]
mod tests;

/// How frames find their egress port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// By the kernel's routes and neighbours (looked up in XDP).
    #[default]
    Router,
    /// Everything from a port goes out of its peer.
    Bridge,
}

/// What one pass did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress {
    /// Frames were received, queued, sent or completed.
    Moved,
    /// Nothing moved, but frames wait in a TX ring.
    TxStuck,
    /// Nothing to do until a frame arrives or a class may send.
    Idle,
}

/// One port as the data plane needs it.
pub(crate) struct PortSetup {
    /// Interface name.
    pub(crate) name: String,
    /// Its MAC address (router mode: the XDP program writes the egress port's MAC as source).
    pub(crate) mac: [u8; 6],
    /// Bridge mode: the index of the other side.
    pub(crate) peer: Option<usize>,
    /// The trees shaping what leaves through it, each with the `mq` class it hangs under
    /// (`None`: the root); none: unshaped.
    pub(crate) trees: Vec<(Scheduler<Frame>, Option<u16>)>,
    /// Its filters (one compiled copy, shared by the workers: classifying only reads).
    pub(crate) classifier: Arc<Classifier>,
    /// Measure the TCP round trips of what leaves through it.
    pub(crate) rtt: bool,
    /// An IFB device: no rings; frames reach it through other ports' ingress redirects and
    /// its trees release them to their egress ports.
    pub(crate) ifb: bool,
    /// Its ingress qdisc (`ffff:`), if it has one.
    pub(crate) ingress: Option<Arc<IngressHook>>,
}

/// What a port's ingress qdisc does with a frame.
enum IngressVerdict {
    /// Nothing: the frame goes to its egress port.
    Pass,
    /// Queue it in this IFB port's tree first.
    Redirect(usize),
    /// A policer dropped it.
    Drop,
}

/// A frame on its way out, as the round-trip tracker reads it.
struct Outgoing<'a> {
    bytes: &'a [u8],
    parsed: &'a crate::parse::Parsed,
    egress: usize,
    /// The filter that classified it (`None`: its tree's default class).
    classified: Option<usize>,
    slot: Slot,
}

/// Notes a frame for the round-trip tracker if it is a TCP segment, and counts what it gives:
/// a round trip of the class whose segment it answers, a retransmission of its own class.
/// Returns what it gave, for the flow's record.
fn observe_rtt(
    tracker: &mut RttTracker,
    ports: &mut [Port],
    f: &Outgoing<'_>,
    now: Instant,
) -> Option<crate::rtt::Observed> {
    let segment = tracker.segment(f.bytes, f.parsed)?;
    let port = &ports[f.egress];
    let class = if port.rtt_on {
        metering::class_of(port, f.classified, f.slot)
            .and_then(|c| Some((u16::try_from(f.egress).ok()?, c)))
    } else {
        None
    };
    let seen = tracker.observe(&segment, class, now);
    if let Some(((p, id), ns)) = seen.sample
        && let Some(port) = ports.get_mut(usize::from(p))
    {
        port.rtt.entry(id).or_default().add(ns);
    }
    if seen.retransmit
        && let Some((_, id)) = class
    {
        ports[f.egress].rtt.entry(id).or_default().retransmits += 1;
    }
    Some(seen)
}

/// Receive, classify, schedule, transmit: one pass per [`poll`](Self::poll).
pub(crate) struct Dataplane<R: Rings> {
    rings: R,
    ports: Vec<Port>,
    mode: Mode,
    /// Router mode: each port's MAC address, for the egress lookup by source MAC. A list, not a
    /// map: a router has a handful of ports, and comparing a few 6-byte keys costs less per
    /// frame than hashing one.
    by_mac: Vec<([u8; 6], usize)>,
    batch: usize,
    rx_batch: Vec<Chunk>,
    tx_batch: Vec<Chunk>,
    /// Below this many free frames, received frames are dropped (counted) so that the fill
    /// rings never starve: two batches per channel.
    low_water: u32,
    flows: FlowHasher,
    /// What a frame occupies (`skb->truesize` for `fq_codel`'s memory limit).
    frame_size: u32,
    loops: u64,
    /// This worker's links to the others.
    crew: Crew<R::Parcel>,
    /// The TCP flow table, when a port measures round trips.
    rtt: Option<RttTracker>,
    /// Flow records, when flows are metered.
    metering: Option<metering::Metering>,
}

/// Frames taken from other workers per pass, at most: the rest wait for the next pass, so that
/// a flood handed over does not keep this worker from sending.
const INBOUND_PER_PASS: usize = 256;

/// A control operation taking more CPU than this on the data plane is logged at debug level
/// (a job of them should stay under 1 ms).
const SLOW_OPERATION_NS: u64 = 200_000;

impl<R: Rings> std::fmt::Debug for Dataplane<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataplane")
            .field("mode", &self.mode)
            .field("ports", &self.port_names())
            .finish_non_exhaustive()
    }
}

impl<R: Rings> Dataplane<R> {
    /// A data plane moving `batch` frames at a time between `rings` and `ports`' schedulers.
    pub(crate) fn new(
        rings: R,
        mode: Mode,
        ports: Vec<PortSetup>,
        batch: usize,
        frame_size: u32,
        crew: Crew<R::Parcel>,
    ) -> Self {
        let by_mac = ports
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.ifb)
            .map(|(i, p)| (p.mac, i))
            .collect();
        let rtt = ports.iter().any(|p| p.rtt).then(RttTracker::new);
        let mut ports: Vec<Port> = ports
            .into_iter()
            .map(|p| {
                let mut port = Port {
                    stats: PortStats {
                        name: p.name.clone(),
                        ..PortStats::default()
                    },
                    name: p.name,
                    peer: p.peer,
                    ifb: p.ifb,
                    ingress: p.ingress.map(|hook| Ingress {
                        hook,
                        redirects: Vec::new(),
                    }),
                    trees: p
                        .trees
                        .into_iter()
                        .map(|(htb, mq_minor)| Tree { htb, mq_minor })
                        .collect(),
                    unshaped: Scheduler::new(SchedulerConfig::default()),
                    classifier: p.classifier,
                    targets: TargetCache::default(),
                    unclassified: None,
                    view: None,
                    next_tree: 0,
                    rtt_on: p.rtt,
                    rtt: HashMap::new(),
                    retired: Retired::default(),
                    needs: FrameNeeds::default(),
                };
                for tree in &port.trees {
                    port.needs.note_tree(&tree.htb);
                }
                port.reset_targets();
                port
            })
            .collect();
        resolve_redirects(&mut ports);
        let batch = batch.max(1);
        let low_water = u32::try_from(rings.channels() * batch * 2).unwrap_or(u32::MAX);
        Self {
            rings,
            ports,
            mode,
            by_mac,
            batch,
            rx_batch: Vec::with_capacity(batch),
            tx_batch: Vec::with_capacity(batch),
            low_water,
            flows: FlowHasher::default(),
            frame_size,
            loops: 0,
            crew,
            rtt,
            metering: None,
        }
    }

    /// Hashes flows with `flows`: the engine gives every worker one key, so that a flow's
    /// leaf queue does not depend on which worker received it.
    pub(crate) fn set_flow_hasher(&mut self, flows: FlowHasher) {
        self.flows = flows;
    }

    /// This worker's links to the others.
    pub(crate) fn crew(&self) -> &Crew<R::Parcel> {
        &self.crew
    }

    /// Router mode: `port`'s MAC address is now `mac` (the XDP program writes it as the source
    /// of frames routed out of `port`).
    pub(crate) fn set_mac(&mut self, port: usize, mac: [u8; 6]) {
        self.by_mac.retain(|&(_, p)| p != port);
        self.by_mac.push((mac, port));
    }

    /// The rings.
    pub(crate) fn rings(&self) -> &R {
        &self.rings
    }

    /// The rings, for a test to play the kernel's side.
    #[cfg(test)]
    pub(crate) fn rings_mut(&mut self) -> &mut R {
        &mut self.rings
    }

    /// One pass at `now`: receive a batch on every channel, classify and enqueue each frame
    /// into its egress port's scheduler, move what the schedulers release into the TX rings
    /// and kick them, take completed frames back, refill the fill rings.
    pub(crate) fn poll(&mut self, now: Instant) -> Progress {
        self.loops += 1;
        let mut work = false;
        for channel in 0..self.rings.channels() {
            let port = self.rings.channel_port(channel);
            let mut batch = std::mem::take(&mut self.rx_batch);
            let n = self.rings.receive(channel, &mut batch, self.batch);
            work |= n > 0;
            // Keep frames for the fill rings: when the pool runs low, drop here, counted,
            // rather than at the NIC.
            let pool_low = n > 0 && self.rings.counts().free < self.low_water;
            for chunk in batch.drain(..) {
                self.ingest(port, chunk, now, pool_low);
            }
            self.rx_batch = batch;
        }
        self.crew.ring_bells();
        work |= self.take_inbound(now) > 0;
        work |= self.rings.reap() > 0;
        // IFBs first: what their trees release this pass can leave through its egress port's
        // in the same pass.
        for port in 0..self.ports.len() {
            if self.ports[port].ifb {
                work |= self.release_ifb(port, now);
            }
        }
        for port in 0..self.ports.len() {
            if !self.ports[port].ifb {
                work |= self.transmit(port, now);
            }
            // Other workers see what this one sent from their shared classes.
            for tree in &mut self.ports[port].trees {
                tree.htb.flush_shared();
            }
        }
        let pending = self.rings.kick();
        work |= self.rings.reap() > 0;
        self.rings.refill();
        self.export_flows(now);
        debug_assert_eq!(
            self.unaccounted_frames(),
            0,
            "a frame was lost or kept twice"
        );
        match (work, pending) {
            (true, _) => Progress::Moved,
            (false, true) => Progress::TxStuck,
            (false, false) => Progress::Idle,
        }
    }

    /// This worker was kept from serving its schedulers from `from` to `to`: each credits the
    /// classes the stall cost, up to `at_most` (`Scheduler::credit_stall`).
    pub(crate) fn credit_stall(&mut self, from: Instant, to: Instant, at_most: htb_core::Duration) {
        for port in &mut self.ports {
            for tree in &mut port.trees {
                tree.htb.credit_stall(from, to, at_most);
            }
        }
    }

    /// Packets the rings count as the data plane's that no scheduler holds: 0 unless one
    /// leaked (positive) or is counted twice (negative). Between passes every packet the data
    /// plane holds is queued in a scheduler.
    #[must_use]
    pub(crate) fn unaccounted_frames(&self) -> i64 {
        i64::from(self.rings.counts().packets_held) - self.queued() as i64
    }

    /// Classifies a received frame into its egress port's scheduler (or drops it).
    fn ingest(&mut self, ingress: usize, chunk: Chunk, now: Instant, pool_low: bool) {
        let bytes = self.rings.bytes(&chunk);
        let stats = &mut self.ports[ingress].stats;
        stats.rx_packets += 1;
        stats.rx_bytes += u64::from(chunk.len());
        let egress = match self.mode {
            Mode::Bridge => self.ports[ingress].peer,
            // The XDP program wrote the egress port's MAC as the source.
            Mode::Router => bytes.get(6..12).and_then(|m| {
                self.by_mac
                    .iter()
                    .find(|(mac, _)| mac[..] == *m)
                    .map(|&(_, port)| port)
            }),
        };
        let Some(egress) = egress else {
            self.ports[ingress].stats.drops_no_egress += 1;
            self.rings.release(chunk);
            return;
        };
        if pool_low {
            self.ports[egress].stats.drops_pool += 1;
            self.rings.release(chunk);
            return;
        }
        let parsed = parse(bytes);
        let len = chunk.len();
        let (tree_port, onward) = match self.ingress_verdict(ingress, &parsed, bytes, now, len) {
            IngressVerdict::Pass => (egress, None),
            IngressVerdict::Redirect(ifb) => (ifb, Some(egress)),
            IngressVerdict::Drop => {
                self.ports[ingress].stats.drops_police += 1;
                self.rings.release(chunk);
                return;
            }
        };
        self.classify_into(ingress, tree_port, chunk, &parsed, now, onward);
    }

    /// What port `ingress`'s ingress qdisc does with a frame it received.
    fn ingress_verdict(
        &self,
        ingress: usize,
        parsed: &crate::parse::Parsed,
        bytes: &[u8],
        now: Instant,
        len: u32,
    ) -> IngressVerdict {
        let Some(hook) = &self.ports[ingress].ingress else {
            return IngressVerdict::Pass;
        };
        match hook
            .hook
            .classifier
            .classify_policed(&parsed.info, &parsed.headers(bytes), now, len)
        {
            Verdict::Filter(i) => match hook.redirects.get(i).copied().flatten() {
                Some(ifb) => IngressVerdict::Redirect(ifb),
                None => IngressVerdict::Pass,
            },
            Verdict::Unclassified => IngressVerdict::Pass,
            Verdict::Drop => IngressVerdict::Drop,
        }
    }

    /// Classifies a frame by port `port`'s filters into its trees (an IFB's, with `onward` the
    /// port it leaves through after; or its egress port's), handing it to the worker that owns
    /// its class.
    fn classify_into(
        &mut self,
        ingress: usize,
        egress: usize,
        chunk: Chunk,
        parsed: &crate::parse::Parsed,
        now: Instant,
        onward: Option<usize>,
    ) {
        let bytes = self.rings.bytes(&chunk);
        if onward.is_some() {
            let stats = &mut self.ports[egress].stats;
            stats.rx_packets += 1;
            stats.rx_bytes += u64::from(chunk.len());
        }
        // u32's general keys (if any filter has them) read the packet's bytes; a filter's
        // policer may drop the frame or pass it on to the next filter.
        let classified = match self.ports[egress].classifier.classify_policed(
            &parsed.info,
            &parsed.headers(bytes),
            now,
            chunk.len(),
        ) {
            Verdict::Filter(i) => Some(i),
            Verdict::Unclassified => None,
            Verdict::Drop => {
                self.ports[egress].stats.drops_police += 1;
                self.rings.release(chunk);
                return;
            }
        };
        // A chain occupies each of its frames (`skb->truesize` of a multi-buffer skb).
        let truesize = self.frame_size * u32::from(chunk.frames());
        let needs = self.ports[egress].needs;
        let mut frame = Frame::new(chunk, bytes, parsed, &self.flows, truesize, needs);
        if let Some(onward) = onward {
            frame = frame.redirected(onward);
        }
        let (me, workers) = (self.crew.me(), self.crew.workers());
        let port = &mut self.ports[egress];
        let (filter, (slot, owner)) = match classified {
            Some(i) => (u32::try_from(i).ok(), port.target(i, me, workers)),
            None => (None, port.unclassified_slot(me, workers)),
        };
        let mut rtt = None;
        if onward.is_none()
            && let Some(tracker) = self.rtt.as_mut()
        {
            let outgoing = Outgoing {
                bytes,
                parsed,
                egress,
                classified,
                slot,
            };
            rtt = observe_rtt(tracker, &mut self.ports, &outgoing, now);
        }
        if onward.is_none()
            && let Some(m) = self.metering.as_mut()
        {
            let metered = metering::Metered {
                bytes,
                parsed,
                ingress,
                egress,
                hash: htb_core::Packet::flow_hash(&frame),
                // Only a round trip needs the reverse direction's record.
                reverse_hash: if rtt.is_some_and(|o| o.sample.is_some()) {
                    self.flows.hash_reverse(parsed)
                } else {
                    0
                },
                class: metering::class_of(&self.ports[egress], classified, slot),
                len: htb_core::Packet::len_bytes(&frame),
            };
            m.meter(&metered, rtt, now);
        }
        if owner != me {
            self.hand_over(owner, egress, filter, frame);
            return;
        }
        self.enqueue(egress, now, slot, frame);
    }

    /// A frame's chunk with the header edits its leaf asked for written in: CE where the leaf
    /// marked instead of dropping, the DSCP cleared where `cake` washed it.
    fn edited(&mut self, frame: Frame) -> Chunk {
        let (mut chunk, edits) = frame.into_parts();
        if let Some(e) = edits {
            self.rings.rewrite(&mut chunk, &mut |b| {
                if e.wash {
                    wash_dscp(b, e.l3, e.ipv6);
                }
                if e.ce {
                    set_ce(b, e.l3, e.ipv6);
                }
            });
        }
        chunk
    }

    /// Moves what IFB port `port`'s trees release at `now` on to each frame's egress port
    /// (`ifb_xmit` re-injecting at the device the frame came for), classified there. Returns
    /// whether any moved. At most a few batches per pass, so that a backlog released at once
    /// does not hold up the TX rings.
    fn release_ifb(&mut self, port: usize, now: Instant) -> bool {
        let mut moved = false;
        for _ in 0..self.batch * 4 {
            let Some(frame) = self.dequeue(port, now) else {
                break;
            };
            moved = true;
            let onward = frame.onward();
            // The IFB's leaf marked it CE or washed its DSCP: the egress leaf reads the edited
            // header, as the kernel's does.
            let chunk = self.edited(frame);
            let stats = &mut self.ports[port].stats;
            stats.tx_packets += 1;
            stats.tx_bytes += u64::from(chunk.len());
            match onward.filter(|&e| e < self.ports.len() && !self.ports[e].ifb) {
                Some(egress) => {
                    let parsed = parse(self.rings.bytes(&chunk));
                    // Its ingress port is lost on the way through the IFB: the IFB stands in.
                    self.classify_into(port, egress, chunk, &parsed, now, None);
                }
                None => {
                    self.ports[port].stats.drops_no_egress += 1;
                    self.rings.release(chunk);
                }
            }
        }
        self.release_dropped(port);
        moved
    }

    /// Queues a frame in `egress`'s scheduler; drops it when the class's queue refuses it.
    fn enqueue(&mut self, egress: usize, now: Instant, slot: Slot, frame: Frame) {
        let port = &mut self.ports[egress];
        if let Err(dropped) = port.htb(slot.tree).enqueue(now, slot.target, frame) {
            port.stats.drops_queue += 1;
            self.meter_drop(htb_core::Packet::flow_hash(&dropped.packet));
            self.rings.release(dropped.packet.into_chunk());
        }
        self.release_dropped(egress);
    }

    /// Hands a frame to the worker owning its class; drops it (counted) when that worker's
    /// ring is full.
    fn hand_over(&mut self, owner: usize, egress: usize, filter: Option<u32>, frame: Frame) {
        let (chunk, tag) = frame.into_handoff();
        let handoff = Handoff {
            parcel: self.rings.hand_over(chunk),
            tag,
            egress: u16::try_from(egress).unwrap_or(u16::MAX),
            filter,
        };
        if let Err(back) = self.crew.send(owner, handoff) {
            let chunk = self.rings.take_over(back.parcel);
            self.ports[egress].stats.drops_queue += 1;
            self.rings.release(chunk);
        }
    }

    /// Queues the frames other workers handed to this one. Returns how many.
    fn take_inbound(&mut self, now: Instant) -> usize {
        let (me, workers) = (self.crew.me(), self.crew.workers());
        let mut taken = 0;
        while taken < INBOUND_PER_PASS {
            let Some(handoff) = self.crew.receive() else {
                break;
            };
            taken += 1;
            let chunk = self.rings.take_over(handoff.parcel);
            let frame = Frame::from_handoff(chunk, handoff.tag);
            let egress = usize::from(handoff.egress);
            let Some(port) = self.ports.get_mut(egress) else {
                self.rings.release(frame.into_chunk());
                continue;
            };
            let (slot, owner) = match handoff.filter {
                Some(i) => port.target(i as usize, me, workers),
                None => port.unclassified_slot(me, workers),
            };
            if owner != me {
                // Its class went while it was on its way (a batch of changes applies to every
                // worker at once, so all agree on the new owner): on to that one, so that
                // only a subtree's owner ever queues its frames.
                self.hand_over(owner, egress, handoff.filter, frame);
                continue;
            }
            self.enqueue(egress, now, slot, frame);
        }
        taken
    }

    /// Takes back the frames `port`'s leaves dropped (CoDel, a full flow, a batch from the
    /// fattest flow) and returns them to the pool.
    fn release_dropped(&mut self, port: usize) {
        let p = &mut self.ports[port];
        let mut dropped = 0;
        for frame in p.drain_dropped() {
            dropped += 1;
            if let Some(m) = self.metering.as_mut() {
                m.table.note_drop(htb_core::Packet::flow_hash(&frame));
            }
            self.rings.release(frame.into_chunk());
        }
        p.stats.drops_queue += dropped;
    }

    /// The next packet `port` may send at `now`: its unshaped FIFO's, else its trees' in
    /// turn.
    fn dequeue(&mut self, port: usize, now: Instant) -> Option<Frame> {
        let p = &mut self.ports[port];
        if let Some(frame) = p.unshaped.dequeue(now) {
            return Some(frame);
        }
        let n = p.trees.len();
        for k in 0..n {
            let t = (p.next_tree + k) % n;
            if let Some(frame) = p.trees[t].htb.dequeue(now) {
                p.next_tree = (t + 1) % n;
                return Some(frame);
            }
        }
        None
    }

    /// Moves what `port`'s scheduler releases into its TX ring. Returns whether any moved.
    /// The ring's room is in frames: a packet is dequeued only while the room left holds the
    /// longest chain, so that what is dequeued is always sent.
    fn transmit(&mut self, port: usize, now: Instant) -> bool {
        let mut moved = false;
        let chain = self.rings.max_chain() as usize;
        loop {
            let want = self.batch + chain - 1;
            let room = self.rings.tx_room(port, want as u32) as usize;
            if room < chain {
                return moved;
            }
            let mut bytes = 0u64;
            let mut frames = 0usize;
            while self.tx_batch.len() < self.batch && frames + chain <= room {
                let Some(frame) = self.dequeue(port, now) else {
                    break;
                };
                let chunk = self.edited(frame);
                bytes += u64::from(chunk.len());
                frames += usize::from(chunk.frames());
                self.tx_batch.push(chunk);
            }
            self.release_dropped(port);
            if self.tx_batch.is_empty() {
                return moved;
            }
            let sent = self.rings.transmit(port, &mut self.tx_batch);
            debug_assert!(self.tx_batch.is_empty(), "room was checked");
            // Should the ring refuse despite the room check, the frames are dropped, not leaked.
            let p = &mut self.ports[port];
            for chunk in self.tx_batch.drain(..) {
                bytes -= u64::from(chunk.len());
                p.stats.drops_queue += 1;
                self.rings.release(chunk);
            }
            p.stats.tx_packets += sent as u64;
            p.stats.tx_bytes += bytes;
            moved = true;
            if frames + chain > room || sent < self.batch {
                return moved;
            }
        }
    }

    /// The earliest time a scheduler may release a packet it holds now.
    #[must_use]
    pub(crate) fn next_wakeup(&self) -> Option<Instant> {
        self.ports
            .iter()
            .flat_map(Port::schedulers)
            .filter_map(Scheduler::next_wakeup)
            .min()
    }
}
