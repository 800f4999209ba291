//! `cake` (`net/sched/sch_cake.c`): a deficit-mode shaper, DSCP tins with their own threshold
//! rates and DRR weights, 8-way set-associative flow queues made fair between hosts, COBALT on
//! every queue, an ACK filter and link-layer overhead compensation, in one qdisc.
//!
//! Under an HTB class it is a leaf like the others; with `bandwidth` it also shapes, so its
//! [`dequeue`](Cake::dequeue) may return nothing while it holds packets: it then says when it
//! may send ([`Cake::throttled_until`]), and the scheduler takes the class out of its round until
//! then (the kernel's HTB calls such a child "not work conserving" and waits for its watchdog).
//!
//! Memory follows the traffic, not the configuration: the kernel gives each instance 8 tins of
//! 1024 queues and host slots (about 700 KB); here a leaf holds its tins' list heads and
//! counters, and a queue or host slot takes a record of the scheduler-wide tables only while in
//! use (module `hash`).

mod ack_filter;
mod autorate;
mod change;
mod check;
mod choose;
mod cobalt;
mod dequeue;
mod enqueue;
mod hash;
mod spec;
mod stats;
mod tcp;
mod tins;

use alloc::vec::Vec;

use self::autorate::{Autorate, ewma};
use self::choose::TinChoice;
use self::hash::{QUEUES, Slots};
use self::tins::Tin;
use super::counts::QueueCounts;
use super::flows::{FlowTable, LeafFlows};
use crate::Packet;

pub use spec::{AckFilter, AtmMode, CakeConfig, CakeSpec, DiffservMode, FlowMode};
pub use stats::{CakeStats, CakeTinStats};
pub use tcp::TcpAck;

pub(crate) use hash::{CakeFlowState, HostState};

/// `sch->limit` of a `cake` qdisc (packets): a bound of its buffer with the MTU.
const LIMIT: u32 = 10_240;
/// Decaying queues freed per tin and call at most.
const TRIM_PER_CALL: usize = 2;
/// A decaying queue untouched this long is freed even if its state has not come to rest.
const STALE_NS: u64 = 1_000_000_000;
/// How often a leaf looks for decaying queues to free.
const TRIM_EVERY_NS: u64 = 1_000_000;

/// `quantum_div[]`: 65535 / host load, so that a host's bulk flows share one quantum.
const QUANTUM_DIV: [u16; QUEUES as usize + 1] = {
    let mut t = [0u16; QUEUES as usize + 1];
    t[0] = u16::MAX;
    let mut i = 1;
    while i <= QUEUES as usize {
        t[i] = (65535 / i) as u16;
        i += 1;
    }
    t
};

/// The flow and host records of every `cake` leaf of a scheduler.
#[derive(Debug, Default)]
pub(crate) struct CakeStore {
    pub(crate) flows: FlowTable<CakeFlowState>,
    pub(crate) hosts: FlowTable<HostState>,
}

/// One `cake` instance (`struct cake_sched_data`). On a cache line's start (256 bytes, four
/// whole lines): a packet reads every line of it, and its box's 16-byte alignment spread it
/// over four or five.
#[derive(Clone, Debug)]
#[repr(align(64))]
pub(crate) struct Cake {
    config: CakeConfig,
    flow_index: LeafFlows,
    host_index: LeafFlows,
    tins: Vec<Tin>,
    /// Packets and bytes held, packets dropped.
    pub(crate) counts: QueueCounts,
    /// The rate in effect (bytes/s): the bandwidth, or `autorate-ingress`'s estimate.
    rate_bps: u64,
    /// The shaper's time per byte, `rate_ns >> rate_shift` ns (0: unlimited): the first
    /// tin's, as `cake_reconfigure` sets it.
    rate_ns: u64,
    rate_shift: u8,
    time_next_packet: u64,
    failsafe_next_packet: u64,
    /// The tin served last, and which tins the next choice looks at.
    choice: TinChoice,
    /// Tins whose decaying list may hold queues (bit `t`: tin `t`; a superset): what
    /// [`trim_decaying`](Self::trim_decaying) looks at.
    decaying_tins: u8,
    buffer_used: u32,
    buffer_max_used: u32,
    buffer_limit: u32,
    overlimits: u32,
    /// `autorate-ingress`'s state, only while it is on.
    autorate: Option<alloc::boxed::Box<Autorate>>,
    avg_netoff: u32,
    min_netlen: u16,
    max_netlen: u16,
    min_adjlen: u16,
    max_adjlen: u16,
    random: u64,
    /// When to look for decaying queues to free next.
    next_trim: u64,
    /// The shaper charges a packet its own length: no `overhead`, `mpu` or cell framing
    /// (`cake_calc_overhead` returns `len` untouched).
    charges_len: bool,
}

/// The slots of one leaf: its indices and the scheduler's tables, borrowed apart from the
/// leaf's other fields.
fn slots<'a>(
    flow_index: &'a mut LeafFlows,
    host_index: &'a mut LeafFlows,
    store: &'a mut CakeStore,
) -> Slots<'a> {
    Slots {
        flows: &mut store.flows,
        hosts: &mut store.hosts,
        flow_index,
        host_index,
    }
}

/// `cake_get_flow_quantum`'s arithmetic: a tin's `flow_quantum` divided by `load`, dithered
/// by a draw of the instance's generator `random` (a field of its own, so that a caller may
/// hold a tin while it draws).
#[inline(always)]
fn dithered_quantum(random: &mut u64, flow_quantum: u16, load: u32) -> i32 {
    let div = QUANTUM_DIV[load.min(QUEUES) as usize];
    let dither = super::random::next_random(random) & 0xffff;
    ((u32::from(flow_quantum) * u32::from(div) + dither) >> 16) as i32
}

