//! `tbf` (`net/sched/sch_tbf.c`): a token bucket in front of a byte-limited fifo. A packet
//! leaves when the bucket (`burst` bytes deep, filled at `rate`) and, with `peakrate`, a second
//! bucket (`mtu` bytes deep, filled at `peakrate`) hold its length; otherwise the leaf holds it
//! back and says when it may go ([`Tbf::throttled_until`]), which the scheduler waits for as
//! for `cake`'s shaper. The tokens are kept in nanoseconds, as `tbf_dequeue` keeps them.
//!
//! Its spec: `tbf rate R burst B (limit L | latency T) [peakrate P mtu M]`, tc's options, the
//! latency turned into a limit as tc's `tbf_parse_opt` turns it.

use core::fmt;

use super::fifo::Fifo;
use super::options::{LeafOption, OptionValue};
use super::pool::PacketPool;
use crate::rate::Rate;
use crate::time::Duration;
use crate::{CheckError, Packet};

/// `tbf`'s options, as tc's command line gives them.
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TbfSpec {
    /// The bucket's fill rate (required).
    pub rate: Option<Rate>,
    /// The bucket's depth in bytes, the largest burst at line rate (`burst`, `buffer`,
    /// `maxburst`; required).
    pub burst: Option<u32>,
    /// Bytes queued at most (the inner bfifo's limit). Exactly one of `limit` and `latency`.
    pub limit: Option<u32>,
    /// The longest a packet may wait: tc makes the limit `rate × latency + burst`.
    pub latency: Option<Duration>,
    /// The second bucket's fill rate, above `rate`: how fast a burst leaves.
    pub peakrate: Option<Rate>,
    /// The second bucket's depth in bytes (`mtu`, `minburst`; required with `peakrate`).
    pub mtu: Option<u32>,
}

impl TbfSpec {
    /// Its options (fields), for readers of text.
    pub const OPTIONS: [LeafOption; 6] = [
        LeafOption::new("rate", OptionValue::Rate),
        LeafOption::new("burst", OptionValue::Size),
        LeafOption::new("limit", OptionValue::Size),
        LeafOption::new("latency", OptionValue::Time),
        LeafOption::new("peakrate", OptionValue::Rate),
        LeafOption::new("mtu", OptionValue::Size),
    ];

    /// The parameters in effect: tc's checks and its latency-to-limit (`tbf_parse_opt`), then
    /// the kernel's (`tbf_change`). tc sends the whole option block, so a change is this too.
    ///
    /// # Errors
    /// [`TbfError`] for what tc or the kernel refuses.
    pub fn resolve(&self) -> Result<TbfConfig, TbfError> {
        let rate = self
            .rate
            .filter(|r| !r.is_zero())
            .ok_or(TbfError::Needs("rate"))?;
        let burst = self
            .burst
            .filter(|&b| b != 0)
            .ok_or(TbfError::Needs("burst"))?;
        let peakrate = self.peakrate.filter(|r| !r.is_zero());
        let mtu = match (peakrate, self.mtu.filter(|&m| m != 0)) {
            (Some(_), None) => return Err(TbfError::PeakWithoutMtu),
            (Some(_), Some(mtu)) => mtu,
            (None, _) => 0,
        };
        let limit = match (self.limit, self.latency) {
            (Some(_), Some(_)) => return Err(TbfError::LimitAndLatency),
            (None, None) => return Err(TbfError::Needs("limit or latency")),
            (Some(limit), None) => limit,
            // tc: rate × latency + burst, or less through the peak bucket.
            (None, Some(latency)) => {
                let by_rate = rate.bytes_in(latency).saturating_add(u64::from(burst));
                let limit = match peakrate {
                    Some(peak) => {
                        by_rate.min(peak.bytes_in(latency).saturating_add(u64::from(mtu)))
                    }
                    None => by_rate,
                };
                u32::try_from(limit).unwrap_or(u32::MAX)
            }
        };
        if let Some(peak) = peakrate
            && peak <= rate
        {
            // tbf_change: "peakrate %llu is lower than or equals to rate %llu !"
            return Err(TbfError::PeakNotAboveRate { peak, rate });
        }
        let config = TbfConfig {
            rate,
            burst,
            limit,
            peakrate,
            mtu,
        };
        if config.max_size() == 0 {
            return Err(TbfError::Needs("burst"));
        }
        Ok(config)
    }
}

