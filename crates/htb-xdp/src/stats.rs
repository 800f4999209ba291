//! The data plane's counters, as the control plane and `htbd`'s statistics read them.

use crate::crew::HandoffCounts;
use crate::program::Verdicts;
use crate::rings::FrameCounts;

/// Counters of one port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Interface name.
    pub name: String,
    /// Frames received from the socket.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames sent out of this port.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames dropped by this port's scheduler: a full queue, or its leaf's AQM (CoDel) or
    /// limits.
    pub drops_queue: u64,
    /// Frames received here whose egress could not be determined.
    pub drops_no_egress: u64,
    /// Frames dropped because the UMEM was nearly exhausted.
    pub drops_pool: u64,
    /// Frames a filter's policer dropped (`action police … drop`), counted at the port they
    /// were bound for.
    pub drops_police: u64,
    /// Frames dropped from queues by control changes (class or qdisc deleted, leaf made inner).
    pub drops_purged: u64,
    /// Kernel socket counters (`XDP_STATISTICS`), summed over this port's sockets.
    pub xdp: XdpCounters,
}

impl PortStats {
    /// Adds the same port's counters from another worker. Every field is named, so that a
    /// counter added to the struct does not compile until it is summed here.
    pub fn add(&mut self, other: &Self) {
        let Self {
            name: _,
            rx_packets,
            rx_bytes,
            tx_packets,
            tx_bytes,
            drops_queue,
            drops_no_egress,
            drops_pool,
            drops_police,
            drops_purged,
            xdp,
        } = other;
        self.rx_packets += rx_packets;
        self.rx_bytes += rx_bytes;
        self.tx_packets += tx_packets;
        self.tx_bytes += tx_bytes;
        self.drops_queue += drops_queue;
        self.drops_no_egress += drops_no_egress;
        self.drops_pool += drops_pool;
        self.drops_police += drops_police;
        self.drops_purged += drops_purged;
        self.xdp.add(xdp);
    }
}

impl XdpCounters {
    /// Adds another socket's counters (every field named, as [`PortStats::add`]).
    pub fn add(&mut self, other: &Self) {
        let Self {
            rx_dropped,
            rx_ring_full,
            rx_fill_ring_empty,
            rx_invalid,
            tx_invalid,
        } = *other;
        self.rx_dropped += rx_dropped;
        self.rx_ring_full += rx_ring_full;
        self.rx_fill_ring_empty += rx_fill_ring_empty;
        self.rx_invalid += rx_invalid;
        self.tx_invalid += tx_invalid;
    }
}

/// The kernel's per-socket drop counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpCounters {
    /// Dropped for other reasons.
    pub rx_dropped: u64,
    /// Dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty.
    pub rx_fill_ring_empty: u64,
    /// Invalid RX descriptors.
    pub rx_invalid: u64,
    /// Invalid TX descriptors.
    pub tx_invalid: u64,
}

/// A snapshot of the engine's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Per port.
    pub ports: Vec<PortStats>,
    /// Where the UMEM's frames are.
    pub frames: FrameCounts,
    /// Packets queued in schedulers (`frames.packets_held` between passes).
    pub queued: u64,
    /// The XDP program's verdicts.
    pub verdicts: Verdicts,
    /// Loop iterations.
    pub loops: u64,
    /// Times the loop slept.
    pub sleeps: u64,
    /// Control jobs the loop ran between packet batches.
    pub jobs: JobTimes,
    /// Per data-plane worker.
    pub workers: Vec<WorkerStats>,
    /// The most stall credit a class gets per stall of its worker (`None`: none).
    pub stall_credit: Option<htb_core::Duration>,
    /// The flow tables' counters, summed over the workers (`None`: flows are not metered).
    pub flows: Option<crate::flow_table::FlowCounters>,
    /// Subtrees served by every worker at once (split), over all ports; the workers'
    /// `subtrees` count only those each owns.
    pub split_subtrees: u32,
}

/// One data-plane worker's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// The CPU it is pinned to.
    pub cpu: Option<usize>,
    /// Its passes.
    pub loops: u64,
    /// Times it slept.
    pub sleeps: u64,
    /// Frames queued in its schedulers.
    pub queued: u64,
    /// Subtrees it owns (over all ports); split subtrees are every worker's, counted in
    /// [`EngineStats::split_subtrees`].
    pub subtrees: u32,
    /// Frames it handed to other workers and took from them.
    pub handoffs: HandoffCounts,
    /// When it was kept from forwarding: each pass that began more than
    /// [`StallLog::FLOOR`](htb_core::StallLog::FLOOR) after it was due (the scheduler's wake-up
    /// it slept until, or the start of the previous pass when there was more to do). The time
    /// between is time the worker was kept from forwarding — the host (a VM's stolen time), the
    /// kernel, other threads on its CPU, a control job it was parked for, or a pass of its own
    /// that took that long — and a class loses what it could have sent meanwhile beyond its
    /// burst, unless stall credit gives it back. Lab measurements bound what a class owed with
    /// it.
    pub stalls: htb_core::StallLog,
}

