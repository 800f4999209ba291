//! The packets of every leaf of one scheduler, in one arena of doubly linked slots.
//!
//! A leaf queue is a [`PacketList`] (head and tail slot indices) into this pool, so an idle
//! leaf costs eight bytes here and nothing is allocated per packet: the pool only grows when
//! the total backlog reaches a new high-water mark, and freed slots are reused first. Each slot
//! also remembers when its packet was enqueued (CoDel's sojourn time, `codel_set_enqueue_time`).

use alloc::vec::Vec;

/// "No slot" (end of a list).
pub(crate) const NONE: u32 = u32::MAX;

#[derive(Debug)]
struct Slot<P> {
    packet: Option<P>,
    prev: u32,
    next: u32,
    /// When the packet was enqueued, ns on the scheduler's clock.
    enqueued: u64,
}

/// A FIFO of packets in a [`PacketPool`]: head and tail slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PacketList {
    head: u32,
    tail: u32,
}

impl PacketList {
    pub(crate) const EMPTY: Self = Self {
        head: NONE,
        tail: NONE,
    };

    /// The last slot ([`NONE`] when empty).
    pub(crate) fn tail(self) -> u32 {
        self.tail
    }
}

impl Default for PacketList {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// Packets of all leaf queues of one scheduler.
#[derive(Debug)]
pub struct PacketPool<P> {
    slots: Vec<Slot<P>>,
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

    /// Appends `packet`, enqueued at `now` ns, to `list`; hands it back when the pool already
    /// holds `u32::MAX - 1` packets (slot indices are `u32`).
    pub(crate) fn push_back(
        &mut self,
        list: &mut PacketList,
        packet: P,
        now: u64,
    ) -> Result<(), P> {
        let slot = if self.free == NONE {
            match u32::try_from(self.slots.len()) {
                Ok(slot) if slot != NONE => {
                    self.slots.push(Slot {
                        packet: None,
                        prev: NONE,
                        next: NONE,
                        enqueued: 0,
                    });
                    slot
                }
                _ => return Err(packet),
            }
        } else {
            let slot = self.free;
            self.free = self.slots[slot as usize].next;
            slot
        };
        let entry = &mut self.slots[slot as usize];
        entry.packet = Some(packet);
        entry.prev = list.tail;
        entry.next = NONE;
        entry.enqueued = now;
        if list.tail == NONE {
            list.head = slot;
        } else {
            self.slots[list.tail as usize].next = slot;
        }
        list.tail = slot;
        Ok(())
    }

    /// Takes the first packet of `list`, with its enqueue time.
    pub(crate) fn pop_front(&mut self, list: &mut PacketList) -> Option<(P, u64)> {
        let slot = list.head;
        if slot == NONE {
            return None;
        }
        let next = self.slots[slot as usize].next;
        list.head = next;
        if next == NONE {
            list.tail = NONE;
        } else {
            self.slots[next as usize].prev = NONE;
        }
        self.release(slot)
    }

    /// Takes the last packet of `list` (a tail drop).
    pub(crate) fn pop_back(&mut self, list: &mut PacketList) -> Option<(P, u64)> {
        let slot = list.tail;
        if slot == NONE {
            return None;
        }
        let prev = self.slots[slot as usize].prev;
        list.tail = prev;
        if prev == NONE {
            list.head = NONE;
        } else {
            self.slots[prev as usize].next = NONE;
        }
        self.release(slot)
    }

    /// Packets held by all lists (slots not on the free list); walks the free list.
    pub(crate) fn in_use(&self) -> usize {
        let mut free = 0;
        let mut slot = self.free;
        while slot != NONE {
            free += 1;
            slot = self.slots[slot as usize].next;
        }
        self.slots.len() - free
    }

    /// The packets of `list`, first to last.
    pub(crate) fn iter(&self, list: PacketList) -> impl Iterator<Item = &P> + '_ {
        let mut slot = list.head;
        core::iter::from_fn(move || {
            let entry = self.slots.get(slot as usize)?;
            slot = entry.next;
            entry.packet.as_ref()
        })
    }

