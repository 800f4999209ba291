//! Statistics: what `tc -s class show` prints.

use crate::class_id::ClassId;

/// A class's state in the three-colour model (`enum htb_cmode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Mode {
    /// Over `ceil`: may neither send nor borrow ("red", `HTB_CANT_SEND`).
    CantSend = 0,
    /// Over `rate`, under `ceil`: may borrow from an ancestor ("yellow", `HTB_MAY_BORROW`).
    MayBorrow = 1,
    /// Under `rate`: may send ("green", `HTB_CAN_SEND`).
    CanSend = 2,
}

/// The counters the kernel keeps for every qdisc and class (`struct gnet_stats_basic` and
/// `struct gnet_stats_queue`): one block for the core's classes and the control socket's
/// qdiscs, classes and leaf qdiscs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QueueCounters {
    /// Bytes sent (an inner class: by its whole subtree).
    pub bytes: u64,
    /// Packets sent.
    pub packets: u64,
    /// Packets dropped: a full leaf queue, AQM, or purged by a tree change.
    pub drops: u64,
    /// A class: transitions into [`Mode::CantSend`] (ceil exhausted), not packets. A qdisc:
    /// its classes' sum, or the times its shaper held packets back (`cake`).
    pub overlimits: u64,
    /// Always 0: nothing here requeues. Kept because tc prints it.
    pub requeues: u64,
    /// Bytes queued (leaves only).
    pub backlog_bytes: u64,
    /// Packets queued (leaves only).
    pub backlog_packets: u64,
}

impl QueueCounters {
    /// Adds `other`'s counts (the same class on several workers, or several classes). Every
    /// field is named, so that a counter added to the struct does not compile until it is
    /// summed here (a merge that forgot one would report one worker's value).
    pub fn add(&mut self, other: &Self) {
        let Self {
            bytes,
            packets,
            drops,
            overlimits,
            requeues,
            backlog_bytes,
            backlog_packets,
        } = *other;
        self.bytes += bytes;
        self.packets += packets;
        self.drops += drops;
        self.overlimits += overlimits;
        self.requeues += requeues;
        self.backlog_bytes += backlog_bytes;
        self.backlog_packets += backlog_packets;
    }
}

/// Per-class statistics, everything `tc -s class show` prints for an HTB class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassStats {
    /// The class.
    pub id: ClassId,
    /// Bytes and packets sent, drops, overlimits, backlog.
    pub queue: QueueCounters,
    /// Packets sent on this class's own rate (leaf) or lent to its subtree (inner) (`lended`).
    pub lends: u64,
    /// Packets sent on tokens borrowed from an ancestor (`borrowed`).
    pub borrows: u64,
    /// Always 0 (`giants`, dead in the kernel since rate tables went).
    pub giants: u64,
    /// Rate-bucket credit in 64 ns psched ticks, clamped to `i32`, as tc prints `tokens:`.
    pub tokens: i32,
    /// Ceil-bucket credit in 64 ns ticks (`ctokens:`).
    pub ctokens: i32,
    /// Current mode.
    pub mode: Mode,
    /// Level in the tree: 0 for leaves, 7 for root classes with children.
    pub level: u8,
}

impl ClassStats {
    /// The same class's state with its counters at zero: the base several workers' counters
    /// are summed into ([`add_counters`](Self::add_counters)).
    #[must_use]
    pub fn without_counters(self) -> Self {
        Self {
            queue: QueueCounters::default(),
            lends: 0,
            borrows: 0,
            giants: 0,
            ..self
        }
    }

    /// Adds the counters of the same class on another worker; its state (buckets, mode,
    /// level) stays this one's. Every field is named, so that a field added to the struct does
    /// not compile until it is either summed or kept here.
    pub fn add_counters(&mut self, other: &Self) {
        let Self {
            id: _,
            queue,
            lends,
            borrows,
            giants,
            tokens: _,
            ctokens: _,
            mode: _,
            level: _,
        } = *other;
        self.queue.add(&queue);
        self.lends += lends;
        self.borrows += borrows;
        self.giants += giants;
    }
}

