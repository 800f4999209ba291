//! Per-worker flow records, as a NetFlow/IPFIX metering process keeps them (RFC 7011 §2's
//! Metering Process; the kernel has none, LibreQoS keeps them in eBPF maps): one record per
//! flow direction — addresses, ports, protocol and VLAN as the classifier reads them — with its
//! class, bytes and packets, first and last seen, TCP flags, round trips and retransmissions,
//! and the packets its class's leaf dropped.
//!
//! The table is fixed at its size when made, so memory never grows with the traffic: a flow
//! may take any place of two buckets picked by its keyed hash (the frame's own flow hash,
//! already computed for `fq_codel`). A record leaves the table, and is handed over for export, when
//! it has been idle for the idle timeout, when it has run for the active timeout (it then
//! starts a new interval in place), when a FIN or RST ends its TCP connection, or when a new
//! flow needs its place and the window is full: the least recently seen record in the window
//! goes, counted as an eviction (flowEndReason "lack of resources").
//!
//! Sans-IO: every call takes the data plane's clock; records to export gather in an outbox the
//! data plane empties into the export ring after each pass.

use std::net::IpAddr;
use std::time::Duration as StdDuration;

use htb_core::ClassId;

/// The places a flow may take: two buckets of [`BUCKET`], chosen by two functions of its hash
/// (two-choice hashing: linear probing in one window of 16 still filled windows at 38 % of the
/// table, its clusters growing to ~30 places; two buckets of 8 fill only near a full table).
pub const WINDOW: usize = 2 * BUCKET;

/// Places per bucket: 32 bytes of hashes, within one cache line.
pub const BUCKET: usize = 8;

/// Round trips each record keeps for its median.
const RTT_SAMPLES: usize = 8;

/// How long one sweep of the whole table for timeouts takes: each pass checks its share of the
/// table by the time since the last pass.
const SWEEP_NS: u64 = 1_000_000_000;

/// The flow table's configuration (htbd's `[flows]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowConfig {
    /// Records per worker (rounded up to a power of two).
    pub entries: usize,
    /// A record running this long is exported and starts a new interval.
    pub active_timeout: StdDuration,
    /// A record idle this long is exported and freed.
    pub idle_timeout: StdDuration,
    /// 1-in-N packet sampling (1: every packet).
    pub sampling: u32,
}

impl Default for FlowConfig {
    fn default() -> Self {
        Self {
            entries: 65_536,
            active_timeout: StdDuration::from_secs(60),
            idle_timeout: StdDuration::from_secs(15),
            sampling: 1,
        }
    }
}

impl FlowConfig {
    /// The bytes a worker's table takes.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.entries.max(WINDOW).next_power_of_two() * (size_of::<Entry>() + size_of::<u32>())
    }
}

/// A flow direction: what the classifier reads of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol.
    pub proto: u8,
    /// Source port (0 without ports).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// The innermost VLAN id.
    pub vlan: Option<u16>,
    /// The port it came in on.
    pub ingress: u16,
    /// The port it leaves through.
    pub egress: u16,
}

/// Why a record was handed over (IPFIX's flowEndReason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowEnd {
    /// Idle for the idle timeout.
    Idle,
    /// Running for the active timeout (the flow goes on in a new interval).
    Active,
    /// A FIN or RST.
    EndOfFlow,
    /// The data plane stopped.
    Forced,
    /// Its place was needed and the window was full.
    Evicted,
}

/// One flow direction's record over one interval: what is exported, or shown live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// The flow.
    pub key: FlowKey,
    /// Its class on the egress port (`None`: unclassified, or a port without a tree).
    pub class: Option<ClassId>,
    /// IP bytes (from the innermost IP header on, as IPFIX's octetDeltaCount counts them) of
    /// the sampled packets.
    pub bytes: u64,
    /// Sampled packets.
    pub packets: u64,
    /// First and last packet, on the data plane's clock (ns).
    pub first_ns: u64,
    /// Last packet.
    pub last_ns: u64,
    /// TCP flags seen, ORed.
    pub tcp_flags: u8,
    /// The shortest round trip measured for it, ns.
    pub rtt_min_ns: Option<u64>,
    /// The median of its last round trips, ns.
    pub rtt_median_ns: Option<u64>,
    /// Its segments that were retransmissions.
    pub retransmits: u32,
    /// Its packets its class's leaf (or a full queue) dropped.
    pub leaf_drops: u64,
    /// Why it was handed over (`None`: a live record).
    pub end: Option<FlowEnd>,
}

