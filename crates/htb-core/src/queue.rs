//! Leaf queues: what holds a class's packets while it waits for tokens.
//!
//! The kernel gives every leaf a `pfifo` qdisc with `limit = txqueuelen` (1000). Here a leaf
//! queue is anything implementing [`LeafQueue`]; [`Fifo`] is the default. All FIFOs of one
//! scheduler keep their packets in one [`PacketPool`] (an arena of singly linked slots), so
//! 100 000 idle classes cost 24 bytes each and no heap allocation, and the pool only grows
//! when the total backlog reaches a new high-water mark.

use alloc::vec::Vec;

use crate::Packet;
use crate::time::Instant;

/// The queue discipline of a leaf class.
///
/// Implementations must be work-conserving for now: a non-empty queue returns a packet from
/// [`dequeue`](LeafQueue::dequeue). (The scheduler copes with one that does not, as the kernel
/// does for `tbf` or `netem` leaves, by skipping the class for this round.)
pub trait LeafQueue<P: Packet> {
    /// Storage shared by all leaf queues of one scheduler, such as a packet pool.
    type Shared: Default;

    /// An empty queue holding at most `limit` packets.
    fn new(limit: u32) -> Self;

    /// Appends `packet`, or hands it back when the queue refuses it (full).
    ///
    /// # Errors
    /// Returns the packet when it was not queued; the scheduler counts it as a drop.
    fn enqueue(&mut self, shared: &mut Self::Shared, packet: P, now: Instant) -> Result<(), P>;

    /// Removes the next packet to send.
    fn dequeue(&mut self, shared: &mut Self::Shared, now: Instant) -> Option<P>;

    /// Packets queued.
    fn len(&self) -> u32;

    /// Whether no packet is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes queued (sum of [`Packet::len_bytes`]).
    fn backlog_bytes(&self) -> u64;

    /// The packet limit.
    fn limit(&self) -> u32;

    /// Changes the packet limit; packets already queued stay queued.
    fn set_limit(&mut self, limit: u32);
}

const NONE: u32 = u32::MAX;

#[derive(Debug)]
struct PoolSlot<P> {
    packet: Option<P>,
    next: u32,
}

/// Packets of all [`Fifo`]s of one scheduler, in singly linked slots with a free list.
#[derive(Debug)]
pub struct PacketPool<P> {
    slots: Vec<PoolSlot<P>>,
    free: u32,
}

impl<P> Default for PacketPool<P> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: NONE,
        }
    }
}

impl<P> PacketPool<P> {
    /// Preallocates room for `packets` packets so that no enqueue allocates until the total
    /// backlog exceeds it.
    pub fn reserve(&mut self, packets: usize) {
        self.slots.reserve(packets.saturating_sub(self.slots.len()));
    }

    /// Slots ever allocated (the high-water mark of the total backlog).
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Stores `packet` in a slot, or hands it back if the pool already holds `u32::MAX - 1`
    /// packets (slot indices are `u32`).
    fn alloc(&mut self, packet: P) -> Result<u32, P> {
        if self.free != NONE {
            let slot = self.free;
            let entry = &mut self.slots[slot as usize];
            self.free = entry.next;
            entry.packet = Some(packet);
            entry.next = NONE;
            return Ok(slot);
        }
        match u32::try_from(self.slots.len()) {
            Ok(slot) if slot != NONE => {
                self.slots.push(PoolSlot {
                    packet: Some(packet),
                    next: NONE,
                });
                Ok(slot)
            }
            _ => Err(packet),
        }
    }

    /// Frees `slot`, returning its packet and its successor.
    fn release(&mut self, slot: u32) -> (Option<P>, u32) {
        let entry = &mut self.slots[slot as usize];
        let packet = entry.packet.take();
        let next = entry.next;
        entry.next = self.free;
        self.free = slot;
        (packet, next)
    }
}

/// A first-in first-out queue with a packet limit: the kernel's default `pfifo` leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fifo {
    head: u32,
    tail: u32,
    len: u32,
    limit: u32,
    bytes: u64,
}

impl<P: Packet> LeafQueue<P> for Fifo {
    type Shared = PacketPool<P>;

    fn new(limit: u32) -> Self {
        Self {
            head: NONE,
            tail: NONE,
            len: 0,
            limit,
            bytes: 0,
        }
    }

    #[inline]
    fn enqueue(&mut self, pool: &mut PacketPool<P>, packet: P, _now: Instant) -> Result<(), P> {
        if self.len >= self.limit {
            return Err(packet);
        }
        let len = u64::from(packet.len_bytes());
        let slot = pool.alloc(packet)?;
        if self.tail == NONE {
            self.head = slot;
        } else {
            pool.slots[self.tail as usize].next = slot;
        }
        self.tail = slot;
        self.len += 1;
        self.bytes += len;
        Ok(())
    }

    #[inline]
    fn dequeue(&mut self, pool: &mut PacketPool<P>, _now: Instant) -> Option<P> {
        if self.head == NONE {
            return None;
        }
        let (packet, next) = pool.release(self.head);
        self.head = next;
        if next == NONE {
            self.tail = NONE;
        }
        self.len -= 1;
        if let Some(p) = &packet {
            self.bytes -= u64::from(p.len_bytes());
        }
        packet
    }

    fn len(&self) -> u32 {
        self.len
    }

    fn backlog_bytes(&self) -> u64 {
        self.bytes
    }

    fn limit(&self) -> u32 {
        self.limit
    }

    fn set_limit(&mut self, limit: u32) {
        self.limit = limit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_order_limit_and_bytes() {
        let mut pool = PacketPool::<u32>::default();
        let mut a: Fifo = LeafQueue::<u32>::new(3);
        let mut b: Fifo = LeafQueue::<u32>::new(3);
        let now = Instant::ZERO;
        for len in [100u32, 200, 300] {
            assert!(a.enqueue(&mut pool, len, now).is_ok());
        }
        assert_eq!(a.enqueue(&mut pool, 400, now), Err(400), "limit reached");
        assert!(b.enqueue(&mut pool, 7, now).is_ok());
        assert_eq!(LeafQueue::<u32>::backlog_bytes(&a), 600);
        assert_eq!(a.dequeue(&mut pool, now), Some(100));
        assert!(a.enqueue(&mut pool, 400, now).is_ok());
        assert_eq!(a.dequeue(&mut pool, now), Some(200));
        assert_eq!(b.dequeue(&mut pool, now), Some(7));
        assert_eq!(a.dequeue(&mut pool, now), Some(300));
        assert_eq!(a.dequeue(&mut pool, now), Some(400));
        assert_eq!(a.dequeue(&mut pool, now), None);
        assert_eq!(LeafQueue::<u32>::len(&a), 0);
        assert_eq!(LeafQueue::<u32>::backlog_bytes(&a), 0);
        assert_eq!(pool.capacity(), 4, "slots are recycled");
    }
}
