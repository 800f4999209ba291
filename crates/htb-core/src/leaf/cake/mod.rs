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
mod hash;
mod spec;
mod stats;
mod tcp;
mod tins;

use alloc::vec::Vec;

use self::autorate::{Autorate, ewma};
use self::choose::TinChoice;
use self::hash::{FlowSet, Hashes, QUEUES, Slots};
use self::tins::Tin;
use super::LeafStore;
use super::counts::QueueCounts;
use super::flows::{FlowTable, LeafFlows, ListTag};
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

/// One `cake` instance (`struct cake_sched_data`).
#[derive(Clone, Debug)]
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

    #[inline]
    fn next_random(&mut self) -> u32 {
        super::random::next_random(&mut self.random)
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
        if self.charges_len {
            return len;
        }
        let c = &self.config;
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

    /// `cake_overhead`: notes the length statistics of a packet being enqueued.
    fn note_lengths<P: Packet>(&mut self, packet: &P) {
        let (len, offset) = (packet.len_bytes(), packet.network_offset());
        self.avg_netoff = ewma(u64::from(self.avg_netoff), u64::from(offset) << 16, 8) as u32;
        let net = if self.config.overhead_set {
            len.saturating_sub(offset)
        } else {
            len
        };
        let net = net.min(u32::from(u16::MAX)) as u16;
        self.max_netlen = self.max_netlen.max(net);
        self.min_netlen = self.min_netlen.min(net);
        let adj = self.adjusted_len(len, offset).min(u32::from(u16::MAX)) as u16;
        self.max_adjlen = self.max_adjlen.max(adj);
        self.min_adjlen = self.min_adjlen.min(adj);
    }

    /// `cake_select_tin`: a mark under `fwmark`, else the DSCP (washed if asked, after it is
    /// read).
    fn select_tin<P: Packet>(&self, packet: &mut P) -> usize {
        let c = &self.config;
        let mark = if c.fwmark == 0 {
            0
        } else {
            (packet.mark() & c.fwmark) >> c.fwmark.trailing_zeros()
        };
        let mut dscp = 0;
        if c.wash {
            dscp = packet.dscp();
            if dscp != 0 {
                packet.wash_dscp();
            }
        }
        let count = self.tins.len();
        if c.diffserv == DiffservMode::Besteffort {
            0
        } else if mark != 0 && mark as usize <= count {
            usize::from(tins::order(c.diffserv)[mark as usize - 1])
        } else {
            if !c.wash {
                dscp = packet.dscp();
            }
            Some(tins::tin_of(c.diffserv, dscp))
                .filter(|&t| t < count)
                .unwrap_or(0)
        }
    }

    /// `cake_get_flow_quantum`: the tin's flow quantum divided by the bulk flows of the
    /// queue's hosts, dithered so that the rounding averages out.
    #[inline(always)]
    fn flow_quantum(&mut self, store: &CakeStore, tin: usize, idx: u32) -> i32 {
        let load = hash::host_load(
            &store.hosts,
            &store.flows.get(idx).state,
            self.config.flow_mode,
        );
        let div = QUANTUM_DIV[load.min(QUEUES) as usize];
        let dither = self.next_random() & 0xffff;
        ((u32::from(self.tins[tin].flow_quantum) * u32::from(div) + dither) >> 16) as i32
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
        self.adjusted_len(packet.len_bytes(), packet.network_offset())
    }

    /// `cake_enqueue`. Only a full packet pool refuses a packet; over the buffer limit the
    /// longest queue of any tin loses its head (`cake_drop`), to the store's drop list.
    pub(crate) fn enqueue<P: Packet>(
        &mut self,
        store: &mut LeafStore<P>,
        mut packet: P,
        now: u64,
    ) -> Result<(), P> {
        if self.counts.len == 0 {
            // An idle leaf frees its queues that came to rest (a busy one does in dequeue).
            self.trim_decaying(store, now);
        }
        let tin = self.select_tin(&mut packet);
        let mode = self.config.flow_mode;
        let (src, dst) = if mode.bits() & 3 != 0 {
            packet.host_hashes()
        } else {
            (0, 0)
        };
        let hashes = Hashes {
            flow: packet.flow_hash(),
            src,
            dst,
        };
        let idx = slots(&mut self.flow_index, &mut self.host_index, &mut store.cake).queue(
            tin,
            &mut self.tins[tin],
            mode,
            hashes,
        );

        // The shaper's state may be stale after an idle spell.
        let b = &mut self.tins[tin];
        if b.tin_backlog == 0 {
            b.time_next_packet = b.time_next_packet.max(now);
            if self.counts.len == 0 {
                if self.time_next_packet < now {
                    self.failsafe_next_packet = now;
                    self.time_next_packet = now;
                } else if self.time_next_packet > now && self.failsafe_next_packet > now {
                    self.overlimits = self.overlimits.wrapping_add(1);
                }
            }
        }
        let len = packet.len_bytes();
        self.tins[tin].max_skblen = self.tins[tin].max_skblen.max(len);
        self.note_lengths(&packet);
        let truesize = packet.truesize();
        let flow = store.cake.flows.get_mut(idx);
        if let Err(packet) = store.packets.push_back(&mut flow.packets, packet, now) {
            if flow.state.set == FlowSet::None {
                slots(&mut self.flow_index, &mut self.host_index, &mut store.cake).free_queue(idx);
            }
            self.counts.drops += 1;
            return Err(packet);
        }
        flow.len += 1;
        flow.backlog = flow.backlog.saturating_add(len);

        let mut ack_len = 0;
        let redundant = match self.config.ack_filter {
            AckFilter::Off => None,
            filter => ack_filter::redundant(
                &store.packets,
                flow.packets,
                filter == AckFilter::Aggressive,
            ),
        };
        match redundant.and_then(|slot| store.packets.remove(&mut flow.packets, slot)) {
            Some((ack, _)) => {
                ack_len = ack.len_bytes();
                flow.len -= 1;
                flow.backlog -= ack_len;
                self.buffer_used = (self.buffer_used + truesize).saturating_sub(ack.truesize());
                let b = &mut self.tins[tin];
                b.ack_drops = b.ack_drops.wrapping_add(1);
                b.bytes += u64::from(ack_len);
                self.counts.drops += 1;
                if self.config.ingress {
                    let charged = self.charged(&ack);
                    self.advance_shaper(tin, charged, now, true);
                }
                store.dropped.push(ack);
            }
            None => {
                self.counts.len += 1;
                self.buffer_used = self.buffer_used.saturating_add(truesize);
            }
        }
        let b = &mut self.tins[tin];
        b.packets = b.packets.wrapping_add(1);
        b.bytes += u64::from(len) - u64::from(ack_len);
        b.tin_backlog = (b.tin_backlog + len) - ack_len;
        self.counts.backlog = (self.counts.backlog + u64::from(len)) - u64::from(ack_len);
        if let Some(mut a) = self.autorate.take() {
            a.avg_window_bytes += u64::from(len) - u64::from(ack_len);
            if a.estimate(now) {
                self.rate_bps = a.avg_peak_bandwidth.saturating_mul(15) >> 4;
                self.configure_rates();
            }
            self.autorate = Some(a);
        }

        // The flow joins the rotation, or moves to bulk if it was waiting there.
        let set = store.cake.flows.get(idx).state.set;
        match set {
            FlowSet::None | FlowSet::Decaying => {
                let b = &mut self.tins[tin];
                if set == FlowSet::Decaying {
                    b.decaying_flow_count -= 1;
                    b.decaying_flows.remove(&mut store.cake.flows, idx);
                }
                b.new_flows.push_back(&mut store.cake.flows, idx);
                b.sparse_flow_count += 1;
                self.choice.busied(tin);
                store.cake.flows.get_mut(idx).state.set = FlowSet::Sparse;
                let quantum = self.flow_quantum(&store.cake, tin, idx);
                store.cake.flows.get_mut(idx).deficit = quantum;
            }
            FlowSet::SparseWait => {
                store.cake.flows.get_mut(idx).state.set = FlowSet::Bulk;
                let b = &mut self.tins[tin];
                b.sparse_flow_count -= 1;
                b.bulk_flow_count += 1;
                slots(&mut self.flow_index, &mut self.host_index, &mut store.cake)
                    .bulk_count(idx, mode, 1);
            }
            FlowSet::Sparse | FlowSet::Bulk => {}
        }

        self.buffer_max_used = self.buffer_max_used.max(self.buffer_used);
        let before = self.counts.len;
        while self.buffer_used > self.buffer_limit && self.counts.len > 0 {
            self.drop_longest(store, now);
        }
        if before != self.counts.len {
            let b = &mut self.tins[tin];
            b.drop_overlimit = b.drop_overlimit.wrapping_add(before - self.counts.len);
        }
        Ok(())
    }

    /// `cake_drop`: the head of the longest queue of any tin goes, and BLUE learns that
    /// queue overflowed.
    fn drop_longest<P: Packet>(&mut self, store: &mut LeafStore<P>, now: u64) {
        let flows = &store.cake.flows;
        let Some(idx) = flows
            .records(&self.flow_index)
            .filter(|&i| flows.get(i).len > 0)
            .max_by_key(|&i| {
                (
                    flows.get(i).backlog,
                    core::cmp::Reverse(flows.get(i).bucket),
                )
            })
        else {
            return;
        };
        let tin = (flows.get(idx).bucket / QUEUES) as usize;
        let flow = store.cake.flows.get_mut(idx);
        let Some((packet, _)) = store.packets.pop_front(&mut flow.packets) else {
            return;
        };
        let len = packet.len_bytes();
        flow.len -= 1;
        flow.backlog -= len;
        flow.state.dropped = flow.state.dropped.wrapping_add(1);
        let b = &mut self.tins[tin];
        if flow.state.cvars.queue_full(&b.cparams, now) {
            b.unresponsive_flow_count += 1;
        }
        b.tin_backlog -= len;
        b.tin_dropped = b.tin_dropped.wrapping_add(1);
        self.buffer_used = self.buffer_used.saturating_sub(packet.truesize());
        self.counts.remove(len);
        self.counts.drops += 1;
        if self.config.ingress {
            let charged = self.charged(&packet);
            self.advance_shaper(tin, charged, now, true);
        }
        store.dropped.push(packet);
    }

    /// Picks the tin to serve (module `choose`). `None`: nothing to serve.
    #[inline]
    fn choose_tin(&mut self, now: u64) -> Option<usize> {
        if self.rate_ns == 0 {
            self.choice.by_weight(&mut self.tins)
        } else {
            self.choice.by_threshold(&self.tins, now)
        }
    }

    /// Moves queue `idx` of tin `tin` from whichever list it is on to the tail of `to`.
    fn move_to(&mut self, flows: &mut FlowTable<CakeFlowState>, tin: usize, idx: u32, to: ListTag) {
        self.tins[tin].move_to(flows, idx, to);
    }

    /// `cake_dequeue`. `None` while packets are held means the shaper holds them back until
    /// [`throttled_until`](Self::throttled_until).
    pub(crate) fn dequeue<P: Packet>(&mut self, store: &mut LeafStore<P>, now: u64) -> Option<P> {
        let mode = self.config.flow_mode;
        let mut first_flow = true;
        'begin: loop {
            if self.counts.len == 0 {
                return None;
            }
            if self.time_next_packet > now && self.failsafe_next_packet > now {
                self.overlimits = self.overlimits.wrapping_add(1);
                return None;
            }
            let tin = self.choose_tin(now)?;
            // Whether what was just checked and chosen still holds: a queue found empty
            // changes neither the packets held, nor the shaper, nor a tin's deficit, so while
            // its tin stays busy `goto begin` would come back to it; an `ingress` drop changes
            // all three.
            let mut checked = true;
            'retry: loop {
                let b = &self.tins[tin];
                let idx = if first_flow && !b.decaying_flows.is_empty() {
                    b.decaying_flows.front()
                } else {
                    b.new_flows
                        .front()
                        .or_else(|| b.old_flows.front())
                        .or_else(|| b.decaying_flows.front())
                };
                let Some(idx) = idx else { continue 'begin };
                first_flow = false;

                // Flow isolation (DRR++).
                if store.cake.flows.get(idx).deficit <= 0 {
                    let flow = store.cake.flows.get_mut(idx);
                    if flow.state.set == FlowSet::Sparse {
                        if flow.len > 0 {
                            flow.state.set = FlowSet::Bulk;
                            let b = &mut self.tins[tin];
                            b.sparse_flow_count -= 1;
                            b.bulk_flow_count += 1;
                            slots(&mut self.flow_index, &mut self.host_index, &mut store.cake)
                                .bulk_count(idx, mode, 1);
                        } else {
                            // In the bulk rotation for its deficit, still counted sparse.
                            flow.state.set = FlowSet::SparseWait;
                        }
                    }
                    let quantum = self.flow_quantum(&store.cake, tin, idx);
                    store.cake.flows.get_mut(idx).deficit += quantum;
                    self.move_to(&mut store.cake.flows, tin, idx, ListTag::Old);
                    continue 'retry;
                }

                // A packet through COBALT.
                let (packet, enqueued) = loop {
                    let flow = store.cake.flows.get_mut(idx);
                    let Some((mut packet, enqueued)) = store.packets.pop_front(&mut flow.packets)
                    else {
                        self.retire(store, tin, idx, now);
                        if checked && self.choice.busy(tin) {
                            continue 'retry;
                        }
                        continue 'begin;
                    };
                    let len = packet.len_bytes();
                    flow.len -= 1;
                    flow.backlog -= len;
                    let b = &mut self.tins[tin];
                    b.tin_backlog -= len;
                    self.counts.remove(len);
                    self.buffer_used = self.buffer_used.saturating_sub(packet.truesize());
                    let bulk = if self.config.ingress {
                        u32::from(b.bulk_flow_count)
                    } else {
                        0
                    };
                    // BLUE's coin, tossed only while BLUE is active, as the kernel does; the
                    // sequence moves on either way.
                    let random = if store.cake.flows.get(idx).state.cvars.p_drop == 0 {
                        super::random::skip_random(&mut self.random);
                        0
                    } else {
                        self.next_random()
                    };
                    let cparams = self.tins[tin].cparams;
                    let flow = store.cake.flows.get_mut(idx);
                    let drop = flow.state.cvars.should_drop(
                        &cparams,
                        now,
                        now.saturating_sub(enqueued),
                        bulk,
                        || packet.set_ce(),
                        random,
                    );
                    // The last packet of a queue may be marked, never dropped.
                    if !drop || flow.len == 0 {
                        break (packet, enqueued);
                    }
                    flow.state.dropped = flow.state.dropped.wrapping_add(1);
                    if self.config.ingress {
                        let charged = self.charged(&packet);
                        self.advance_shaper(tin, charged, now, true);
                        store.cake.flows.get_mut(idx).deficit -= charged as i32;
                        self.tins[tin].tin_deficit -= charged as i32;
                        self.choice.charged(&self.tins, tin);
                    }
                    self.tins[tin].tin_dropped = self.tins[tin].tin_dropped.wrapping_add(1);
                    self.counts.drops += 1;
                    store.dropped.push(packet);
                    if self.config.ingress {
                        checked = false;
                        continue 'retry;
                    }
                };

                let marked = store.cake.flows.get(idx).state.cvars.ecn_marked;
                let b = &mut self.tins[tin];
                b.tin_ecn_mark = b.tin_ecn_mark.wrapping_add(u32::from(marked));
                let delay = now.saturating_sub(enqueued);
                b.avge_delay = ewma(b.avge_delay, delay, 8);
                b.peak_delay = ewma(
                    b.peak_delay,
                    delay,
                    if delay > b.peak_delay { 2 } else { 8 },
                );
                b.base_delay = ewma(
                    b.base_delay,
                    delay,
                    if delay < b.base_delay { 2 } else { 8 },
                );
                let charged = self.charged(&packet);
                self.advance_shaper(tin, charged, now, false);
                store.cake.flows.get_mut(idx).deficit -= charged as i32;
                self.tins[tin].tin_deficit -= charged as i32;
                self.choice.charged(&self.tins, tin);
                return Some(packet);
            }
        }
    }

    /// A queue was served and found empty (`cake_dequeue`): it waits on the decaying list
    /// while its COBALT state has not come to rest, else it leaves the rotation and its
    /// record is freed.
    #[inline]
    fn retire<P>(&mut self, store: &mut LeafStore<P>, tin: usize, idx: u32, now: u64) {
        let mode = self.config.flow_mode;
        let b = &mut self.tins[tin];
        let flow = store.cake.flows.get_mut(idx);
        if flow.state.cvars.queue_empty(&b.cparams, now) {
            b.unresponsive_flow_count = b.unresponsive_flow_count.saturating_sub(1);
        }
        let set = flow.state.set;
        let resting = flow.state.cvars.at_rest(now);
        flow.state.set = if resting {
            FlowSet::None
        } else {
            FlowSet::Decaying
        };
        match set {
            FlowSet::Bulk => b.bulk_flow_count -= 1,
            FlowSet::Sparse | FlowSet::SparseWait => b.sparse_flow_count -= 1,
            FlowSet::Decaying if resting => b.decaying_flow_count -= 1,
            FlowSet::Decaying | FlowSet::None => {}
        }
        if !resting && set != FlowSet::Decaying {
            b.decaying_flow_count += 1;
        }
        b.move_to(
            &mut store.cake.flows,
            idx,
            if resting {
                ListTag::Unlinked
            } else {
                ListTag::Dormant
            },
        );
        self.choice.emptied(&self.tins, tin);
        if set == FlowSet::Bulk {
            slots(&mut self.flow_index, &mut self.host_index, &mut store.cake)
                .bulk_count(idx, mode, -1);
        }
        if resting {
            slots(&mut self.flow_index, &mut self.host_index, &mut store.cake).free_queue(idx);
        } else {
            self.decaying_tins |= 1 << tin;
        }
    }

    /// Frees the oldest decaying queues of each tin once their COBALT state has come to rest,
    /// or has not been touched for a second: the kernel serves decaying queues only while it
    /// has packets, so an idle `cake` would keep them (and their BLUE probability) until its
    /// next packet; freeing them lets an idle leaf hold no records. Bounded work per call.
    fn trim_decaying<P>(&mut self, store: &mut LeafStore<P>, now: u64) {
        // At most once a millisecond: busy leaves free their rested queues in dequeue anyway.
        if now < self.next_trim {
            return;
        }
        self.next_trim = now.saturating_add(TRIM_EVERY_NS);
        // In tin order, as a walk over every tin would free them.
        let mut tins = u32::from(self.decaying_tins) & ((1 << self.tins.len()) - 1);
        while tins != 0 {
            let tin = tins.trailing_zeros() as usize;
            tins &= tins - 1;
            for _ in 0..TRIM_PER_CALL {
                let Some(idx) = self.tins[tin].decaying_flows.front() else {
                    break;
                };
                let cvars = store.cake.flows.get(idx).state.cvars;
                let touched = cvars.drop_next.max(cvars.blue_timer);
                if !cvars.at_rest(now) && now < touched.saturating_add(STALE_NS) {
                    break;
                }
                self.tins[tin]
                    .decaying_flows
                    .remove(&mut store.cake.flows, idx);
                self.tins[tin].decaying_flow_count -= 1;
                store.cake.flows.get_mut(idx).state.set = FlowSet::None;
                slots(&mut self.flow_index, &mut self.host_index, &mut store.cake).free_queue(idx);
            }
            if self.tins[tin].decaying_flows.is_empty() {
                self.decaying_tins &= !(1 << tin);
            }
        }
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