impl FlowRecord {
    /// The record of flow `key` in `class` starting at `now_ns`, before its first packet.
    fn starting(key: FlowKey, class: Option<ClassId>, now_ns: u64) -> Self {
        Self {
            key,
            class,
            bytes: 0,
            packets: 0,
            first_ns: now_ns,
            last_ns: now_ns,
            tcp_flags: 0,
            rtt_min_ns: None,
            rtt_median_ns: None,
            retransmits: 0,
            leaf_drops: 0,
            end: None,
        }
    }
}

/// A record in its place.
#[derive(Clone, Copy, Debug)]
struct Entry {
    record: FlowRecord,
    /// The last round trips, µs, newest at `rtt_next - 1`.
    rtts: [u32; RTT_SAMPLES],
    rtt_count: u32,
}

/// The table's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCounters {
    /// Records live now.
    pub live: u64,
    /// Records started.
    pub started: u64,
    /// Records handed over for export.
    pub exported: u64,
    /// Records evicted for a new flow (also exported).
    pub evicted: u64,
    /// Records lost because the export ring was full.
    pub export_drops: u64,
}

impl FlowCounters {
    /// Adds another worker's.
    pub fn add(&mut self, other: &Self) {
        self.live += other.live;
        self.started += other.started;
        self.exported += other.exported;
        self.evicted += other.evicted;
        self.export_drops += other.export_drops;
    }
}

/// One worker's flow records.
#[derive(Debug)]
pub struct FlowTable {
    config: FlowConfig,
    mask: usize,
    /// Each place's flow hash (0: free), apart, so that a lookup reads one cache line.
    hashes: Box<[u32]>,
    entries: Box<[Entry]>,
    /// Packets seen, for 1-in-N sampling.
    seen: u64,
    /// The next place the sweep checks, and when it last ran.
    sweep_at: usize,
    swept_ns: Option<u64>,
    counters: FlowCounters,
    /// Records to export, emptied by the data plane.
    outbox: Vec<FlowRecord>,
}

/// A hash as the table keeps it: never 0, which marks a free place.
fn stored(hash: u32) -> u32 {
    hash.max(1)
}