/// Scheduler-wide statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Packets queued in leaves.
    pub qlen: u64,
    /// Bytes queued in leaves.
    pub backlog_bytes: u64,
    /// Packets queued in the direct queue.
    pub direct_qlen: u32,
    /// Packets ever put in the direct queue (`direct_packets_stat`).
    pub direct_packets: u64,
    /// Packets sent from the direct queue.
    pub direct_packets_sent: u64,
    /// Bytes sent from the direct queue.
    pub direct_bytes_sent: u64,
    /// Packets refused by a full direct queue.
    pub direct_drops: u64,
    /// Packets sent (direct queue included).
    pub packets_sent: u64,
    /// Bytes sent (direct queue included).
    pub bytes_sent: u64,
    /// Packets dropped: leaf queues full, direct queue full, or purged by tree changes.
    pub drops: u64,
    /// Sum of all classes' overlimits (the qdisc's `overlimits`).
    pub overlimits: u64,
    /// Wait-queue events processed.
    pub events: u64,
    /// Times a leaf that held its packets back (a shaping `cake`) rejoined the round.
    pub leaf_wakeups: u64,
    /// Times the per-call event budget ran out ("htb: too many events!", counted not printed).
    pub event_budget_exhausted: u64,
    /// Internal inconsistencies survived without a panic (should stay 0; the kernel would
    /// `WARN_ON`).
    pub internal_faults: u64,
}

impl SchedulerStats {
    /// Adds another scheduler's (the same tree on another worker): every field is a count,
    /// and every field is named, so that one added to the struct does not compile until it is
    /// summed here.
    pub fn add(&mut self, other: &Self) {
        let Self {
            qlen,
            backlog_bytes,
            direct_qlen,
            direct_packets,
            direct_packets_sent,
            direct_bytes_sent,
            direct_drops,
            packets_sent,
            bytes_sent,
            drops,
            overlimits,
            events,
            leaf_wakeups,
            event_budget_exhausted,
            internal_faults,
        } = *other;
        self.qlen += qlen;
        self.backlog_bytes += backlog_bytes;
        self.direct_qlen += direct_qlen;
        self.direct_packets += direct_packets;
        self.direct_packets_sent += direct_packets_sent;
        self.direct_bytes_sent += direct_bytes_sent;
        self.direct_drops += direct_drops;
        self.packets_sent += packets_sent;
        self.bytes_sent += bytes_sent;
        self.drops += drops;
        self.overlimits += overlimits;
        self.events += events;
        self.leaf_wakeups += leaf_wakeups;
        self.event_budget_exhausted += event_budget_exhausted;
        self.internal_faults += internal_faults;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(bytes: u64, tokens: i32, mode: Mode) -> ClassStats {
        ClassStats {
            id: ClassId::new(1, 10),
            queue: QueueCounters {
                bytes,
                packets: bytes / 100,
                drops: 1,
                overlimits: 2,
                requeues: 0,
                backlog_bytes: 100,
                backlog_packets: 1,
            },
            lends: 3,
            borrows: 4,
            giants: 0,
            tokens,
            ctokens: tokens,
            mode,
            level: 0,
        }
    }

    #[test]
    fn a_class_on_two_workers_sums_its_counters_and_keeps_the_speakers_state() {
        let speaker = class(1000, 77, Mode::MayBorrow);
        let other = class(500, -5, Mode::CantSend);
        let mut merged = speaker.without_counters();
        merged.add_counters(&speaker);
        merged.add_counters(&other);
        assert_eq!(merged.queue.bytes, 1500);
        assert_eq!(merged.queue.packets, 15);
        assert_eq!(merged.queue.drops, 2);
        assert_eq!(merged.queue.backlog_packets, 2);
        assert_eq!((merged.lends, merged.borrows), (6, 8));
        assert_eq!((merged.tokens, merged.mode), (77, Mode::MayBorrow));
    }

    #[test]
    fn schedulers_sum_every_counter() {
        let one = SchedulerStats {
            qlen: 1,
            backlog_bytes: 2,
            direct_qlen: 3,
            direct_packets: 4,
            direct_packets_sent: 5,
            direct_bytes_sent: 6,
            direct_drops: 7,
            packets_sent: 8,
            bytes_sent: 9,
            drops: 10,
            overlimits: 11,
            events: 12,
            leaf_wakeups: 13,
            event_budget_exhausted: 14,
            internal_faults: 15,
        };
        let mut sum = one;
        sum.add(&one);
        // Each field doubled (the merge once forgot leaf_wakeups).
        assert_eq!(sum.leaf_wakeups, 26);
        assert_eq!(sum.internal_faults, 30);
        assert_eq!(sum.direct_qlen, 6);
        assert_eq!(sum.qlen + sum.events, 26);
    }
}