/// Why a `tbf` was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TbfError {
    /// A required option left out (or zero).
    Needs(&'static str),
    /// `peakrate` without `mtu`.
    PeakWithoutMtu,
    /// Both `limit` and `latency`.
    LimitAndLatency,
    /// `peakrate` not above `rate`.
    PeakNotAboveRate {
        /// The peak rate.
        peak: Rate,
        /// The rate.
        rate: Rate,
    },
}

impl fmt::Display for TbfError {
    /// tc's words where tc checks (`tbf_parse_opt`), the kernel's where it does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Needs(what) => write!(f, "tbf: \"{what}\" is required"),
            Self::PeakWithoutMtu => {
                f.write_str("tbf: when \"peakrate\" is specified, \"mtu\" must also be specified.")
            }
            Self::LimitAndLatency => {
                f.write_str("tbf: specifying both \"latency\" and \"limit\" is not allowed")
            }
            Self::PeakNotAboveRate { peak, rate } => {
                write!(
                    f,
                    "tbf: peakrate {peak} is lower than or equals to rate {rate}"
                )
            }
        }
    }
}

impl core::error::Error for TbfError {}

/// `tbf`'s parameters in effect.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TbfConfig {
    /// The bucket's fill rate.
    pub rate: Rate,
    /// The bucket's depth in bytes.
    pub burst: u32,
    /// Bytes queued at most.
    pub limit: u32,
    /// The peak bucket's fill rate.
    pub peakrate: Option<Rate>,
    /// The peak bucket's depth in bytes (0 without `peakrate`).
    pub mtu: u32,
}

impl TbfConfig {
    /// The spec that resolves back to exactly this (the limit given, not a latency).
    #[must_use]
    pub fn to_spec(&self) -> TbfSpec {
        TbfSpec {
            rate: Some(self.rate),
            burst: Some(self.burst),
            limit: Some(self.limit),
            latency: None,
            peakrate: self.peakrate,
            mtu: self.peakrate.map(|_| self.mtu),
        }
    }

    /// The largest packet it can ever send (`q->max_size`, `tbf_change`): the bucket's depth,
    /// the peak bucket's with a peak rate, and without one what the rate sends in the longest
    /// time the kernel's 32-bit bucket holds.
    #[must_use]
    pub fn max_size(&self) -> u32 {
        let cap = match self.peakrate {
            Some(_) => u64::from(self.mtu),
            None => self
                .rate
                .bytes_in(Duration::from_nanos(u64::from(u32::MAX))),
        };
        u32::try_from(u64::from(self.burst).min(cap)).unwrap_or(u32::MAX)
    }

    /// The longest a packet waits when the queue is full, as `tbf_print_opt` computes it
    /// (`lat`); `None` when the limit is below what the bucket sends at once (tc then prints the
    /// limit).
    #[must_use]
    pub fn latency(&self) -> Option<Duration> {
        let wait = |rate: Rate, bucket: u32| {
            rate.time_for_bytes(u64::from(self.limit))
                .as_nanos()
                .checked_sub(rate.time_for_bytes(u64::from(bucket)).as_nanos())
        };
        let by_rate = wait(self.rate, self.burst);
        let by_peak = self.peakrate.and_then(|p| wait(p, self.mtu));
        by_rate.max(by_peak).map(Duration::from_nanos)
    }
}

/// A running `tbf`: its queue and its two buckets (`struct tbf_sched_data`).
#[derive(Clone, Debug)]
pub(crate) struct Tbf {
    config: TbfConfig,
    /// The inner qdisc: a bfifo of `limit` bytes (`fifo_create_dflt`), which counts what it
    /// holds.
    queue: Fifo,
    /// Packets dropped: on arrival for being larger than the bucket (tbf's own `qdisc_drop`),
    /// and over the bfifo's limit.
    drops: u64,
    /// Dequeues that found the head packet short of tokens and set the watchdog
    /// (`qdisc_qstats_overlimit` in `tbf_dequeue`).
    overlimits: u64,
    /// Largest packet sent (`q->max_size`); a larger one is dropped on arrival.
    max_size: u32,
    /// The bucket's depth in ns at `rate` (`q->buffer`).
    buffer: i64,
    /// The peak bucket's depth in ns at `peakrate` (`q->mtu`).
    mtu: i64,
    /// Tokens of each bucket in ns (`q->tokens`, `q->ptokens`).
    tokens: i64,
    ptokens: i64,
    /// When they were last counted (`q->t_c`).
    t_c: u64,
    /// When the head packet will have its tokens, as the last dequeue that found too few
    /// computed it (the watchdog's time).
    next_send: u64,
}

