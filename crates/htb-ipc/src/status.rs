//! `htb-cli status`: the data plane's own counters — where the UMEM's frames are, what each
//! port received, sent and dropped, and what the XDP program decided — for operators and for
//! the soak test's leak check.

use serde::{Deserialize, Serialize};

use crate::InterfaceName;

/// The daemon's data-plane state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The daemon's version.
    pub daemon: String,
    /// Its process id.
    pub pid: u32,
    /// Where the frames are.
    pub frames: FrameStatus,
    /// Per port, in configuration order.
    pub ports: Vec<PortStatus>,
    /// What the XDP program did with the frames it saw.
    pub xdp: XdpVerdicts,
    /// Passes of the data-plane loop.
    pub loops: u64,
    /// Times it slept.
    pub sleeps: u64,
    /// Control jobs it ran between packet batches (changes, statistics copies); forwarding
    /// waits while one runs.
    #[serde(default)]
    pub jobs: u64,
    /// Their total time in µs.
    #[serde(default)]
    pub jobs_us: u64,
    /// The longest one since the start, in µs: the longest stall changes caused.
    #[serde(default)]
    pub longest_job_us: u64,
    /// The most CPU time one took since the start, in µs: the job's own work, without time
    /// the host or the kernel took the CPU away meanwhile (which `longest_job_us` counts).
    #[serde(default)]
    pub longest_job_cpu_us: u64,
    /// The slowest jobs since the start (at most 16), slowest first: when each started, so that
    /// a witness of the time taken from its CPU can tell the job's own time from a host's
    /// stall where `longest_job_cpu_us` cannot (a guest kernel not told its stolen time counts
    /// it as the thread's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slowest_jobs: Vec<JobSpan>,
    /// Per data-plane worker (`loops`, `sleeps` and the frames above are their sums).
    #[serde(default)]
    pub workers: Vec<WorkerStatus>,
    /// Subtrees served by every worker at once (split), over all ports; each worker's
    /// `subtrees` counts those it owns.
    #[serde(default)]
    pub split_subtrees: u32,
    /// The most a class is given back per stall of its worker, in µs (`daemon.stall_credit`;
    /// 0: no stall credit).
    #[serde(default)]
    pub stall_credit_us: u64,
    /// The flow tables and their exporter (`None`: no `[flows]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<Box<crate::FlowStatus>>,
    /// The generation of the state it runs (`None` from a daemon that does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<crate::Generation>,
}

/// One control job's run on the data-plane thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpan {
    /// `CLOCK_MONOTONIC` when it started, in ns (the clock is the machine's, shared by every
    /// process on it).
    pub started_ns: u64,
    /// How long it ran, in µs.
    pub took_us: u64,
    /// The CPU time it took, in µs.
    pub cpu_us: u64,
    /// The CPU it ran on (`None`: it moved, or the kernel did not say).
    pub cpu: Option<u32>,
}

/// One data-plane worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// The CPU it is pinned to (`None`: not pinned).
    pub cpu: Option<u32>,
    /// Its passes.
    pub loops: u64,
    /// Times it slept.
    pub sleeps: u64,
    /// Packets queued in its schedulers.
    pub queued: u64,
    /// Subtrees it owns, over all ports (split ones are every worker's: `split_subtrees`).
    pub subtrees: u32,
    /// Frames it received for another worker's classes and handed over.
    pub handed_out: u64,
    /// Frames other workers handed to it.
    pub taken_in: u64,
    /// Frames dropped because the ring to their worker was full.
    pub handoff_drops: u64,
    /// Passes that began more than 200 µs after they were due (the scheduler's wake-up, or
    /// the start of the previous pass when there was more to do): the worker was kept from
    /// forwarding — by the host (a VM's stolen time), the kernel, other threads on its CPU, a
    /// control job or a long pass of its own. A class loses what it could have sent meanwhile
    /// beyond its burst, unless stall credit (`stall_credit_us`) gives it back. Logged by
    /// length, so that a measurement can bound what its classes owed
    /// ([`StallLog::beyond`](htb_core::StallLog::beyond)).
    #[serde(default)]
    pub stalls: htb_core::StallLog,
}

