//! What a flow-queueing leaf holds and has dropped: the kernel's `sch->q.qlen` with
//! `sch->qstats.backlog` and `.drops`, kept once for sfq, fq_codel and cake.

/// Packets and bytes a leaf holds, and packets it has dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct QueueCounts {
    /// Packets held (`sch->q.qlen`).
    pub(crate) len: u32,
    /// Bytes held (`sch->qstats.backlog`).
    pub(crate) backlog: u64,
    /// Packets dropped since the leaf was made (`sch->qstats.drops`).
    pub(crate) drops: u64,
}

impl QueueCounts {
    /// A packet of `bytes` taken in (`qdisc_qstats_backlog_inc` and `qlen++`).
    #[inline]
    pub(crate) fn add(&mut self, bytes: u32) {
        self.len += 1;
        self.backlog += u64::from(bytes);
    }

    /// A packet of `bytes` let go (`qdisc_qstats_backlog_dec` and `qlen--`).
    #[inline]
    pub(crate) fn remove(&mut self, bytes: u32) {
        self.len -= 1;
        self.backlog -= u64::from(bytes);
    }

    /// Nothing held any more, as after `qdisc_reset`; drops are kept.
    pub(crate) fn emptied(&mut self) {
        self.len = 0;
        self.backlog = 0;
    }
}
