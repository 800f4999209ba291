//! Leaf queue disciplines: what holds a leaf class's packets while it waits for tokens, and
//! decides which to send first and which to drop — the child qdisc of an HTB leaf class.
//!
//! HTB asks its leaves what `sch_htb.c` asks its child qdiscs: take this packet, give me the
//! next one, how many packets and bytes do you hold. A leaf may drop packets on either call (a
//! full queue, CoDel at the head, a batch from the fattest flow); those go to the scheduler's
//! drop list and come back to the caller through
//! [`Scheduler::drain_dropped`](crate::Scheduler::drain_dropped), so every packet handed to
//! the scheduler is returned exactly once. Every leaf of a scheduler shares one
//! [`LeafStore`]: the packet pool and the flow table, which grow with the backlog and the
//! active flows, never per class.
//!
//! - [`LeafKind::Pfifo`], [`LeafKind::Bfifo`]: `sch_fifo.c`.
//! - [`LeafKind::Sfq`]: `sch_sfq.c` (module `sfq`).
//! - [`LeafKind::FqCodel`]: `sch_fq_codel.c` with `codel.h` (modules `fq_codel`, `codel`).
//! - [`LeafKind::Cake`]: `sch_cake.c` (module `cake`); with `bandwidth` it shapes too, so it
//!   may hold packets back ([`Scheduler`](crate::Scheduler) waits for it).
//! - [`LeafKind::Tbf`]: `sch_tbf.c` (module `tbf`): a token bucket, which holds packets back
//!   as `cake`'s shaper does.

mod cake;
mod codel;
mod counts;
mod fifo;
mod flows;
mod fq_codel;
mod options;
mod pool;
mod port;
mod random;
mod sfq;
mod spec;
mod tbf;

use crate::CheckError;
use alloc::vec::Vec;

pub use cake::{
    AckFilter, AtmMode, CakeConfig, CakeSpec, CakeStats, CakeTinStats, DiffservMode, FlowMode,
    TcpAck,
};
pub use fifo::DEFAULT_TXQUEUELEN;
pub use fq_codel::{FQ_CODEL_QUANTUM_MAX, FqCodelConfig, FqCodelSpec, FqCodelStats};
pub use options::{LeafOption, OptionValue};
pub use pool::PacketPool;
pub use port::DEFAULT_PSCHED_MTU;
pub use sfq::{SFQ_MAX_DEPTH, SFQ_MAX_FLOWS, SfqConfig, SfqSpec};
pub use spec::{LeafConfig, LeafError, LeafKind, LeafSpec};
pub use tbf::{TbfConfig, TbfError, TbfSpec};

use self::cake::{Cake, CakeStore};
use self::fifo::Fifo;
use self::flows::FlowTable;
use self::fq_codel::FqCodel;
use self::sfq::Sfq;
use self::tbf::Tbf;
use crate::Packet;
use crate::time::Instant;

/// Counts the packets of `list` and their bytes.
fn count_list<P: Packet>(packets: &PacketPool<P>, list: pool::PacketList) -> (u32, u64) {
    packets
        .iter(list)
        .fold((0, 0), |(n, b), p| (n + 1, b + u64::from(p.len_bytes())))
}

/// Storage shared by every leaf of one scheduler.
#[derive(Debug)]
pub struct LeafStore<P> {
    pub(crate) packets: PacketPool<P>,
    pub(crate) flows: FlowTable,
    /// `cake`'s queue and host records.
    pub(crate) cake: CakeStore,
    /// Packets leaves dropped, waiting to be handed back.
    pub(crate) dropped: Vec<P>,
    /// Room for `sfq`'s rehash, kept between uses.
    pub(crate) scratch: Vec<(P, u64)>,
    /// The disciplines unstarted leaves get on their first packet ([`Leaf::Unstarted`]): the
    /// scheduler's default leaf, and each one it had before (a few: it rarely changes).
    pub(crate) starts: Vec<LeafConfig>,
    /// What keys `sfq`'s and `cake`'s hashes (the scheduler's seed).
    pub(crate) seed: u64,
}

impl<P> Default for LeafStore<P> {
    fn default() -> Self {
        Self {
            packets: PacketPool::default(),
            flows: FlowTable::default(),
            cake: CakeStore::default(),
            dropped: Vec::new(),
            scratch: Vec::new(),
            starts: Vec::new(),
            seed: 0,
        }
    }
}