/// `cake_calc_overhead` without its statistics: the length the shaper charges under `c`;
/// `charges_len`: `c` sets no overhead, `mpu` or framing (the instance's `charges_len`). A
/// function of the fields it reads, so that a caller may hold a tin of the instance.
#[inline]
fn adjusted_len(c: &CakeConfig, charges_len: bool, len: u32, offset: u32) -> u32 {
    if charges_len {
        return len;
    }
    let net = if c.overhead_set {
        len.saturating_sub(offset)
    } else {
        len
    };
    let len = (i64::from(net) + i64::from(c.overhead))
        .max(i64::from(c.mpu))
        .max(0) as u32;
    match c.atm {
        AtmMode::Atm => len.div_ceil(48) * 53,
        AtmMode::Ptm => len + len.div_ceil(64),
        AtmMode::None => len,
    }
}

/// The length the shaper charges for `packet` ([`adjusted_len`]).
#[inline]
fn charged_len<P: Packet>(c: &CakeConfig, charges_len: bool, packet: &P) -> u32 {
    adjusted_len(c, charges_len, packet.len_bytes(), packet.network_offset())
}

impl Cake {
    /// `cake_init`: an empty instance keyed `key` in the flow tables, its BLUE coin drawn
    /// from `seed`.
    pub(crate) fn new(config: CakeConfig, key: u32, seed: u64) -> Self {
        let mut cake = Self {
            config,
            flow_index: LeafFlows::new(key),
            host_index: LeafFlows::new(key),
            tins: Vec::new(),
            counts: QueueCounts::default(),
            rate_bps: config.bandwidth.bytes_per_sec(),
            rate_ns: 0,
            rate_shift: 0,
            time_next_packet: 0,
            failsafe_next_packet: 0,
            choice: TinChoice::default(),
            decaying_tins: 0,
            buffer_used: 0,
            buffer_max_used: 0,
            buffer_limit: 0,
            overlimits: 0,
            autorate: None,
            avg_netoff: 0,
            min_netlen: u16::MAX,
            max_netlen: 0,
            min_adjlen: u16::MAX,
            max_adjlen: 0,
            random: seed ^ u64::from(key).wrapping_mul(0xd6e8_feb8_6659_fd93),
            next_trim: 0,
            charges_len: false,
        };
        cake.tins.reserve_exact(config.tins());
        cake.tins.resize_with(config.tins(), Tin::new);
        cake.choice = TinChoice::new(&cake.tins);
        cake.set_autorate();
        cake.configure_rates();
        cake
    }

    /// Keeps `autorate-ingress`'s state while it is on (`cake_init` starts its estimate at
    /// the bandwidth).
    fn set_autorate(&mut self) {
        match (&self.autorate, self.config.autorate_ingress) {
            (None, true) => {
                self.autorate = Some(alloc::boxed::Box::new(Autorate {
                    avg_peak_bandwidth: self.rate_bps,
                    ..Autorate::default()
                }));
            }
            (Some(_), false) => self.autorate = None,
            _ => {}
        }
    }

    /// `cake_reconfigure`: the tins' rates, the shaper's, and the buffer limit.
    fn configure_rates(&mut self) {
        let c = &self.config;
        self.charges_len =
            !c.overhead_set && c.overhead == 0 && c.mpu == 0 && c.atm == AtmMode::None;
        tins::configure(&mut self.tins, &self.config, self.rate_bps);
        (self.rate_ns, self.rate_shift) = (self.tins[0].rate.ns, self.tins[0].rate.shift);
        let interval_us = self.config.rtt.as_nanos() / 1000;
        let limit = if self.config.memlimit != 0 {
            u64::from(self.config.memlimit)
        } else if self.rate_bps != 0 {
            (self.rate_bps.saturating_mul(interval_us) / 250_000).max(4 << 20)
        } else {
            u64::from(u32::MAX)
        };
        let cap =
            (u64::from(LIMIT) * u64::from(self.config.mtu)).max(u64::from(self.config.memlimit));
        self.buffer_limit = limit.min(cap).min(u64::from(u32::MAX)) as u32;
    }

    /// `cake_calc_overhead` without its statistics: the length the shaper charges.
    #[inline]
    fn adjusted_len(&self, len: u32, offset: u32) -> u32 {
        adjusted_len(&self.config, self.charges_len, len, offset)
    }

    /// `cake_advance_shaper`: charges `len` bytes to tin `tin`'s threshold and to the shaper.
    #[inline]
    fn advance_shaper(&mut self, tin: usize, len: u32, now: u64, drop: bool) -> u32 {
        if self.rate_ns != 0 {
            let b = &mut self.tins[tin];
            let tin_dur = b.rate.duration(len);
            let global = tins::duration(len, self.rate_ns, self.rate_shift);
            if b.time_next_packet < now {
                b.time_next_packet += tin_dur;
            } else if b.time_next_packet < now + tin_dur {
                b.time_next_packet = now + tin_dur;
            }
            self.time_next_packet += global;
            if !drop {
                self.failsafe_next_packet += global + (global >> 1);
            }
        }
        len
    }

    /// The length the shaper charges for `packet`.
    #[inline]
    fn charged<P: Packet>(&self, packet: &P) -> u32 {
        charged_len(&self.config, self.charges_len, packet)
    }

    /// When the shaper lets the next packet go, while it holds packets back.
    pub(crate) fn throttled_until(&self) -> Option<u64> {
        (self.counts.len > 0 && self.rate_ns != 0)
            .then(|| self.time_next_packet.min(self.failsafe_next_packet))
    }
    pub(crate) fn config(&self) -> CakeConfig {
        self.config
    }
}

#[cfg(test)]
mod replay;
#[cfg(test)]
mod tests;