/// `psched_l2t_ns`: ns to send `len` bytes at `rate`.
fn l2t(rate: Rate, len: u64) -> i64 {
    i64::try_from(rate.time_for_bytes(len).as_nanos()).unwrap_or(i64::MAX)
}

impl Tbf {
    /// `tbf_init` with `config` at `now`: both buckets full.
    pub(crate) fn new(config: TbfConfig, now: u64) -> Self {
        let mut tbf = Self {
            config,
            queue: Fifo::new(config.limit),
            drops: 0,
            overlimits: 0,
            max_size: 0,
            buffer: 0,
            mtu: 0,
            tokens: 0,
            ptokens: 0,
            t_c: now,
            next_send: now,
        };
        tbf.apply(config, now);
        tbf
    }

    /// `tbf_change`: the new parameters, the buckets full again, queued packets kept (the
    /// fifo's new limit applies to arrivals, as `fifo_set_limit` does).
    fn apply(&mut self, config: TbfConfig, now: u64) {
        self.config = config;
        self.queue.set_limit(config.limit);
        self.max_size = config.max_size();
        self.buffer = l2t(config.rate, u64::from(config.burst));
        self.mtu = config
            .peakrate
            .map_or(0, |peak| l2t(peak, u64::from(config.mtu)));
        self.tokens = self.buffer;
        self.ptokens = self.mtu;
        self.t_c = now;
    }

    pub(crate) fn reconfigure(&mut self, config: TbfConfig, now: u64) {
        self.apply(config, now);
    }

    pub(crate) fn config(&self) -> TbfConfig {
        self.config
    }

    /// `tbf_enqueue`: a packet larger than the bucket can never be sent; the kernel segments a
    /// GSO packet and drops any other (`qdisc_drop`), and with no GSO here every such packet is
    /// dropped and counted. Otherwise the bfifo takes it or refuses it at its limit
    /// (`bfifo_enqueue`).
    pub(crate) fn enqueue<P: Packet>(
        &mut self,
        pool: &mut PacketPool<P>,
        packet: P,
        now: u64,
    ) -> Result<(), P> {
        if packet.len_bytes() > self.max_size {
            self.drops += 1;
            return Err(packet);
        }
        self.queue
            .enqueue(pool, packet, now, true)
            .inspect_err(|_| self.drops += 1)
    }

    /// `tbf_dequeue`: the head packet if both buckets hold its length, else nothing, and the
    /// time they will ([`throttled_until`](Self::throttled_until)).
    pub(crate) fn dequeue<P: Packet>(&mut self, pool: &mut PacketPool<P>, now: u64) -> Option<P> {
        let len = u64::from(self.queue.head_len(pool)?);
        let elapsed = i64::try_from(now.saturating_sub(self.t_c)).unwrap_or(i64::MAX);
        let mut toks = elapsed.min(self.buffer);
        let mut ptoks = 0;
        if let Some(peak) = self.config.peakrate {
            ptoks = toks.saturating_add(self.ptokens).min(self.mtu);
            ptoks -= l2t(peak, len);
        }
        toks = toks.saturating_add(self.tokens).min(self.buffer);
        toks -= l2t(self.config.rate, len);
        if (toks | ptoks) >= 0 {
            let packet = self.queue.dequeue(pool)?;
            self.t_c = now;
            self.tokens = toks;
            self.ptokens = ptoks;
            return Some(packet);
        }
        // qdisc_watchdog_schedule_ns(now + max(-toks, -ptoks)), then qdisc_qstats_overlimit:
        // one count per dequeue the buckets refuse, none for an empty queue.
        let wait = (-toks).max(-ptoks);
        self.next_send = now.saturating_add(wait.unsigned_abs());
        self.overlimits += 1;
        None
    }

    /// When a leaf that held its packets back may send: the watchdog's time.
    pub(crate) fn throttled_until(&self) -> Option<u64> {
        (self.queue.len() > 0).then_some(self.next_send)
    }

