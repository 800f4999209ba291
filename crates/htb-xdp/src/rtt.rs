//! Passive TCP round-trip time, as `pping` measures it: a segment's TCP timestamp (TSval) is
//! noted with the time it passed; when a segment of the reverse direction echoes it (TSecr),
//! the difference is one round trip from here to the far end and back, queueing included. A
//! connection without timestamps gives one sample per handshake (SYN → SYN-ACK, SYN-ACK →
//! ACK). A data segment that starts below the highest sequence number already seen in its
//! direction is a retransmission.
//!
//! State is a fixed table of flow directions, allocated once: a new flow takes its slot,
//! evicting whatever hashed there — memory never grows with the traffic. Each sample and
//! retransmission is put down to a class: the class of the segment that carried the TSval
//! (or the SYN), so a download's RTT is its subscriber's, measured towards the subscriber.

use std::hash::BuildHasher;

use htb_core::{ClassId, Instant};

use crate::frame::address_words;
use crate::parse::Parsed;

/// Flow directions the table holds (a power of two).
pub const SLOTS: usize = 1 << 16;

/// A noted timestamp older than this is given up (its echo was lost or never comes).
const STALE_NS: u64 = 2_000_000_000;

/// The TCP fields the tracker reads from one segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// This direction's key.
    pub flow: u64,
    /// The reverse direction's key.
    pub reverse: u64,
    /// Sequence number.
    pub seq: u32,
    /// Payload bytes.
    pub len: u32,
    /// SYN.
    pub syn: bool,
    /// ACK.
    pub ack: bool,
    /// The timestamp option: TSval, TSecr.
    pub timestamps: Option<(u32, u32)>,
}

/// Where a sample or retransmission is counted: a port's class.
pub type ClassKey = (u16, ClassId);

/// What one segment gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// A round trip, in ns, and the class it belongs to.
    pub sample: Option<(ClassKey, u64)>,
    /// The segment is a retransmission (of its own class).
    pub retransmit: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    key: u64,
    /// The noted TSval and when (`None`: none pending).
    tsval: u32,
    ts_at: Option<u64>,
    ts_class: Option<ClassKey>,
    /// A SYN or SYN-ACK without timestamps, and when.
    syn_at: Option<u64>,
    syn_class: Option<ClassKey>,
    /// The end of the highest data seen (valid with `have_seq`).
    high: u32,
    have_seq: bool,
    /// The last TSval seen in this direction: only a segment carrying a new one is noted.
    last_tsval: Option<u32>,
}

/// The flow table.
#[derive(Debug)]
pub struct RttTracker {
    slots: Box<[Slot]>,
    k0: u64,
    k1: u64,
}

impl Default for RttTracker {
    fn default() -> Self {
        Self::new()
    }
}

fn mix(h: u64, word: u64, k: u64) -> u64 {
    let product = u128::from(h ^ word) * u128::from(k);
    (product as u64) ^ ((product >> 64) as u64)
}

