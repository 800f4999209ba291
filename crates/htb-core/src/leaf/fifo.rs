//! `pfifo` and `bfifo` (`net/sched/sch_fifo.c`): tail drop at a packet or byte limit. Their
//! spec is one `limit`, kept in [`LeafSpec`](super::LeafSpec)'s own variants; its option and
//! default are here.

use crate::CheckError;
use alloc::format;

use super::options::{LeafOption, OptionValue};
use super::pool::{PacketList, PacketPool};
use super::port::DEFAULT_PSCHED_MTU;
use crate::Packet;

/// The kernel's default `txqueuelen`, which sizes `pfifo` and `bfifo` without a limit.
pub const DEFAULT_TXQUEUELEN: u32 = 1000;

/// `pfifo`'s option: its limit in packets.
pub(super) const PFIFO_OPTIONS: [LeafOption; 1] = [LeafOption::new("limit", OptionValue::Packets)];
/// `bfifo`'s option: its limit in bytes.
pub(super) const BFIFO_OPTIONS: [LeafOption; 1] = [LeafOption::new("limit", OptionValue::Size)];

/// A FIFO's queue and limit, in packets (`pfifo`) or bytes (`bfifo`): which, and the packets it
/// refused, its owner keeps (a leaf's slot, [`Leaf::Fifo`](super::Leaf), in the bytes its box
/// pointer leaves over; tbf in its counters). 24 bytes, so that a boxed fifo takes one 32-byte
/// heap chunk, not 48: with 100 000 leaves round-robin, a packet's enqueue misses half a cache
/// line on it, not three quarters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fifo {
    packets: PacketList,
    len: u32,
    limit: u32,
    backlog: u64,
}

impl Fifo {
    pub(crate) fn new(limit: u32) -> Self {
        Self {
            packets: PacketList::EMPTY,
            len: 0,
            limit,
            backlog: 0,
        }
    }

    /// `fifo_init`'s limit: the one given, or the port's `txqueuelen` in packets (`pfifo`),
    /// times its MTU in bytes (`bfifo`).
    pub(super) fn limit_or_default(limit: Option<u32>, bytes_limit: bool) -> u32 {
        limit.unwrap_or(if bytes_limit {
            DEFAULT_TXQUEUELEN * DEFAULT_PSCHED_MTU
        } else {
            DEFAULT_TXQUEUELEN
        })
    }

    /// `pfifo_enqueue` (`bytes_limit` false) / `bfifo_enqueue` (true); a packet over the
    /// limit comes back, for the owner to count as dropped.
    #[inline]
    pub(crate) fn enqueue<P: Packet>(
        &mut self,
        pool: &mut PacketPool<P>,
        packet: P,
        now: u64,
        bytes_limit: bool,
    ) -> Result<(), P> {
        let len = u64::from(packet.len_bytes());
        let fits = if bytes_limit {
            self.backlog + len <= u64::from(self.limit)
        } else {
            self.len < self.limit
        };
        if !fits {
            return Err(packet);
        }
        pool.push_back(&mut self.packets, packet, now)?;
        self.len += 1;
        self.backlog += len;
        Ok(())
    }

    /// The length of the packet at the head, without taking it (what `tbf_dequeue` peeks at).
    pub(crate) fn head_len<P: Packet>(&self, pool: &PacketPool<P>) -> Option<u32> {
        pool.iter(self.packets).next().map(Packet::len_bytes)
    }

    #[inline]
    pub(crate) fn dequeue<P: Packet>(&mut self, pool: &mut PacketPool<P>) -> Option<P> {
        let (packet, _) = pool.pop_front(&mut self.packets)?;
        self.len -= 1;
        self.backlog -= u64::from(packet.len_bytes());
        Some(packet)
    }

    /// Takes everything out (`qdisc_reset`).
    pub(crate) fn purge<P: Packet>(&mut self, pool: &mut PacketPool<P>, out: &mut impl FnMut(P)) {
        while let Some(p) = self.dequeue(pool) {
            out(p);
        }
    }

    /// `fifo_init` on change: the new limit; queued packets stay, as in the kernel.
    pub(crate) fn set_limit(&mut self, limit: u32) {
        self.limit = limit;
    }

    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    pub(crate) fn backlog(&self) -> u64 {
        self.backlog
    }

    pub(crate) fn limit(&self) -> u32 {
        self.limit
    }

    pub(crate) fn check<P: Packet>(&self, pool: &PacketPool<P>) -> Result<(), CheckError> {
        let (n, bytes) = super::count_list(pool, self.packets);
        if (n, bytes) != (self.len, self.backlog) {
            return Err(CheckError(format!(
                "fifo holds {n} packets / {bytes} B, counters say {} / {}",
                self.len, self.backlog
            )));
        }
        Ok(())
    }
}
