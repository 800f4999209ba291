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
    /// Adds `other`'s counts (the same class on several workers, or several classes).
    pub fn add(&mut self, other: &Self) {
        self.bytes += other.bytes;
        self.packets += other.packets;
        self.drops += other.drops;
        self.overlimits += other.overlimits;
        self.requeues += other.requeues;
        self.backlog_bytes += other.backlog_bytes;
        self.backlog_packets += other.backlog_packets;
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