impl<P> LeafStore<P> {
    /// Hands every packet of flow `idx` to `out` and leaves the flow empty, still allocated
    /// and linked (the `*_reset` of `sfq` and `fq_codel`, one flow).
    pub(crate) fn empty_flow(&mut self, idx: u32, out: &mut impl FnMut(P)) -> &mut flows::Flow {
        let flow = self.flows.get_mut(idx);
        while let Some((packet, _)) = self.packets.pop_front(&mut flow.packets) {
            out(packet);
        }
        flow.len = 0;
        flow.backlog = 0;
        flow
    }

    /// The index of `config` among the start disciplines, added if new.
    pub(crate) fn start_of(&mut self, config: &LeafConfig) -> u32 {
        // The newest is the scheduler's default now: looked at first.
        let index = self
            .starts
            .iter()
            .rposition(|c| c == config)
            .unwrap_or_else(|| {
                self.starts.push(*config);
                self.starts.len() - 1
            });
        index as u32
    }

    /// Preallocates room for `packets` queued packets and `drops` packets dropped at once,
    /// so that no enqueue or dequeue allocates until the backlog exceeds it.
    pub fn reserve(&mut self, packets: usize, drops: usize) {
        self.packets.reserve(packets);
        self.dropped
            .reserve(drops.saturating_sub(self.dropped.len()));
    }

    /// The packet pool.
    #[must_use]
    pub fn packets(&self) -> &PacketPool<P> {
        &self.packets
    }

    /// Flow records in use (sfq and fq_codel flows with packets or live CoDel state, cake
    /// queues and host slots in use).
    #[must_use]
    pub fn flows_in_use(&self) -> usize {
        self.flows.in_use() + self.cake.flows.in_use() + self.cake.hosts.in_use()
    }

    /// Heap bytes held by the flow tables.
    #[must_use]
    pub fn flow_table_bytes(&self) -> usize {
        self.flows.heap_bytes() + self.cake.flows.heap_bytes() + self.cake.hosts.heap_bytes()
    }
}

/// A leaf qdisc's statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafStats {
    /// Its parameters.
    pub config: LeafConfig,
    /// Packets it holds.
    pub qlen: u32,
    /// Bytes it holds.
    pub backlog: u64,
    /// Packets it dropped (full, over limit, CoDel, rehash).
    pub drops: u64,
    /// Times it held its packets back (`qstats.overlimits`): a dequeue `tbf`'s buckets
    /// refused, or `cake`'s shaper; zero for the kinds that never hold back.
    pub overlimits: u64,
    /// `fq_codel`'s own counters.
    pub fq_codel: Option<FqCodelStats>,
    /// `cake`'s own counters and tins.
    pub cake: Option<alloc::boxed::Box<CakeStats>>,
}

impl LeafStats {
    /// The same leaf's parameters and own statistics with its counts at zero: the base
    /// several workers' counts are summed into ([`add_counts`](Self::add_counts)).
    #[must_use]
    pub fn without_counts(self) -> Self {
        Self {
            qlen: 0,
            backlog: 0,
            drops: 0,
            overlimits: 0,
            ..self
        }
    }

    /// Adds the counts of the same leaf on another worker; its parameters and its kind's own
    /// statistics (fq_codel's flows, cake's tins) stay this one's. Every field is named, so
    /// that one added to the struct does not compile until it is summed or kept here.
    pub fn add_counts(&mut self, other: &Self) {
        let Self {
            config: _,
            qlen,
            backlog,
            drops,
            overlimits,
            fq_codel: _,
            cake: _,
        } = other;
        self.qlen += qlen;
        self.backlog += backlog;
        self.drops += drops;
        self.overlimits += overlimits;
    }
}