/// Control jobs (changes, statistics copies) run on the data-plane thread: while one runs,
/// no packet moves, so the longest is the longest stall changes caused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobTimes {
    /// Jobs run.
    pub count: u64,
    /// Their total time in ns.
    pub total_ns: u64,
    /// The longest one, in ns, since the start.
    pub longest_ns: u64,
    /// The most CPU time one took, in ns, since the start: its own work, without what the
    /// host (a VM's stolen time) or the kernel took from the thread meanwhile, which
    /// `longest_ns` includes — where the kernel can tell (a guest kernel that is told its
    /// stolen time); elsewhere stolen time counts as the thread's.
    pub longest_cpu_ns: u64,
    /// The slowest jobs since the start, slowest first (unused places are zero): when and where
    /// each ran, so that a witness of the time taken from that CPU (a lab's) can tell a job's
    /// own time from a host's stall where the CPU clock cannot.
    pub slowest: [JobSpan; SLOWEST_JOBS],
}

/// How many of the slowest jobs [`JobTimes`] keeps.
pub const SLOWEST_JOBS: usize = 16;

/// One control job's run on the data-plane thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobSpan {
    /// `CLOCK_MONOTONIC` when it started, in ns.
    pub started_ns: u64,
    /// How long it ran, in ns.
    pub took_ns: u64,
    /// The CPU time it took, in ns.
    pub cpu_ns: u64,
    /// The CPU it ran on, when it started and ended on the same one.
    pub cpu: Option<u32>,
}

impl JobTimes {
    /// Counts one job.
    pub fn record(&mut self, span: JobSpan) {
        self.count += 1;
        self.total_ns += span.took_ns;
        self.longest_ns = self.longest_ns.max(span.took_ns);
        self.longest_cpu_ns = self.longest_cpu_ns.max(span.cpu_ns);
        if let Some(at) = self.slowest.iter().position(|s| s.took_ns < span.took_ns) {
            self.slowest.copy_within(at..SLOWEST_JOBS - 1, at + 1);
            self.slowest[at] = span;
        }
    }

    /// The slowest jobs recorded, slowest first.
    pub fn slowest(&self) -> impl Iterator<Item = &JobSpan> {
        self.slowest.iter().take_while(|s| s.took_ns > 0)
    }
}

/// One port's statistics, from [`Engine::class_stats`](crate::Engine::class_stats).
#[derive(Clone, Debug)]
pub struct PortSnapshot {
    /// Each tree's totals, by its qdisc major.
    pub schedulers: Vec<(u16, htb_core::SchedulerStats)>,
    /// The port's counters.
    pub port: PortStats,
    /// Per requested class, in request order.
    pub classes: Vec<Option<htb_core::ClassStats>>,
    /// Per requested class, its leaf qdisc's statistics (`None` for inner classes).
    pub leaves: Vec<Option<htb_core::LeafStats>>,
    /// Per requested class, its TCP round trips (`None`: none measured).
    pub rtt: Vec<Option<crate::rtt::ClassRtt>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(took_ns: u64) -> JobSpan {
        JobSpan {
            started_ns: took_ns * 10,
            took_ns,
            cpu_ns: took_ns / 2,
            cpu: Some(1),
        }
    }

    #[test]
    fn job_times_keep_the_slowest_jobs_slowest_first() {
        let mut times = JobTimes::default();
        // 20 jobs of 1..=20 ns in a scrambled order (7 is coprime to 20): the 16 slowest kept.
        for i in 0..20u64 {
            times.record(span(i * 7 % 20 + 1));
        }
        assert_eq!(times.count, 20);
        assert_eq!(times.total_ns, 210);
        assert_eq!((times.longest_ns, times.longest_cpu_ns), (20, 10));
        let kept: Vec<u64> = times.slowest().map(|s| s.took_ns).collect();
        assert_eq!(kept, (5..=20).rev().collect::<Vec<u64>>());
        assert_eq!(
            times.slowest[0],
            span(20),
            "each kept with its start and CPU"
        );
    }

    #[test]
    fn job_times_list_only_the_jobs_run() {
        let mut times = JobTimes::default();
        assert_eq!(times.slowest().count(), 0);
        times.record(span(4));
        times.record(span(4));
        assert_eq!(times.slowest().count(), 2, "equal times both kept");
    }
}