    /// The slots of `list` with their packets, first to last (for a leaf that removes from
    /// the middle: `cake`'s ACK filter).
    pub(crate) fn entries(&self, list: PacketList) -> impl Iterator<Item = (u32, &P)> + '_ {
        let mut slot = list.head;
        core::iter::from_fn(move || {
            let entry = self.slots.get(slot as usize)?;
            let this = slot;
            slot = entry.next;
            entry.packet.as_ref().map(|p| (this, p))
        })
    }

    /// The last packet of `list`.
    pub(crate) fn back(&self, list: PacketList) -> Option<&P> {
        self.slots.get(list.tail as usize)?.packet.as_ref()
    }

    /// The slot after `slot` in its list ([`NONE`] at the end).
    pub(crate) fn next_slot(&self, slot: u32) -> u32 {
        self.slots.get(slot as usize).map_or(NONE, |s| s.next)
    }

    /// Takes the packet in `slot`, which must be on `list`.
    pub(crate) fn remove(&mut self, list: &mut PacketList, slot: u32) -> Option<(P, u64)> {
        let (prev, next) = {
            let entry = self.slots.get(slot as usize)?;
            (entry.prev, entry.next)
        };
        if prev == NONE {
            list.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NONE {
            list.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
        self.release(slot)
    }

    fn release(&mut self, slot: u32) -> Option<(P, u64)> {
        let entry = &mut self.slots[slot as usize];
        let packet = entry.packet.take();
        let enqueued = entry.enqueued;
        entry.next = self.free;
        entry.prev = NONE;
        self.free = slot;
        packet.map(|p| (p, enqueued))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_share_slots_and_recycle_them() {
        let mut pool = PacketPool::<u32>::default();
        let (mut a, mut b) = (PacketList::EMPTY, PacketList::EMPTY);
        for (i, len) in [100u32, 200, 300].into_iter().enumerate() {
            pool.push_back(&mut a, len, i as u64).unwrap();
        }
        pool.push_back(&mut b, 7, 9).unwrap();
        assert_eq!(pool.iter(a).copied().collect::<Vec<_>>(), [100, 200, 300]);
        assert_eq!(pool.pop_back(&mut a), Some((300, 2)));
        assert_eq!(pool.pop_front(&mut a), Some((100, 0)));
        assert_eq!(pool.iter(a).next(), Some(&200));
        assert_eq!(pool.in_use(), 2);
        pool.push_back(&mut a, 400, 5).unwrap();
        assert_eq!(pool.pop_front(&mut b), Some((7, 9)));
        assert_eq!(b, PacketList::EMPTY);
        assert_eq!(pool.pop_front(&mut a), Some((200, 1)));
        assert_eq!(pool.pop_back(&mut a), Some((400, 5)));
        assert_eq!(pool.pop_front(&mut a), None);
        assert_eq!(a, PacketList::EMPTY);
        assert_eq!(pool.capacity(), 4, "slots are recycled");
    }

    #[test]
    fn a_packet_leaves_the_middle_of_a_list() {
        let mut pool = PacketPool::<u32>::default();
        let mut a = PacketList::EMPTY;
        for len in [1u32, 2, 3, 4] {
            pool.push_back(&mut a, len, 0).unwrap();
        }
        let slots: Vec<u32> = pool.entries(a).map(|(s, _)| s).collect();
        assert_eq!(pool.remove(&mut a, slots[1]), Some((2, 0)));
        assert_eq!(pool.iter(a).copied().collect::<Vec<_>>(), [1, 3, 4]);
        assert_eq!(pool.remove(&mut a, slots[3]), Some((4, 0)));
        assert_eq!(pool.back(a), Some(&3));
        assert_eq!(pool.remove(&mut a, slots[0]), Some((1, 0)));
        assert_eq!(pool.next_slot(slots[2]), NONE);
        assert_eq!(pool.pop_front(&mut a), Some((3, 0)));
        assert_eq!(a, PacketList::EMPTY);
    }
}