/// One leaf qdisc. Every kind lives in a box of its own, so that a leaf class costs its
/// scheduler two words (a fifo leaf is reached through one pointer more, for 16 bytes less on
/// every class), and a leaf of the scheduler's default kind costs no
/// allocation until its first packet ([`Unstarted`](Self::Unstarted)): a million idle classes
/// hold no million fq_codel records.
#[derive(Clone, Debug)]
pub(crate) enum Leaf {
    /// A leaf whose discipline is made on its first packet: `store.starts[start]`, with its
    /// flows keyed by `key` (the class slot).
    Unstarted {
        start: u32,
        key: u32,
    },
    /// What fills a slot that holds no leaf (an inner class's, or storage not yet in use): holds
    /// nothing, allocates nothing, takes no packet.
    Vacant,
    /// `pfifo` (`bytes_limit` false) or `bfifo`, and the packets it refused (32 bits,
    /// wrapping, as the kernel's `qstats.drops`): both beside the box's pointer, in bytes the
    /// slot has anyway, so that the box holds the queue alone ([`Fifo`]).
    Fifo {
        bytes_limit: bool,
        drops: u32,
        queue: alloc::boxed::Box<Fifo>,
    },
    Sfq(alloc::boxed::Box<Sfq>),
    FqCodel(alloc::boxed::Box<FqCodel>),
    Cake(alloc::boxed::Box<Cake>),
    Tbf(alloc::boxed::Box<Tbf>),
}

impl Leaf {
    /// A new, empty leaf with `config`; `key` identifies it in the flow table (the class
    /// slot), `seed` keys `sfq`'s perturbation.
    pub(crate) fn new(config: &LeafConfig, key: u32, seed: u64, now: Instant) -> Self {
        match *config {
            LeafConfig::Pfifo { limit } => Self::fifo(limit, false),
            LeafConfig::Bfifo { limit } => Self::fifo(limit, true),
            LeafConfig::Sfq(c) => Self::Sfq(alloc::boxed::Box::new(Sfq::new(
                c,
                key,
                seed,
                now.as_nanos(),
            ))),
            LeafConfig::FqCodel(c) => Self::FqCodel(alloc::boxed::Box::new(FqCodel::new(c, key))),
            LeafConfig::Cake(c) => Self::Cake(alloc::boxed::Box::new(Cake::new(c, key, seed))),
            LeafConfig::Tbf(c) => Self::Tbf(alloc::boxed::Box::new(Tbf::new(c, now.as_nanos()))),
        }
    }

    fn fifo(limit: u32, bytes_limit: bool) -> Self {
        Self::Fifo {
            bytes_limit,
            drops: 0,
            queue: alloc::boxed::Box::new(Fifo::new(limit)),
        }
    }

    /// A leaf of discipline `config` that is made on its first packet; `key` identifies it in
    /// the flow table (the class slot).
    pub(crate) fn unstarted<P>(store: &mut LeafStore<P>, config: &LeafConfig, key: u32) -> Self {
        Self::Unstarted {
            start: store.start_of(config),
            key,
        }
    }

    /// The discipline an unstarted leaf gets, made now (for its first packet, or its
    /// statistics).
    fn started<P>(store: &LeafStore<P>, start: u32, key: u32, now: Instant) -> Self {
        Self::new(&store.starts[start as usize], key, store.seed, now)
    }

    /// Takes `packet`, or hands it back when refused; packets dropped to make room go to the
    /// store's drop list.
    #[inline]
    pub(crate) fn enqueue<P: Packet>(
        &mut self,
        store: &mut LeafStore<P>,
        packet: P,
        now: Instant,
    ) -> Result<(), P> {
        if let Self::Unstarted { start, key } = *self {
            *self = Self::started(store, start, key, now);
        }
        let now = now.as_nanos();
        match self {
            Self::Unstarted { .. } | Self::Vacant => Err(packet),
            Self::Fifo {
                bytes_limit,
                drops,
                queue,
            } => queue
                .enqueue(&mut store.packets, packet, now, *bytes_limit)
                .inspect_err(|_| *drops = drops.wrapping_add(1)),
            Self::Sfq(q) => q.enqueue(store, packet, now),
            Self::FqCodel(q) => q.enqueue(store, packet, now),
            Self::Cake(q) => q.enqueue(store, packet, now),
            Self::Tbf(q) => q.enqueue(&mut store.packets, packet, now),
        }
    }