    /// Every packet out (`tbf_reset`, whose buckets the next change or packet refills).
    pub(crate) fn purge<P: Packet>(&mut self, pool: &mut PacketPool<P>, out: &mut impl FnMut(P)) {
        self.queue.purge(pool, out);
    }

    pub(crate) fn len(&self) -> u32 {
        self.queue.len()
    }

    pub(crate) fn backlog(&self) -> u64 {
        self.queue.backlog()
    }

    /// Packets dropped: over the limit, and larger than the bucket.
    pub(crate) fn drops(&self) -> u64 {
        self.drops
    }

    /// Dequeues the buckets refused (`qstats.overlimits`).
    pub(crate) fn overlimits(&self) -> u64 {
        self.overlimits
    }

    pub(crate) fn check<P: Packet>(&self, pool: &PacketPool<P>) -> Result<(), CheckError> {
        if self.tokens > self.buffer || self.ptokens > self.mtu {
            return Err(CheckError(alloc::format!(
                "tbf holds {} / {} ns of tokens in buckets of {} / {}",
                self.tokens,
                self.ptokens,
                self.buffer,
                self.mtu
            )));
        }
        self.queue.check(pool)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::leaf::LeafConfig;
    use crate::time::Instant;
    use crate::{ClassId, ClassSpec, Scheduler, SchedulerConfig};

    const MS: u64 = 1_000_000;

    #[derive(Debug)]
    struct Pkt(u32);

    impl Packet for Pkt {
        fn len_bytes(&self) -> u32 {
            self.0
        }
    }

    fn config(rate_kbit: u64, burst: u32, limit: u32) -> TbfConfig {
        TbfSpec {
            rate: Some(Rate::from_kbit(rate_kbit)),
            burst: Some(burst),
            limit: Some(limit),
            ..TbfSpec::default()
        }
        .resolve()
        .unwrap()
    }

    /// A 100 Mbit/s class with `tbf` as its leaf.
    fn htb(tbf: TbfConfig) -> (Scheduler<Pkt>, ClassId) {
        let mut htb = Scheduler::new(SchedulerConfig::default());
        let class = ClassId::new(1, 1);
        let added = htb
            .add_class(
                Instant::ZERO,
                class,
                None,
                &ClassSpec::new(Rate::from_mbit(100)),
            )
            .unwrap();
        assert!(added.purged.is_empty());
        let grafted = htb
            .set_leaf(Instant::ZERO, class, Some(&LeafConfig::Tbf(tbf)))
            .unwrap();
        assert!(grafted.purged.is_empty());
        (htb, class)
    }

    /// Offers `len`-byte packets every `gap` ns until `end`, sending whenever the scheduler
    /// says; returns each packet sent with its time, and the packets refused or dropped.
    fn run(
        htb: &mut Scheduler<Pkt>,
        class: ClassId,
        len: u32,
        gap: u64,
        end: u64,
        limit: u32,
    ) -> (Vec<(u64, u32)>, u64, u64) {
        let (mut now, mut next_in) = (0u64, 0u64);
        let (mut sent, mut dropped, mut offered) = (Vec::new(), 0u64, 0u64);
        while now < end {
            while next_in <= now && next_in < end {
                offered += 1;
                if htb
                    .enqueue(Instant::from_nanos(next_in), class, Pkt(len))
                    .is_err()
                {
                    dropped += 1;
                }
                next_in += gap;
            }
            while let Some(p) = htb.dequeue(Instant::from_nanos(now)) {
                sent.push((now, p.0));
            }
            dropped += htb.drain_dropped().count() as u64;
            htb.check().unwrap();
            let backlog = htb.leaf_stats(class).unwrap().backlog;
            assert!(
                backlog <= u64::from(limit),
                "{backlog} B queued over {limit}"
            );
            let wake = htb.next_wakeup().map_or(u64::MAX, Instant::as_nanos);
            assert!(
                wake > now || htb.is_empty(),
                "woken at once at {now}: would spin"
            );
            now = wake.min(if next_in < end { next_in } else { end });
        }
        let queued = u64::from(htb.leaf_stats(class).unwrap().qlen);
        assert_eq!(
            offered,
            sent.len() as u64 + dropped + queued,
            "every packet once"
        );
        (sent, dropped, queued)
    }

    #[test]
    fn latency_becomes_tcs_limit_and_bad_options_are_refused() {
        // tc-testing 239b: burst 1500 rate 20000 (bit/s) latency 100ms.
        let c = TbfSpec {
            rate: Some(Rate::from_bits_per_sec(20_000)),
            burst: Some(1500),
            latency: Some(Duration::from_millis(100)),
            ..TbfSpec::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(c.limit, 2500 / 10 + 1500);
        assert_eq!(c.latency(), Some(Duration::from_millis(100)));
        assert_eq!(c.to_spec().resolve(), Ok(c));
        // 6430: a limit below the burst has no latency; tc prints the limit.
        assert_eq!(config(10, 1500, 1000).latency(), None);
        let spec = |f: fn(&mut TbfSpec)| {
            let mut s = TbfSpec {
                rate: Some(Rate::from_kbit(1000)),
                burst: Some(10_000),
                limit: Some(20_000),
                ..TbfSpec::default()
            };
            f(&mut s);
            s.resolve()
        };
        assert_eq!(spec(|s| s.rate = None), Err(TbfError::Needs("rate")));
        assert_eq!(spec(|s| s.burst = Some(0)), Err(TbfError::Needs("burst")));
        assert_eq!(
            spec(|s| s.latency = Some(Duration::from_millis(1))),
            Err(TbfError::LimitAndLatency)
        );
        assert_eq!(
            spec(|s| s.limit = None),
            Err(TbfError::Needs("limit or latency"))
        );
        assert_eq!(
            spec(|s| s.peakrate = Some(Rate::from_kbit(2000))),
            Err(TbfError::PeakWithoutMtu)
        );
        assert!(matches!(
            spec(|s| {
                s.peakrate = Some(Rate::from_kbit(1000));
                s.mtu = Some(1500);
            }),
            Err(TbfError::PeakNotAboveRate { .. })
        ));
        let peak = spec(|s| {
            s.peakrate = Some(Rate::from_kbit(2000));
            s.mtu = Some(1500);
        })
        .unwrap();
        assert_eq!(peak.max_size(), 1500, "the smaller bucket bounds a packet");
        assert_eq!(peak.to_spec().resolve(), Ok(peak));
    }

    #[test]
    fn under_a_fast_class_it_sends_its_rate_bursting_at_most_burst() {
        let (burst, limit) = (10_000u32, 30_000u32);
        let (mut htb, class) = htb(config(1000, burst, limit));
        // Two seconds of 1000-byte packets offered at 4 Mbit/s to a 1 Mbit/s bucket.
        let end = 2_000 * MS;
        let (sent, dropped, _) = run(&mut htb, class, 1000, 2 * MS, end, limit);
        let bytes: u64 = sent.iter().map(|&(_, len)| u64::from(len)).sum();
        // A full bucket, then the rate: 10 000 + 250 000 bytes.
        assert!(
            (255_000..=261_000).contains(&bytes),
            "{bytes} B in 2 s through 1 Mbit/s with a 10 kB bucket"
        );
        assert!(dropped > 0, "the 30 kB limit refused the excess");
        // Never more than the bucket plus the rate over any span.
        let rate = Rate::from_kbit(1000);
        for (i, &(start, _)) in sent.iter().enumerate() {
            let mut in_span = 0u64;
            for &(t, len) in &sent[i..] {
                in_span += u64::from(len);
                let allowed = u64::from(burst) + rate.bytes_in(Duration::from_nanos(t - start));
                assert!(in_span <= allowed, "{in_span} B from {start} to {t} ns");
            }
        }
        assert!(
            htb.stats().leaf_wakeups > 100,
            "it held packets back and said when"
        );
    }

    #[test]
    fn a_burst_of_arrivals_leaves_the_bucket_at_once_then_paced() {
        let (mut htb, class) = htb(config(8_000, 5_000, 100_000));
        for _ in 0..20 {
            htb.enqueue(Instant::ZERO, class, Pkt(1000)).unwrap();
        }
        let mut at_zero = 0;
        while htb.dequeue(Instant::ZERO).is_some() {
            at_zero += 1;
        }
        assert_eq!(at_zero, 5, "the 5 kB bucket holds five 1000-byte packets");
        assert_eq!(
            htb.leaf_stats(class).unwrap().overlimits,
            1,
            "the dequeue that found the bucket empty"
        );
        // 1000 bytes at 1 MB/s: one every millisecond, and the scheduler knows when.
        assert_eq!(htb.next_wakeup(), Some(Instant::from_nanos(MS)));
        assert!(htb.dequeue(Instant::from_nanos(MS - 1)).is_none());
        assert!(htb.dequeue(Instant::from_nanos(MS)).is_some());
    }

    #[test]
    fn peakrate_spaces_a_burst() {
        let c = TbfSpec {
            rate: Some(Rate::from_kbit(1000)),
            burst: Some(20_000),
            limit: Some(50_000),
            peakrate: Some(Rate::from_kbit(8000)),
            mtu: Some(1000),
            ..TbfSpec::default()
        }
        .resolve()
        .unwrap();
        let (mut htb, class) = htb(c);
        let (sent, _, _) = run(&mut htb, class, 1000, 100_000, 20 * MS, 50_000);
        // At most one 1000-byte packet per ms (8 Mbit/s), though the bucket holds twenty.
        for pair in sent.windows(2) {
            assert!(pair[1].0 - pair[0].0 >= MS, "{pair:?}");
        }
        assert!(sent.len() >= 19, "{} sent in 20 ms at 8 Mbit/s", sent.len());
    }

    #[test]
    fn a_packet_larger_than_the_bucket_is_dropped_and_counted() {
        let (mut htb, class) = htb(config(1000, 1500, 10_000));
        let refused = htb.enqueue(Instant::ZERO, class, Pkt(1501)).unwrap_err();
        assert_eq!(refused.packet.0, 1501, "handed back");
        htb.enqueue(Instant::ZERO, class, Pkt(1500)).unwrap();
        let stats = htb.leaf_stats(class).unwrap();
        assert_eq!((stats.drops, stats.qlen), (1, 1));
        assert_eq!(htb.dequeue(Instant::ZERO).map(|p| p.0), Some(1500));
    }

    #[test]
    fn each_dequeue_the_buckets_refuse_counts_one_overlimit() {
        let mut tbf = Tbf::new(config(1000, 2000, 10_000), 0);
        let mut pool = PacketPool::default();
        assert!(tbf.dequeue(&mut pool, 0).is_none());
        assert_eq!(tbf.overlimits(), 0, "an empty queue holds nothing back");
        for _ in 0..3 {
            tbf.enqueue(&mut pool, Pkt(1000), 0).unwrap();
        }
        assert!(tbf.dequeue(&mut pool, 0).is_some());
        assert!(tbf.dequeue(&mut pool, 0).is_some());
        assert_eq!(tbf.overlimits(), 0, "a packet sent counts nothing");
        // The 2 kB bucket is empty: 1000 B more take 8 ms at 125 kB/s.
        for attempt in 1..=3 {
            assert!(tbf.dequeue(&mut pool, MS).is_none());
            assert_eq!(tbf.overlimits(), attempt, "once per refused dequeue");
        }
        let at = tbf.throttled_until().unwrap();
        assert_eq!(at, 8 * MS);
        assert!(tbf.dequeue(&mut pool, at).is_some());
        assert!(tbf.dequeue(&mut pool, at).is_none(), "now empty");
        assert_eq!(tbf.overlimits(), 3, "neither the send nor the empty queue");
    }

    #[test]
    fn change_refills_the_buckets_and_keeps_the_queue() {
        let mut tbf = Tbf::new(config(1000, 2000, 10_000), 0);
        let mut pool = PacketPool::default();
        for _ in 0..4 {
            tbf.enqueue(&mut pool, Pkt(1000), 0).unwrap();
        }
        assert!(tbf.dequeue(&mut pool, 0).is_some());
        assert!(tbf.dequeue(&mut pool, 0).is_some());
        assert!(tbf.dequeue(&mut pool, 0).is_none(), "the bucket is empty");
        assert_eq!(tbf.throttled_until(), Some(8 * MS), "1000 B at 125 kB/s");
        tbf.reconfigure(config(1000, 3000, 1000), 0);
        assert_eq!(tbf.len(), 2, "queued packets stay");
        assert!(
            tbf.dequeue(&mut pool, 0).is_some(),
            "the new bucket is full"
        );
        assert!(
            tbf.enqueue(&mut pool, Pkt(1000), 0).is_err(),
            "the new limit"
        );
        tbf.check(&pool).unwrap();
    }
}