/// Serial-number "a is before b" (RFC 1982).
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl RttTracker {
    /// An empty table of [`SLOTS`] flow directions (a few MiB), keyed at random so that no
    /// one can aim flows at one slot.
    #[must_use]
    pub fn new() -> Self {
        let random = std::hash::RandomState::new();
        Self {
            slots: vec![Slot::default(); SLOTS].into_boxed_slice(),
            k0: random.hash_one(0x5851_f42d_4c95_7f2d_u64),
            k1: random.hash_one(0x1405_7b7e_f767_814f_u64) | 1,
        }
    }

    fn key(&self, src: [u64; 2], dst: [u64; 2], ports: u64) -> u64 {
        let mut h = self.k0;
        for w in [src[0], src[1], dst[0], dst[1], ports] {
            h = mix(h, w, self.k1);
        }
        h | 1 // 0 marks an empty slot
    }

    /// The TCP segment in `frame` (parsed as `parsed`), if it is one with a whole header.
    #[must_use]
    pub fn segment(&self, frame: &[u8], parsed: &Parsed) -> Option<Segment> {
        let info = &parsed.info;
        if info.proto != Some(6) || parsed.fragment {
            return None;
        }
        let (l3, l4) = (parsed.l3?, parsed.l4?);
        let tcp = frame.get(l4..)?;
        let header = usize::from(*tcp.get(12)? >> 4) * 4;
        if header < 20 || tcp.len() < header {
            return None;
        }
        let ip_len = if parsed.ipv6 {
            40 + usize::from(u16::from_be_bytes([
                *frame.get(l3 + 4)?,
                *frame.get(l3 + 5)?,
            ]))
        } else {
            usize::from(u16::from_be_bytes([
                *frame.get(l3 + 2)?,
                *frame.get(l3 + 3)?,
            ]))
        };
        let len = ip_len.checked_sub(l4 - l3 + header)?;
        let flags = tcp[13];
        let (sport, dport) = (info.sport?, info.dport?);
        let (src, dst) = (address_words(info.src), address_words(info.dst));
        let ports = |a: u16, b: u16| u64::from(a) << 16 | u64::from(b);
        Some(Segment {
            flow: self.key(src, dst, ports(sport, dport)),
            reverse: self.key(dst, src, ports(dport, sport)),
            seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
            len: u32::try_from(len).ok()?,
            syn: flags & 0x02 != 0,
            ack: flags & 0x10 != 0,
            timestamps: timestamps(&tcp[20..header]),
        })
    }

    fn slot(&mut self, key: u64) -> &mut Slot {
        let at = (key as usize) & (SLOTS - 1);
        let slot = &mut self.slots[at];
        if slot.key != key {
            // Another flow hashed here: it is evicted.
            *slot = Slot {
                key,
                ..Slot::default()
            };
        }
        slot
    }

    /// Notes segment `s` of class `class` passing at `now`.
    pub fn observe(&mut self, s: &Segment, class: Option<ClassKey>, now: Instant) -> Observed {
        let now = now.as_nanos();
        let mut out = Observed::default();
        // The echo of a timestamp the reverse direction carried, or the answer to its SYN.
        let reverse_at = (s.reverse as usize) & (SLOTS - 1);
        let r = &mut self.slots[reverse_at];
        if r.key == s.reverse {
            if let (Some((_, tsecr)), Some(noted)) = (s.timestamps, r.ts_at)
                && s.ack
                && tsecr == r.tsval
            {
                out.sample = r.ts_class.map(|c| (c, now.saturating_sub(noted)));
                r.ts_at = None;
            } else if let Some((_, tsecr)) = s.timestamps
                && r.ts_at.is_some()
                && before(r.tsval, tsecr)
            {
                // A later timestamp echoed: the noted one's echo will not come (its segment
                // was lost, or ACKed with a later one). Note afresh.
                r.ts_at = None;
            } else if let Some(noted) = r.syn_at
                && s.ack
                && s.timestamps.is_none()
            {
                out.sample = r.syn_class.map(|c| (c, now.saturating_sub(noted)));
                r.syn_at = None;
            }
        }
        let f = self.slot(s.flow);
        // One timestamp noted at a time, until echoed or stale, and only on the first segment
        // that carries it (pping's rule): TSval ticks in ms, and the echo of a value is for
        // the earliest segment that carried it, so noting a later one would read short.
        let stale = f
            .ts_at
            .is_none_or(|noted| now.saturating_sub(noted) > STALE_NS);
        let first_carrier = s
            .timestamps
            .is_some_and(|(tsval, _)| f.last_tsval != Some(tsval));
        if let Some((tsval, _)) = s.timestamps {
            f.last_tsval = Some(tsval);
        }
        if let Some((tsval, _)) = s.timestamps
            && stale
            && first_carrier
        {
            f.tsval = tsval;
            f.ts_at = Some(now);
            f.ts_class = class;
        }
        if s.syn && s.timestamps.is_none() {
            f.syn_at = Some(now);
            f.syn_class = class;
        }
        if s.len > 0 {
            let end = s.seq.wrapping_add(s.len);
            if f.have_seq && before(s.seq, f.high) {
                out.retransmit = true;
            }
            if !f.have_seq || before(f.high, end) {
                f.high = end;
                f.have_seq = true;
            }
        } else if s.syn {
            // The SYN takes one sequence number: data starts after it.
            f.high = s.seq.wrapping_add(1);
            f.have_seq = true;
        }
        out
    }
}

/// The timestamp option (kind 8, length 10) in TCP options.
fn timestamps(mut options: &[u8]) -> Option<(u32, u32)> {
    while let Some(&kind) = options.first() {
        match kind {
            0 => return None,
            1 => options = &options[1..],
            _ => {
                let len = usize::from(*options.get(1)?);
                if len < 2 || options.len() < len {
                    return None;
                }
                if kind == 8 && len == 10 {
                    let o = &options[2..10];
                    return Some((
                        u32::from_be_bytes([o[0], o[1], o[2], o[3]]),
                        u32::from_be_bytes([o[4], o[5], o[6], o[7]]),
                    ));
                }
                options = &options[len..];
            }
        }
    }
    None
}

/// A class's round trips: the last [`WINDOW`] samples and its counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassRtt {
    /// The last samples in µs, oldest overwritten first.
    pub window: Vec<u32>,
    /// Where the next sample goes once the window is full.
    next: usize,
    /// Samples ever.
    pub samples: u64,
    /// Retransmissions seen.
    pub retransmits: u64,
}

/// Samples a class keeps for its percentiles.
pub const WINDOW: usize = 256;