    /// The next packet to send; packets dropped on the way go to the store's drop list. `None`
    /// when the leaf is empty, or (a `cake` with `bandwidth`) holds its packets back until
    /// [`throttled_until`](Self::throttled_until).
    #[inline]
    pub(crate) fn dequeue<P: Packet>(
        &mut self,
        store: &mut LeafStore<P>,
        now: Instant,
    ) -> Option<P> {
        match self {
            Self::Unstarted { .. } | Self::Vacant => None,
            Self::Fifo { queue: q, .. } => q.dequeue(&mut store.packets),
            Self::Sfq(q) => q.dequeue(store, now.as_nanos()),
            Self::FqCodel(q) => q.dequeue(store, now.as_nanos()),
            Self::Cake(q) => q.dequeue(store, now.as_nanos()),
            Self::Tbf(q) => q.dequeue(&mut store.packets, now.as_nanos()),
        }
    }

    /// Packets held.
    #[inline]
    pub(crate) fn len(&self) -> u32 {
        match self {
            Self::Unstarted { .. } | Self::Vacant => 0,
            Self::Fifo { queue: q, .. } => q.len(),
            Self::Sfq(q) => q.counts.len,
            Self::FqCodel(q) => q.counts.len,
            Self::Cake(q) => q.counts.len,
            Self::Tbf(q) => q.len(),
        }
    }

    /// Whether it holds nothing.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held.
    #[inline]
    pub(crate) fn backlog(&self) -> u64 {
        match self {
            Self::Unstarted { .. } | Self::Vacant => 0,
            Self::Fifo { queue: q, .. } => q.backlog(),
            Self::Sfq(q) => q.counts.backlog,
            Self::FqCodel(q) => q.counts.backlog,
            Self::Cake(q) => q.counts.backlog,
            Self::Tbf(q) => q.backlog(),
        }
    }

    /// Every packet out through `out`, every flow freed (`qdisc_reset`).
    pub(crate) fn purge<P: Packet>(&mut self, store: &mut LeafStore<P>, mut out: impl FnMut(P)) {
        match self {
            Self::Unstarted { .. } | Self::Vacant => {}
            Self::Fifo { queue: q, .. } => q.purge(&mut store.packets, &mut out),
            Self::Sfq(q) => q.purge(store, &mut out),
            Self::FqCodel(q) => q.purge(store, &mut out),
            Self::Cake(q) => q.purge(store, &mut out),
            Self::Tbf(q) => q.purge(&mut store.packets, &mut out),
        }
    }

    /// New parameters of the same kind, applied in place (`qdisc change`); packets over new
    /// limits go to the drop list. Returns `false` (and changes nothing) when the kind
    /// differs, `fq_codel`'s flow count would change, or the leaf is not started: the caller
    /// replaces the leaf instead (an unstarted one holds nothing to keep, and its discipline
    /// is the default's, shared).
    pub(crate) fn reconfigure<P: Packet>(
        &mut self,
        store: &mut LeafStore<P>,
        config: &LeafConfig,
        now: Instant,
    ) -> bool {
        match (self, *config) {
            (
                Self::Fifo {
                    bytes_limit: false,
                    queue,
                    ..
                },
                LeafConfig::Pfifo { limit },
            )
            | (
                Self::Fifo {
                    bytes_limit: true,
                    queue,
                    ..
                },
                LeafConfig::Bfifo { limit },
            ) => queue.set_limit(limit),
            (Self::Sfq(q), LeafConfig::Sfq(c)) => q.reconfigure(store, c, now.as_nanos()),
            (Self::FqCodel(q), LeafConfig::FqCodel(c)) if q.config().flows == c.flows => {
                q.reconfigure(store, c, now.as_nanos());
            }
            (Self::Cake(q), LeafConfig::Cake(c)) => q.reconfigure(store, c, now.as_nanos()),
            (Self::Tbf(q), LeafConfig::Tbf(c)) => q.reconfigure(c, now.as_nanos()),
            _ => return false,
        }
        true
    }

    /// Parameters in effect.
    pub(crate) fn config<P>(&self, store: &LeafStore<P>) -> LeafConfig {
        match self {
            Self::Unstarted { start, .. } => store.starts[*start as usize],
            Self::Vacant => LeafConfig::Pfifo { limit: 0 },
            Self::Fifo {
                bytes_limit: true,
                queue,
                ..
            } => LeafConfig::Bfifo {
                limit: queue.limit(),
            },
            Self::Fifo { queue, .. } => LeafConfig::Pfifo {
                limit: queue.limit(),
            },
            Self::Sfq(q) => LeafConfig::Sfq(q.config()),
            Self::FqCodel(q) => LeafConfig::FqCodel(q.config()),
            Self::Cake(q) => LeafConfig::Cake(q.config()),
            Self::Tbf(q) => LeafConfig::Tbf(q.config()),
        }
    }