impl FlowTable {
    /// An empty table of `config.entries` records (rounded up to a power of two).
    #[must_use]
    pub fn new(config: FlowConfig) -> Self {
        let size = config.entries.max(WINDOW).next_power_of_two();
        let unused = FlowKey {
            src: IpAddr::from([0, 0, 0, 0]),
            dst: IpAddr::from([0, 0, 0, 0]),
            proto: 0,
            sport: 0,
            dport: 0,
            vlan: None,
            ingress: 0,
            egress: 0,
        };
        let empty = Entry {
            record: FlowRecord::starting(unused, None, 0),
            rtts: [0; RTT_SAMPLES],
            rtt_count: 0,
        };
        Self {
            config: FlowConfig {
                sampling: config.sampling.max(1),
                ..config
            },
            mask: size - 1,
            hashes: vec![0; size].into_boxed_slice(),
            entries: vec![empty; size].into_boxed_slice(),
            seen: 0,
            sweep_at: 0,
            swept_ns: None,
            counters: FlowCounters::default(),
            outbox: Vec::new(),
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> FlowConfig {
        self.config
    }

    /// The counters (kept as records come and go: a status never scans the table).
    #[must_use]
    pub fn counters(&self) -> FlowCounters {
        self.counters
    }

    /// Whether this packet is one the table samples (every packet at 1-in-1): called once
    /// per packet before [`observe`](Self::observe).
    #[inline]
    pub fn sample(&mut self) -> bool {
        self.seen += 1;
        self.config.sampling == 1 || self.seen.is_multiple_of(u64::from(self.config.sampling))
    }

    /// The two buckets' first places of hash `hash`.
    #[inline]
    fn buckets(&self, hash: u32) -> [usize; 2] {
        // The second from the hash remixed (murmur3's finalizer constants), so that flows
        // sharing a first bucket scatter over second ones.
        let other = (hash.rotate_left(16) ^ 0x9e37_79b9).wrapping_mul(0x85eb_ca6b);
        let [a, b] = [hash as usize, other as usize].map(|b| b & self.mask & !(BUCKET - 1));
        // Two distinct buckets always, so that a flow has 16 places.
        [a, if a == b { (a + BUCKET) & self.mask } else { b }]
    }

    /// The places of hash `hash`: both buckets'.
    #[inline]
    fn places_of(&self, hash: u32) -> impl Iterator<Item = usize> + Clone + use<> {
        let [a, b] = self.buckets(hash);
        (a..a + BUCKET).chain(b..b + BUCKET)
    }

    /// The place of flow `key` with hash `hash`, if it has one.
    #[inline]
    fn find(&self, hash: u32, key: &FlowKey) -> Option<usize> {
        let h = stored(hash);
        self.places_of(hash)
            .find(|&at| self.hashes[at] == h && self.entries[at].record.key == *key)
    }

    /// Counts a packet of `len` bytes of flow `key` (hash `hash`, the frame's flow hash) in
    /// class `class` at `now_ns`; `tcp_flags` are its TCP header's (0 for other protocols).
    /// A FIN or RST ends the record.
    #[inline]
    pub fn observe(
        &mut self,
        hash: u32,
        key: &FlowKey,
        class: Option<ClassId>,
        len: u32,
        tcp_flags: u8,
        now_ns: u64,
    ) {
        let at = match self.find(hash, key) {
            Some(at) => at,
            None => self.start(hash, key, class, now_ns),
        };
        let r = &mut self.entries[at].record;
        if r.packets == 0 {
            // A new record, or a new interval after an active timeout: it starts here.
            r.first_ns = now_ns;
        }
        r.bytes += u64::from(len);
        r.packets += 1;
        r.last_ns = now_ns;
        r.tcp_flags |= tcp_flags;
        r.class = class.or(r.class);
        // FIN or RST: the connection ends here (its last ACK, if any, starts a short record).
        if tcp_flags & 0x05 != 0 {
            self.hand_over(at, FlowEnd::EndOfFlow);
        }
    }

    /// A new record for `key` in the emptier of its two buckets, or in the place of the least
    /// recently seen record of both (evicted).
    fn start(&mut self, hash: u32, key: &FlowKey, class: Option<ClassId>, now_ns: u64) -> usize {
        let free = |b: usize| (b..b + BUCKET).filter(|&at| self.hashes[at] == 0).count();
        let [a, b] = self.buckets(hash);
        let emptier = if free(b) > free(a) { b } else { a };
        let at = match (emptier..emptier + BUCKET).find(|&at| self.hashes[at] == 0) {
            Some(free) => free,
            None => {
                let oldest = self
                    .places_of(hash)
                    .min_by_key(|&at| self.entries[at].record.last_ns)
                    .unwrap_or(a);
                self.counters.evicted += 1;
                self.hand_over(oldest, FlowEnd::Evicted);
                oldest
            }
        };
        self.counters.started += 1;
        self.counters.live += 1;
        self.hashes[at] = stored(hash);
        let e = &mut self.entries[at];
        e.record = FlowRecord::starting(*key, class, now_ns);
        e.rtt_count = 0;
        at
    }

    /// A round trip of `ns` measured for flow `key` (the direction whose segment carried the
    /// timestamp), if it has a record.
    pub fn note_rtt(&mut self, hash: u32, key: &FlowKey, ns: u64) {
        if let Some(at) = self.find(hash, key) {
            let e = &mut self.entries[at];
            let r = &mut e.record;
            r.rtt_min_ns = Some(r.rtt_min_ns.map_or(ns, |m| m.min(ns)));
            e.rtts[e.rtt_count as usize % RTT_SAMPLES] =
                u32::try_from(ns / 1000).unwrap_or(u32::MAX);
            e.rtt_count += 1;
        }
    }

    /// A retransmitted segment of flow `key`.
    pub fn note_retransmit(&mut self, hash: u32, key: &FlowKey) {
        if let Some(at) = self.find(hash, key) {
            self.entries[at].record.retransmits += 1;
        }
    }

    /// A packet of the flow with hash `hash` that the leaf or a full queue dropped (the
    /// frame no longer says its flow's key: the first record with that hash counts it).
    pub fn note_drop(&mut self, hash: u32) {
        let h = stored(hash);
        if let Some(at) = self.places_of(hash).find(|&at| self.hashes[at] == h) {
            self.entries[at].record.leaf_drops += 1;
        }
    }

    /// The record at `at` with its round trips' median, for export or display.
    fn record_at(&self, at: usize) -> FlowRecord {
        let e = &self.entries[at];
        let n = (e.rtt_count as usize).min(RTT_SAMPLES);
        let mut r = e.record;
        if n > 0 {
            let mut last = e.rtts;
            let last = &mut last[..n];
            last.sort_unstable();
            r.rtt_median_ns = Some(u64::from(last[n / 2]) * 1000);
        }
        r
    }

    /// Moves the record at `at` to the outbox, ended by `end`, and frees its place. A record
    /// of an interval that saw nothing (its flow went quiet right after an active timeout) is
    /// freed without export: it would say nothing, with no first packet to date it.
    fn hand_over(&mut self, at: usize, end: FlowEnd) {
        let mut r = self.record_at(at);
        if r.packets > 0 || r.leaf_drops > 0 {
            r.end = Some(end);
            self.outbox.push(r);
            self.counters.exported += 1;
        }
        self.hashes[at] = 0;
        self.counters.live -= 1;
    }

    /// Checks this pass's share of the table for timeouts at `now_ns`: over a second (`SWEEP_NS`), the
    /// whole table. An active record past the active timeout is exported and goes on as a new
    /// interval in place.
    pub fn sweep(&mut self, now_ns: u64) {
        let size = self.mask + 1;
        let last = self.swept_ns.unwrap_or(now_ns.saturating_sub(SWEEP_NS));
        let since = now_ns.saturating_sub(last).min(SWEEP_NS);
        let share = (size as u128 * u128::from(since) / u128::from(SWEEP_NS)) as usize;
        if share == 0 {
            return;
        }
        // The time this share stands for, so that the rounding left over counts next pass
        // (a pass every 20 µs on 65 536 places is 1.3 places: rounded down and forgotten, a
        // sweep took 2 s); a gap of more than a sweep starts afresh.
        self.swept_ns = Some(if now_ns.saturating_sub(last) > SWEEP_NS {
            now_ns
        } else {
            last + (share as u128 * u128::from(SWEEP_NS) / size as u128) as u64
        });
        let (idle, active) = (
            u64::try_from(self.config.idle_timeout.as_nanos()).unwrap_or(u64::MAX),
            u64::try_from(self.config.active_timeout.as_nanos()).unwrap_or(u64::MAX),
        );
        for _ in 0..share.min(size) {
            let at = self.sweep_at;
            self.sweep_at = (at + 1) & self.mask;
            if self.hashes[at] == 0 {
                continue;
            }
            let r = self.entries[at].record;
            if now_ns.saturating_sub(r.last_ns) >= idle {
                self.hand_over(at, FlowEnd::Idle);
            } else if now_ns.saturating_sub(r.first_ns) >= active {
                let mut out = self.record_at(at);
                out.end = Some(FlowEnd::Active);
                self.outbox.push(out);
                self.counters.exported += 1;
                let e = &mut self.entries[at];
                let r = &mut e.record;
                (r.bytes, r.packets, r.tcp_flags, r.retransmits, r.leaf_drops) = (0, 0, 0, 0, 0);
                // Dated by its next packet (`observe`); none before the idle timeout, and it
                // is freed without a record.
                (r.first_ns, r.rtt_min_ns) = (u64::MAX, None);
                e.rtt_count = 0;
            }
        }
    }

    /// Hands over every record (the data plane stops).
    pub fn flush(&mut self) {
        self.flush_range(0..self.places());
    }

    /// Hands over the records in places `range` (a stop goes a range at a time, so that the
    /// outbox never holds a whole large table).
    pub fn flush_range(&mut self, range: std::ops::Range<usize>) {
        let end = range.end.min(self.places());
        for at in range.start.min(end)..end {
            if self.hashes[at] != 0 {
                self.hand_over(at, FlowEnd::Forced);
            }
        }
    }

    /// Takes the records to export.
    pub fn take_outbox(&mut self) -> std::vec::Drain<'_, FlowRecord> {
        self.outbox.drain(..)
    }

    /// Counts records the export ring had no room for.
    pub fn lost_to_export(&mut self, n: u64) {
        self.counters.export_drops += n;
    }

    /// The live records that `keep` keeps.
    pub fn live(&self, keep: impl FnMut(&FlowRecord) -> bool) -> Vec<FlowRecord> {
        self.live_in(0..self.places(), keep)
    }

    /// The places the table has (records it can hold).
    #[must_use]
    pub fn places(&self) -> usize {
        self.mask + 1
    }

    /// The live records in places `range` that `keep` keeps: a listing of a large table goes
    /// a range at a time, so that no data-plane job holds forwarding up for long.
    pub fn live_in(
        &self,
        range: std::ops::Range<usize>,
        mut keep: impl FnMut(&FlowRecord) -> bool,
    ) -> Vec<FlowRecord> {
        let end = range.end.min(self.places());
        (range.start.min(end)..end)
            .filter(|&at| self.hashes[at] != 0 && keep(&self.entries[at].record))
            .map(|at| self.record_at(at))
            .collect()
    }
}

#[cfg(test)]
mod tests;