/// Where the UMEM's frames are. `free + in_fill + in_tx + held + between_workers = total`;
/// every frame the data plane holds between passes is queued: `held = queued`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameStatus {
    /// All frames.
    pub total: u32,
    /// In the free pool.
    pub free: u32,
    /// Lent to the kernel's fill (and RX) rings.
    pub in_fill: u32,
    /// In TX rings, not completed yet.
    pub in_tx: u32,
    /// Held by the data plane.
    pub held: u32,
    /// Packets queued in the schedulers.
    pub queued: u64,
    /// On their way from one data-plane worker to another (handed over to the worker that
    /// serves their class, or going back to their worker's pool).
    #[serde(default)]
    pub between_workers: u32,
}

impl Status {
    /// Every worker's stalls together (see [`WorkerStatus::stalls`]).
    #[must_use]
    pub fn stalls(&self) -> htb_core::StallLog {
        self.workers
            .iter()
            .fold(htb_core::StallLog::default(), |all, w| all.plus(&w.stalls))
    }

    /// Time the workers were kept from forwarding, summed over them, in µs.
    #[must_use]
    pub fn late_us(&self) -> u64 {
        self.stalls().total().as_nanos() / 1_000
    }
}

impl FrameStatus {
    /// Frames out of the free pool and the fill rings: what traffic is using.
    #[must_use]
    pub fn in_use(&self) -> u64 {
        u64::from(self.in_tx) + u64::from(self.held) + u64::from(self.between_workers)
    }
}

/// One port's counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStatus {
    /// Interface.
    pub dev: InterfaceName,
    /// Frames received from its sockets.
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames sent out of it.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Dropped by its scheduler (a full queue, the leaf's AQM or limits).
    pub drops_queue: u64,
    /// Dropped because the UMEM was nearly exhausted.
    pub drops_pool: u64,
    /// Dropped by a filter's policer.
    #[serde(default)]
    pub drops_police: u64,
    /// Received here with no egress port.
    pub drops_no_egress: u64,
    /// Dropped from queues by control changes.
    pub drops_purged: u64,
    /// The kernel's socket counters (`XDP_STATISTICS`): RX ring full.
    pub kernel_rx_ring_full: u64,
    /// Fill ring found empty.
    pub kernel_fill_ring_empty: u64,
    /// Dropped for other reasons.
    pub kernel_rx_dropped: u64,
    /// Invalid RX and TX descriptors.
    pub kernel_invalid: u64,
}

impl PortStatus {
    /// `dev` with every counter at zero (no `Default`: an interface name has none).
    #[must_use]
    pub fn new(dev: InterfaceName) -> Self {
        Self {
            dev,
            rx_packets: 0,
            rx_bytes: 0,
            tx_packets: 0,
            tx_bytes: 0,
            drops_queue: 0,
            drops_pool: 0,
            drops_police: 0,
            drops_no_egress: 0,
            drops_purged: 0,
            kernel_rx_ring_full: 0,
            kernel_fill_ring_empty: 0,
            kernel_rx_dropped: 0,
            kernel_invalid: 0,
        }
    }
}

/// The XDP program's verdicts (`enum verdict` in its C source).
///
/// The same fields as `htb_xdp::Verdicts`, which `duplicates` lists as a pair: the wire crate
/// must not depend on the engine (htb-cli reads this one), so htbd copies the engine's counts
/// here, and its test `the_wire_carries_every_verdict_under_its_own_name` fails when the two
/// differ in a field, its name or its order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XdpVerdicts {
    /// Sent to htbd.
    pub redirected: u64,
    /// Not IPv4/IPv6: to the kernel.
    pub pass_not_ip: u64,
    /// Malformed headers: to the kernel.
    pub pass_malformed: u64,
    /// TTL or hop limit expiring: to the kernel.
    pub pass_ttl: u64,
    /// Not forwarded by the FIB (local, unreachable, too big): to the kernel.
    pub pass_fib: u64,
    /// Next hop not resolved: to the kernel.
    pub pass_no_neigh: u64,
    /// Egress not managed by htbd: to the kernel.
    pub pass_unmanaged: u64,
    /// Ingress not managed by htbd.
    pub pass_not_port: u64,
    /// No socket in the slot: to the kernel.
    pub pass_no_socket: u64,
    /// Not addressed to the port's MAC: to the kernel.
    pub pass_not_ours: u64,
    /// The data plane's heartbeat was stale: to the kernel.
    pub pass_stale: u64,
    /// IPv4 with options: to the kernel.
    pub pass_ip_options: u64,
    /// Longer than htbd's sockets take (an MTU raised while it runs): to the kernel.
    #[serde(default)]
    pub pass_too_big: u64,
}