    /// Verifies the leaf's own invariants (packet and byte counts against its lists, flow
    /// lists and ownership); returns how many flow records it holds.
    pub(crate) fn check<P: Packet>(&self, store: &LeafStore<P>) -> Result<usize, CheckError> {
        match self {
            Self::Unstarted { start, .. } => {
                if (*start as usize) < store.starts.len() {
                    Ok(0)
                } else {
                    Err(CheckError(alloc::format!(
                        "an unstarted leaf names start discipline {start} of {}",
                        store.starts.len()
                    )))
                }
            }
            Self::Vacant => Ok(0),
            Self::Fifo { queue: q, .. } => q.check(&store.packets).map(|()| 0),
            Self::Sfq(q) => q.check(store),
            Self::FqCodel(q) => q.check(store),
            Self::Cake(q) => q.check(store),
            Self::Tbf(q) => q.check(&store.packets).map(|()| 0),
        }
    }

    /// Which of its queues a packet of flow `hash` joins (`fq_codel`'s and `sfq`'s flow
    /// buckets, as `fq_codel_classify` and `sfq_hash` pick them); `None` for a discipline with
    /// one queue, or whose choice depends on what it holds (`cake`'s set-associative flows).
    /// An `sfq` not yet started has no perturbation key yet, so no answer either.
    pub(crate) fn queue_of<P>(&self, store: &LeafStore<P>, hash: u32) -> Option<u32> {
        match self {
            Self::FqCodel(q) => Some(q.bucket_of(hash)),
            Self::Sfq(q) => Some(q.bucket_of(hash)),
            Self::Unstarted { start, .. } => match store.starts.get(*start as usize)? {
                LeafConfig::FqCodel(c) => Some(fq_codel::bucket(hash, c.flows)),
                _ => None,
            },
            Self::Vacant | Self::Fifo { .. } | Self::Cake(_) | Self::Tbf(_) => None,
        }
    }

    /// Statistics (an unstarted leaf's: those of a new one).
    pub(crate) fn stats<P>(&self, store: &LeafStore<P>) -> LeafStats {
        let (drops, fq_codel, cake) = match self {
            // A new fifo, sfq or fq_codel counts nothing yet (a scrape asks a million of
            // them: no leaf is made for it); a new cake's tins have their parameters.
            Self::Unstarted { start, key } => match store.starts[*start as usize] {
                LeafConfig::Cake(_) => {
                    return Self::started(store, *start, *key, Instant::ZERO).stats(store);
                }
                LeafConfig::FqCodel(_) => (0, Some(FqCodelStats::default()), None),
                _ => (0, None, None),
            },
            Self::Vacant => (0, None, None),
            Self::Fifo { drops, .. } => (u64::from(*drops), None, None),
            Self::Sfq(q) => (q.counts.drops, None, None),
            Self::Tbf(q) => (q.drops(), None, None),
            Self::FqCodel(q) => (q.counts.drops, Some(q.stats()), None),
            Self::Cake(q) => (
                q.counts.drops,
                None,
                Some(alloc::boxed::Box::new(q.stats())),
            ),
        };
        // What held packets back: tbf's buckets, or cake's shaper, which its own statistics
        // count.
        let overlimits = match self {
            Self::Tbf(q) => q.overlimits(),
            _ => cake.as_ref().map_or(0, |c| u64::from(c.overlimits)),
        };
        LeafStats {
            config: self.config(store),
            qlen: self.len(),
            backlog: self.backlog(),
            drops,
            overlimits,
            fq_codel,
            cake,
        }
    }

    /// When a leaf that returned nothing from [`dequeue`](Self::dequeue) while holding packets
    /// may send again (`cake`'s shaper, `tbf`'s bucket); `None` for the work-conserving leaves.
    pub(crate) fn throttled_until(&self) -> Option<Instant> {
        match self {
            Self::Cake(q) => q.throttled_until().map(Instant::from_nanos),
            Self::Tbf(q) => q.throttled_until().map(Instant::from_nanos),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