impl ClassRtt {
    /// Adds a sample of `ns`.
    pub fn add(&mut self, ns: u64) {
        let us = u32::try_from(ns / 1000).unwrap_or(u32::MAX);
        if self.window.len() < WINDOW {
            self.window.push(us);
        } else {
            self.window[self.next] = us;
            self.next = (self.next + 1) % WINDOW;
        }
        self.samples += 1;
    }

    /// Adds another worker's record of the same class.
    pub fn merge(&mut self, other: &Self) {
        self.window.extend_from_slice(&other.window);
        self.samples += other.samples;
        self.retransmits += other.retransmits;
    }

    /// The `q`-quantile (0..=1) of the window by nearest rank, in µs (`None`: no sample).
    #[must_use]
    pub fn quantile(&self, q: f64) -> Option<u32> {
        let mut sorted = self.window.clone();
        sorted.sort_unstable();
        let rank = ((sorted.len() as f64) * q).ceil() as usize;
        sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::parse::parse;

    /// An Ethernet + IPv4 + TCP frame from `src` to `dst` with the timestamp option (TSval,
    /// TSecr) if given and `payload` bytes.
    pub(crate) fn tcp(
        src: [u8; 4],
        dst: [u8; 4],
        ports: (u16, u16),
        seq: u32,
        flags: u8,
        ts: Option<(u32, u32)>,
        payload: usize,
    ) -> Vec<u8> {
        let opts = if ts.is_some() { 12 } else { 0 };
        let ip_len = 20 + 20 + opts + payload;
        let mut f = vec![0u8; 14 + ip_len];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[16..18].copy_from_slice(&(ip_len as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        let t = 34;
        f[t..t + 2].copy_from_slice(&ports.0.to_be_bytes());
        f[t + 2..t + 4].copy_from_slice(&ports.1.to_be_bytes());
        f[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
        f[t + 12] = (((20 + opts) / 4) << 4) as u8;
        f[t + 13] = flags;
        if let Some((val, ecr)) = ts {
            f[t + 20..t + 22].copy_from_slice(&[1, 1]);
            f[t + 22..t + 24].copy_from_slice(&[8, 10]);
            f[t + 24..t + 28].copy_from_slice(&val.to_be_bytes());
            f[t + 28..t + 32].copy_from_slice(&ecr.to_be_bytes());
        }
        f
    }

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];
    pub(crate) const ACK: u8 = 0x10;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn an_echoed_timestamp_is_one_round_trip_of_the_class_that_carried_it() {
        let mut t = RttTracker::new();
        let down: ClassKey = (1, ClassId::new(1, 0x10));
        let up: ClassKey = (0, ClassId::new(1, 0x20));
        let seg = |t: &RttTracker, f: &[u8]| t.segment(f, &parse(f)).unwrap();
        // Data A→B at 0 ms carries TSval 100; a second segment with the same TSval at 1 ms
        // does not move the noted time (pping keeps the first).
        let d1 = tcp(A, B, (80, 5000), 1000, ACK, Some((100, 7)), 1400);
        let s = seg(&t, &d1);
        assert_eq!((s.len, s.timestamps), (1400, Some((100, 7))));
        assert_eq!(t.observe(&s, Some(down), at(0)), Observed::default());
        let d2 = tcp(A, B, (80, 5000), 2400, ACK, Some((100, 7)), 1400);
        t.observe(&seg(&t, &d2), Some(down), at(1));
        // B's ACK at 12 ms echoes it: 12 ms for A's class. An echo of something else is no
        // sample.
        let other = tcp(B, A, (5000, 80), 1, ACK, Some((900, 99)), 0);
        assert_eq!(t.observe(&seg(&t, &other), Some(up), at(5)).sample, None);
        let ack = tcp(B, A, (5000, 80), 1, ACK, Some((901, 100)), 0);
        let o = t.observe(&seg(&t, &ack), Some(up), at(12));
        assert_eq!(o.sample, Some((down, 12_000_000)));
        // Echoed once: the same echo again is nothing.
        assert_eq!(t.observe(&seg(&t, &ack), Some(up), at(13)).sample, None);
        // And B's TSval 900 comes back in A's next segment: a sample for B's class.
        let d3 = tcp(A, B, (80, 5000), 3800, ACK, Some((101, 900)), 1400);
        assert_eq!(
            t.observe(&seg(&t, &d3), Some(down), at(20)).sample,
            Some((up, 15_000_000))
        );
    }

    #[test]
    fn only_the_first_segment_carrying_a_tsval_is_noted() {
        let mut t = RttTracker::new();
        let down: ClassKey = (1, ClassId::new(1, 0x10));
        let seg = |t: &RttTracker, f: &[u8]| t.segment(f, &parse(f)).unwrap();
        // TSval 100 at 0 ms is noted; TSval 101 at 1 ms waits (one at a time).
        let d1 = tcp(A, B, (80, 5000), 1000, ACK, Some((100, 7)), 1400);
        t.observe(&seg(&t, &d1), Some(down), at(0));
        let d2 = tcp(A, B, (80, 5000), 2400, ACK, Some((101, 7)), 1400);
        t.observe(&seg(&t, &d2), Some(down), at(1));
        let echo100 = tcp(B, A, (5000, 80), 1, ACK, Some((900, 100)), 0);
        assert_eq!(
            t.observe(&seg(&t, &echo100), None, at(10)).sample,
            Some((down, 10_000_000))
        );
        // A later segment still carrying 101 is not its first carrier: noting it would time
        // the echo of the segment sent at 1 ms from 10.5 ms, 0.5 ms where the truth is 10.
        let d3 = tcp(A, B, (80, 5000), 3800, ACK, Some((101, 900)), 1400);
        t.observe(
            &seg(&t, &d3),
            Some(down),
            at(10) + htb_core::Duration::from_micros(500),
        );
        let echo101 = tcp(B, A, (5000, 80), 1, ACK, Some((901, 101)), 0);
        assert_eq!(t.observe(&seg(&t, &echo101), None, at(11)).sample, None);
        // The next new TSval is noted again.
        let d4 = tcp(A, B, (80, 5000), 5200, ACK, Some((102, 901)), 1400);
        t.observe(&seg(&t, &d4), Some(down), at(12));
        let echo102 = tcp(B, A, (5000, 80), 1, ACK, Some((902, 102)), 0);
        assert_eq!(
            t.observe(&seg(&t, &echo102), None, at(22)).sample,
            Some((down, 10_000_000))
        );
    }

    #[test]
    fn a_handshake_without_timestamps_gives_both_sides_a_sample() {
        let mut t = RttTracker::new();
        let (c, s) = ((0, ClassId::new(1, 1)), (1, ClassId::new(1, 2)));
        let seg = |t: &RttTracker, f: &[u8]| t.segment(f, &parse(f)).unwrap();
        let syn = tcp(A, B, (40000, 80), 7, 0x02, None, 0);
        t.observe(&seg(&t, &syn), Some(c), at(0));
        let synack = tcp(B, A, (80, 40000), 70, 0x12, None, 0);
        assert_eq!(
            t.observe(&seg(&t, &synack), Some(s), at(30)).sample,
            Some((c, 30_000_000))
        );
        let ack = tcp(A, B, (40000, 80), 8, ACK, None, 0);
        assert_eq!(
            t.observe(&seg(&t, &ack), Some(c), at(31)).sample,
            Some((s, 1_000_000))
        );
    }

    #[test]
    fn data_below_the_highest_seen_is_a_retransmission() {
        let mut t = RttTracker::new();
        let k = (0, ClassId::new(1, 1));
        let seg = |t: &RttTracker, f: &[u8]| t.segment(f, &parse(f)).unwrap();
        let mut retransmits = 0;
        for seq in [1000, 2000, 3000, 2000, 4000, 1000] {
            let f = tcp(A, B, (80, 5000), seq, ACK, None, 1000);
            retransmits += u32::from(t.observe(&seg(&t, &f), Some(k), at(0)).retransmit);
        }
        assert_eq!(retransmits, 2);
        // Sequence numbers wrap.
        let mut t = RttTracker::new();
        for seq in [u32::MAX - 999, 0] {
            let f = tcp(A, B, (80, 5000), seq, ACK, None, 1000);
            assert!(!t.observe(&seg(&t, &f), Some(k), at(0)).retransmit);
        }
    }

    #[test]
    fn malformed_segments_are_not_read() {
        let t = RttTracker::new();
        let mut f = tcp(A, B, (80, 5000), 1, ACK, Some((1, 2)), 10);
        // A data offset beyond the frame, then below 20 bytes.
        f[34 + 12] = 15 << 4;
        assert_eq!(t.segment(&f, &parse(&f)), None);
        f[34 + 12] = 4 << 4;
        assert_eq!(t.segment(&f, &parse(&f)), None);
        // A timestamp option cut short.
        assert_eq!(timestamps(&[1, 1, 8, 10, 0, 0]), None);
        assert_eq!(timestamps(&[8, 1]), None);
    }

    #[test]
    fn percentiles_come_from_the_window() {
        let mut c = ClassRtt::default();
        assert_eq!(c.quantile(0.5), None);
        for ms in 1..=100 {
            c.add(ms * 1_000_000);
        }
        assert_eq!(c.quantile(0.5), Some(50_000));
        assert_eq!(c.quantile(0.95), Some(95_000));
        for _ in 0..WINDOW {
            c.add(7_000);
        }
        assert_eq!(c.quantile(0.95), Some(7), "old samples left the window");
        assert_eq!(c.samples, 100 + WINDOW as u64);
    }
}
