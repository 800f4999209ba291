//! The data plane's I/O shell: runs the sans-IO `Dataplane` on AF_XDP sockets and the clock,
//! on one worker thread per configured core, each sleeping between its passes.
//!
//! Worker 0 runs on the engine's thread; per loop it beats for the liveness check, watches the
//! links, runs the control plane's jobs (parking the other workers while one runs: see
//! `worker`) and makes one pass. With nothing to do, a worker sleeps until its schedulers' next
//! wake-up, a frame on its RX rings or from another worker, or a request (ns-precision
//! `ppoll`, timer slack 1 ns) — two cores are shared with the traffic. `busy_poll` spins
//! instead.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration as StdDuration;

use htb_classify::{Classifier, Filter};
use htb_core::PortTree;
use htb_core::{ClassId, Instant, Scheduler};

use crate::crew::{Bell, Crew};
use crate::dataplane::{Dataplane, Mode, PortSetup};
use crate::error::{ConfigError, PlaneError, XdpError};
use crate::fleet::Fleet;
use crate::frame::Frame;
use crate::io_config::{IoConfig, MAX_CHAIN};
use crate::links::{LINK_CHECK, LinkWatch};
use crate::merge;
use crate::netdev::{NetDev, format_mac};
use crate::plane_op::{IngressHook, PlaneOp, Retired, new_scheduler};
use crate::program::{AttachMode, ProgramConfig, XdpProgram};
use crate::rings::Rings;
use crate::stats::{EngineStats, JobSpan, JobTimes, PortSnapshot, WorkerStats};
use crate::sys;
use crate::umem::FrameIo;
use crate::worker::{Pace, Seat, Worker, duration_ns};

/// With liveness off: how often the workers' passes are checked for
/// [`EngineHandle::since_all_workers_passed`] (each worker then passes at least every half of
/// it, idle or not).
pub const WITNESS_EVERY: StdDuration = StdDuration::from_millis(200);

/// How often the data plane beats for a liveness timeout: ten beats per timeout, 1 to 10 ms
/// apart, so a timeout is never missed by a late beat and an idle loop wakes at most 100
/// times a second.
fn beat_period(timeout: StdDuration) -> StdDuration {
    (timeout / 10).clamp(StdDuration::from_millis(1), StdDuration::from_millis(10))
}

/// One port as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Interface name.
    pub name: String,
    /// Bridge mode: the other side.
    pub peer: Option<String>,
    /// The HTB trees shaping what leaves through this port: one at its root, or one per
    /// class of an `mq` root; none: unshaped (FIFO).
    pub trees: Vec<PortTree>,
    /// Filters classifying into `trees`, in evaluation order.
    pub filters: Vec<Filter>,
    /// Measure the TCP round trips of what leaves through this port, per class.
    pub rtt: bool,
    /// An IFB device (tc's `ifbN`): no interface is opened or attached; its trees shape
    /// what other ports' ingress filters redirect to it, before those frames go on to their
    /// egress ports.
    pub ifb: bool,
    /// Its ingress qdisc (`ffff:`): the filters, each with the IFB its `mirred egress
    /// redirect` names (`None`: none, a policer only). `None`: no ingress qdisc.
    pub ingress: Option<Vec<(Filter, Option<String>)>>,
}

impl EngineConfig {
    /// The same configuration with the IFB ports after the interfaces, so that a port's index
    /// is its interface's (IFB ports have none).
    fn with_ifbs_last(&self) -> Self {
        let mut config = self.clone();
        config.ports.sort_by_key(|p| p.ifb);
        config
    }
}

/// Everything the engine needs to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Router or bridge.
    pub mode: Mode,
    /// The ports.
    pub ports: Vec<PortConfig>,
    /// UMEM and rings.
    pub io: IoConfig,
    /// XDP attach mode.
    pub attach: AttachMode,
    /// Spin instead of sleeping when idle.
    pub busy_poll: bool,
    /// Run the data-plane thread SCHED_FIFO at this priority (1-99); `None`: normal.
    pub realtime: Option<u8>,
    /// Frames per RX/TX batch.
    pub batch: usize,
    /// Liveness fail-open: when the data plane has not beaten for this long (hung, stopped,
    /// stuck in a long job), the XDP program hands every frame to the kernel until it beats
    /// again. `None`: no liveness check (only a missing socket fails open).
    pub liveness: Option<StdDuration>,
    /// Data-plane workers (threads). `None`: one per RX queue of the port with the fewest
    /// (each worker needs a queue of every port), at most one per CPU this process may use
    /// (or per CPU in `cpus`).
    pub workers: Option<usize>,
    /// Worker `i` runs pinned to `cpus[i]`; empty: not pinned.
    pub cpus: Vec<usize>,
    /// Stall credit: when a worker was kept from forwarding (its pass began late), each class
    /// it serves is given back what it could have sent meanwhile beyond its burst, up to this
    /// much of its rate per stall (`Scheduler::credit_stall`). `None`: none, as the kernel.
    pub stall_credit: Option<StdDuration>,
    /// Flow metering: each worker keeps a flow table of this configuration, and ended
    /// records go to the export ring ([`Engine::take_flow_records`]). `None`: no flows, and
    /// nothing spent on them.
    pub flows: Option<crate::flow_table::FlowConfig>,
}

impl EngineConfig {
    /// The number of workers for ports with these RX queue counts.
    ///
    /// # Errors
    /// [`XdpError::Config`] when `workers` or `cpus` cannot be met.
    fn worker_count(&self, queues: &[u32]) -> Result<usize, XdpError> {
        let fewest = queues.iter().copied().min().unwrap_or(1).max(1) as usize;
        let cores = if self.cpus.is_empty() {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        } else {
            self.cpus.len()
        };
        let workers = match self.workers {
            Some(0) => return Err(ConfigError::NoWorkers.into()),
            Some(n) => n,
            None => fewest.min(cores),
        };
        if workers > 64 {
            return Err(ConfigError::TooManyWorkers(workers).into());
        }
        if !self.cpus.is_empty() && self.cpus.len() < workers {
            return Err(ConfigError::TooFewCpus {
                workers,
                cpus: self.cpus.len(),
            }
            .into());
        }
        Ok(workers)
    }
}

/// A request run on the data-plane thread between batches.
pub type Job = Box<dyn FnOnce(&mut Engine) + Send>;

/// Jobs that may wait for the data-plane thread at once: the channel is bounded so that no
/// client of the control plane can queue unbounded work in front of the packets.
pub const JOB_QUEUE: usize = 64;

/// Ended flow records the export ring holds (about 10 MB at most).
pub const FLOW_EXPORT_RING: usize = 65_536;

/// Why a job was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// The engine has stopped.
    #[error("the data plane has stopped")]
    Stopped,
    /// [`JOB_QUEUE`] jobs are waiting already.
    #[error("the data plane is busy ({JOB_QUEUE} requests waiting)")]
    Busy,
}

/// Lets other threads stop the engine and run jobs on it.
#[derive(Clone, Debug)]
pub struct EngineHandle {
    jobs: mpsc::SyncSender<Job>,
    /// CLOCK_MONOTONIC ns when every worker was last seen passing (0: not yet).
    alive: Arc<AtomicU64>,
    /// Worker 0's bell: the engine's thread.
    bell: Arc<Bell>,
    stop: Arc<AtomicBool>,
    workers: usize,
    /// When the data plane's clock read 0.
    epoch: std::time::Instant,
}

impl EngineHandle {
    /// Queues `job` to run on the data-plane thread before its next batch.
    ///
    /// # Errors
    /// [`JobError::Busy`] when [`JOB_QUEUE`] jobs wait already (the job comes back, to retry),
    /// [`JobError::Stopped`].
    pub fn execute(&self, job: Job) -> Result<(), (JobError, Job)> {
        match self.jobs.try_send(job) {
            Ok(()) => {
                self.wake();
                Ok(())
            }
            Err(mpsc::TrySendError::Full(job)) => Err((JobError::Busy, job)),
            Err(mpsc::TrySendError::Disconnected(job)) => Err((JobError::Stopped, job)),
        }
    }

    /// When the data plane's clock ([`Engine::now`]) read 0: what turns the times in its
    /// records (flow records' first and last packet) into wall-clock time.
    #[must_use]
    pub fn epoch(&self) -> std::time::Instant {
        self.epoch
    }

    /// Asks the engine to stop after its current batch.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// How long ago every data-plane worker was last seen passing (checked every beat, or
    /// every [`WITNESS_EVERY`] with liveness off); `None` before the first time. A hung
    /// worker, or a job that holds the data plane, makes it grow: what a health check reads.
    #[must_use]
    pub fn since_all_workers_passed(&self) -> Option<StdDuration> {
        let at = self.alive.load(Ordering::Relaxed);
        (at != 0).then(|| StdDuration::from_nanos(sys::monotonic_ns().saturating_sub(at)))
    }

    /// The number of data-plane workers (each needs its own scheduler of a new tree:
    /// [`PlaneOp::set_tree`]).
    #[must_use]
    pub fn workers(&self) -> usize {
        self.workers
    }

    fn wake(&self) {
        self.bell.wake();
    }
}

/// The data plane on its sockets. Create it with [`Engine::start`], then [`Engine::run`] it on
/// a thread.
pub struct Engine {
    /// Every worker while a job runs (and before and after [`run`](Self::run)); only worker 0
    /// while the others run on their threads.
    workers: Vec<Worker>,
    program: XdpProgram,
    links: LinkWatch,
    pace: Pace,
    jobs: mpsc::Receiver<Job>,
    stop: Arc<AtomicBool>,
    /// Control jobs run, their total and longest time: forwarding waits while one runs.
    jobs_run: JobTimes,
    /// How often to beat (a tenth of the liveness timeout, 1 to 10 ms); `None`: never.
    beat_every: Option<StdDuration>,
    /// CLOCK_MONOTONIC ns of the last beat.
    last_beat: u64,
    /// The other workers' passes at the last beat: a worker that has not passed since is
    /// hung, and the beat is skipped.
    passes_at_beat: Vec<u64>,
    /// The last beat failed (warned once until one succeeds).
    beat_failed: bool,
    /// CLOCK_MONOTONIC ns when every worker was last seen passing, for the handles.
    alive: Arc<AtomicU64>,
    /// Per port, which worker serves which subtree.
    fleet: Fleet,
    /// The most a class is given back per stall of its worker (`None`: no stall credit).
    stall_credit: Option<htb_core::Duration>,
    /// The export ring's receiving end, until taken.
    flow_records: Option<mpsc::Receiver<crate::flow_table::FlowRecord>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("ports", &self.port_names())
            .field("workers", &self.workers.len())
            .finish_non_exhaustive()
    }
}

/// Whether this process may lock all the memory it will ever use: `RLIMIT_MEMLOCK` is
/// unlimited (`/proc/self/limits`) or it holds `CAP_IPC_LOCK` (bit 14 of `CapEff` in
/// `/proc/self/status`), which lifts the limit.
fn memlock_unbounded() -> bool {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let unlimited = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .is_some_and(|l| l.split_whitespace().nth(3) == Some("unlimited"));
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let ipc_lock = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 14) != 0);
    unlimited || ipc_lock
}

/// Checks `config` against the interfaces before anything is attached or bound, and returns
/// them with the UMEM settings to use: multi-buffer on when an MTU needs it.
fn validate(config: &EngineConfig) -> Result<(Vec<NetDev>, IoConfig), XdpError> {
    if config.ports.is_empty() {
        return Err(ConfigError::NoPorts.into());
    }
    let mut devs = Vec::new();
    for (i, port) in config.ports.iter().enumerate() {
        if config.ports[..i].iter().any(|p| p.name == port.name) {
            return Err(ConfigError::ListedTwice(port.name.clone()).into());
        }
        if !port.ifb {
            devs.push(NetDev::open(&port.name)?);
        }
    }
    if devs.is_empty() {
        return Err(ConfigError::OnlyIfbPorts.into());
    }
    for port in &config.ports {
        let redirects = port
            .ingress
            .iter()
            .flatten()
            .filter_map(|(_, to)| to.as_ref());
        for to in redirects {
            if !config.ports.iter().any(|p| p.ifb && p.name == *to) {
                return Err(ConfigError::RedirectNotIfb {
                    port: port.name.clone(),
                    to: to.clone(),
                }
                .into());
            }
        }
    }
    let mut io = config.io;
    let mtus: Vec<(&str, u32)> = devs.iter().map(|d| (d.name.as_str(), d.mtu)).collect();
    io.multi_buffer = io.check_mtus(sys::page_size(), &mtus)?;
    if io.multi_buffer {
        let (name, mtu) = mtus
            .iter()
            .max_by_key(|(_, mtu)| *mtu)
            .copied()
            .unwrap_or_default();
        tracing::info!(
            "{name}: MTU {mtu} is more than one {}-byte frame holds (MTU {}): jumbo frames \
             are received and sent as chains of frames (AF_XDP multi-buffer)",
            io.frame_size,
            io.max_single_mtu()
        );
        if io.ring_size < 2 * MAX_CHAIN {
            return Err(ConfigError::RingTooSmallForJumbo {
                ring_size: io.ring_size,
                chain: MAX_CHAIN,
                needed: (2 * MAX_CHAIN).next_power_of_two(),
            }
            .into());
        }
    }
    match config.mode {
        Mode::Bridge => {
            for port in config.ports.iter().filter(|p| !p.ifb) {
                let peer = port
                    .peer
                    .as_deref()
                    .ok_or_else(|| ConfigError::NoPeer(port.name.clone()))?;
                let other = config
                    .ports
                    .iter()
                    .find(|p| p.name == peer)
                    .ok_or_else(|| ConfigError::PeerNotListed {
                        port: port.name.clone(),
                        peer: peer.to_owned(),
                    })?;
                if other.peer.as_deref() != Some(port.name.as_str()) {
                    return Err(ConfigError::PeersDisagree {
                        port: port.name.clone(),
                        peer: peer.to_owned(),
                    }
                    .into());
                }
            }
        }
        Mode::Router => {
            if let Some(p) = config.ports.iter().find(|p| p.peer.is_some()) {
                return Err(ConfigError::PeerInRouterMode(p.name.clone()).into());
            }
            for (i, a) in devs.iter().enumerate() {
                if let Some(b) = devs[i + 1..].iter().find(|b| b.mac == a.mac) {
                    return Err(ConfigError::SharedMac {
                        a: a.name.clone(),
                        b: b.name.clone(),
                        mac: format_mac(&a.mac),
                    }
                    .into());
                }
            }
        }
    }
    let channels = devs.iter().map(|d| d.rx_queues).sum();
    let batch = config.batch.clamp(1, io.ring_size as usize) as u32;
    if let Some(frames) = io.fit_frames(channels, batch) {
        tracing::info!(
            "frames = {frames} ({} MiB of UMEM): the default 32768 would leave no room for \
             queues beside {channels} sockets' rings (set frames to choose)",
            (u64::from(frames) * u64::from(io.frame_size)) >> 20
        );
    }
    io.check_budget(channels, batch)?;
    Ok((devs, io))
}

/// Per worker, a scheduler of each of `port`'s trees with the `mq` class it hangs under; and
/// the port's compiled filters.
#[allow(clippy::type_complexity)]
fn schedulers(
    port: &PortConfig,
    workers: usize,
) -> Result<(Vec<Vec<(Scheduler<Frame>, Option<u16>)>>, Arc<Classifier>), XdpError> {
    let build = |tree: &PortTree| {
        new_scheduler(Some(&tree.tree))
            .map(|htb| (htb, tree.mq_minor))
            .map_err(|source| ConfigError::Tree {
                port: port.name.clone(),
                source,
            })
    };
    let first = port
        .trees
        .iter()
        .map(build)
        .collect::<Result<Vec<_>, _>>()?;
    for filter in &port.filters {
        if !first.iter().any(|(htb, _)| htb.contains(filter.class)) {
            return Err(ConfigError::FilterTarget {
                port: port.name.clone(),
                matcher: filter.matcher.to_string(),
                class: filter.class,
            }
            .into());
        }
    }
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(port.trees.iter().map(build).collect::<Result<_, _>>()?);
    }
    Ok((all, Arc::new(Classifier::new(port.filters.clone()))))
}

fn socket_pair() -> Result<(UnixStream, UnixStream), XdpError> {
    let (a, b) = UnixStream::pair().map_err(|source| XdpError::Syscall {
        call: "socketpair",
        source,
    })?;
    for end in [&a, &b] {
        end.set_nonblocking(true)
            .map_err(|source| XdpError::Syscall {
                call: "fcntl",
                source,
            })?;
    }
    Ok((a, b))
}

impl Engine {
    /// Validates `config`, loads the XDP program, creates the UMEM and sockets, fills the maps
    /// and attaches to every port — all or nothing: on error, whatever was set up is undone.
    ///
    /// # Errors
    /// [`XdpError`] naming the interface or step that failed.
    pub fn start(config: &EngineConfig) -> Result<(Self, EngineHandle), XdpError> {
        let config = &config.with_ifbs_last();
        let (devs, io) = validate(config)?;
        let queues: Vec<u32> = devs.iter().map(|d| d.rx_queues).collect();
        let workers = config.worker_count(&queues)?;
        // A page the data plane touches must not be reclaimed and faulted back in under
        // traffic (a VM may page cold memory out proactively, and a fault there costs
        // hundreds of µs): lock what is resident and whatever is touched from now on.
        // Only where nothing bounds it: with a finite RLIMIT_MEMLOCK, MCL_FUTURE would make
        // every allocation past the limit fail.
        if !memlock_unbounded() {
            tracing::info!(
                "memory not locked: RLIMIT_MEMLOCK is finite and CAP_IPC_LOCK is not held (the \
                 data plane may stall on page faults under memory pressure; the systemd unit \
                 sets LimitMEMLOCK=infinity)"
            );
        } else {
            match sys::lock_memory() {
                Ok(()) => tracing::info!("memory locked (pages stay resident once touched)"),
                Err(e) => tracing::warn!(
                    "cannot lock memory ({e}): the data plane may stall on page faults under \
                     memory pressure"
                ),
            }
        }
        let epoch = std::time::Instant::now();
        let mut per_worker: Vec<Vec<PortSetup>> = (0..workers).map(|_| Vec::new()).collect();
        for (i, port) in config.ports.iter().enumerate() {
            let mac = devs.get(i).map_or([0; 6], |d| d.mac);
            let (trees, classifier) = schedulers(port, workers)?;
            let ingress = port
                .ingress
                .clone()
                .map(|filters| Arc::new(IngressHook::new(filters)));
            let peer = port
                .peer
                .as_ref()
                .and_then(|p| config.ports.iter().position(|c| &c.name == p));
            for (setups, trees) in per_worker.iter_mut().zip(trees) {
                setups.push(PortSetup {
                    name: port.name.clone(),
                    mac,
                    peer,
                    trees,
                    classifier: Arc::clone(&classifier),
                    rtt: port.rtt,
                    ifb: port.ifb,
                    ingress: ingress.clone(),
                });
            }
        }
        let mut program = XdpProgram::load(&ProgramConfig {
            bridge: config.mode == Mode::Bridge,
            stale_after: config.liveness,
            frags: io.multi_buffer,
            max_frame_len: io.max_frame_len(),
        })?;
        let channels: Vec<(String, u32)> =
            devs.iter().map(|d| (d.name.clone(), d.rx_queues)).collect();
        let shares = FrameIo::new_shares(&io, &channels, workers)?;
        let mut slot = 0u32;
        let mut slots = Vec::with_capacity(devs.len());
        for (i, dev) in devs.iter().enumerate() {
            slots.push((slot, dev.rx_queues));
            program.add_port(dev.ifindex, slot, dev.rx_queues, dev.mac)?;
            for io in &shares {
                for ch in (0..io.channels()).filter(|&c| io.channel_port(c) == i) {
                    program.set_socket(slot + io.channel_queue(ch), io.fd(ch))?;
                }
            }
            slot += dev.rx_queues;
        }
        for dev in &devs {
            let mode = program.attach(&dev.name, config.attach)?;
            tracing::info!(
                "{}: XDP attached in {mode} mode, {} RX queue(s)",
                dev.name,
                dev.rx_queues
            );
        }
        let mut bells = Vec::with_capacity(workers);
        let mut wakers = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (bell, waker) = socket_pair()?;
            bells.push(Arc::new(Bell::new(bell)));
            wakers.push(waker);
        }
        let crews = Crew::new_set(&bells);
        let batch = config.batch.clamp(1, config.io.ring_size as usize);
        let stall_credit = config
            .stall_credit
            .map(|c| htb_core::Duration::from_nanos(duration_ns(c)));
        let mut pool = Vec::with_capacity(workers);
        let flows = crate::frame::FlowHasher::default();
        let (flow_sink, flow_records) = match config.flows {
            Some(_) => {
                let (sink, records) = mpsc::sync_channel(FLOW_EXPORT_RING);
                (Some(sink), Some(records))
            }
            None => (None, None),
        };
        for (w, (((io, setups), crew), waker)) in shares
            .into_iter()
            .zip(per_worker)
            .zip(crews)
            .zip(wakers)
            .enumerate()
        {
            let mut plane =
                Dataplane::new(io, config.mode, setups, batch, config.io.frame_size, crew);
            plane.set_flow_hasher(flows);
            if let (Some(c), Some(sink)) = (config.flows, &flow_sink) {
                plane.set_metering(crate::flow_table::FlowTable::new(c), sink.clone());
            }
            pool.push(Worker::new(
                plane,
                waker,
                config.cpus.get(w).copied(),
                stall_credit,
            ));
        }
        if workers > 1 {
            tracing::info!("{workers} data-plane workers");
        }
        let fleet = {
            let mut planes: Vec<&mut Dataplane<FrameIo>> =
                pool.iter_mut().map(|w| &mut w.plane).collect();
            Fleet::new(config.ports.len(), &mut planes)
        };
        let (jobs_tx, jobs) = mpsc::sync_channel(JOB_QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let alive = Arc::new(AtomicU64::new(0));
        let handle = EngineHandle {
            jobs: jobs_tx,
            alive: Arc::clone(&alive),
            bell: Arc::clone(&bells[0]),
            stop: Arc::clone(&stop),
            workers,
            epoch,
        };
        let beat_every = config.liveness.map(beat_period);
        let engine = Self {
            workers: pool,
            program,
            links: LinkWatch::new(devs, slots, io.max_mtu()),
            pace: Pace {
                epoch,
                busy_poll: config.busy_poll,
                // Each worker passes at least twice a beat (or a witness check), so a live one
                // never misses one.
                wake_every: Some(beat_every.map_or(WITNESS_EVERY / 2, |b| b / 2)),
                realtime: config.realtime,
            },
            stall_credit,
            jobs,
            stop,
            jobs_run: JobTimes::default(),
            beat_every,
            last_beat: 0,
            passes_at_beat: vec![0; workers],
            beat_failed: false,
            alive,
            fleet,
            flow_records,
        };
        Ok((engine, handle))
    }

    /// The engine's clock: ns since start.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.pace.now()
    }

    /// Runs until [`EngineHandle::stop`]; then returns, and dropping the engine detaches the
    /// XDP program and closes the sockets. Workers 1 and up run on threads of their own.
    ///
    /// # Panics
    /// When a worker's thread panicked (after stopping the others), so that the caller's
    /// supervisor fails open.
    pub fn run(&mut self) {
        let others: Vec<Worker> = self.workers.drain(1..).collect();
        let stop = Arc::clone(&self.stop);
        std::thread::scope(|scope| {
            // Should this thread panic, the others must still stop, or the scope never ends.
            let mut seats = StopOnDrop {
                seats: Vec::with_capacity(others.len()),
                stop: Arc::clone(&stop),
            };
            for worker in others {
                match crate::worker::spawn(scope, worker, self.pace, Arc::clone(&stop)) {
                    Ok(seat) => seats.seats.push(seat),
                    Err(e) => panic!("cannot start a data-plane worker thread: {e}"),
                }
            }
            self.workers[0].enter_thread(&self.pace);
            while !stop.load(Ordering::Relaxed) {
                self.beat(&seats.seats);
                let moved: Vec<(usize, [u8; 6])> = self.links.check(&mut self.program);
                if !moved.is_empty() {
                    self.with_all_workers(&seats.seats, |engine| {
                        for worker in &mut engine.workers {
                            for &(port, mac) in &moved {
                                worker.plane.set_mac(port, mac);
                            }
                        }
                    });
                }
                self.run_jobs(&seats.seats);
                let pace = self.pace;
                self.workers[0].step(&pace, Some(LINK_CHECK));
            }
            stop.store(true, Ordering::SeqCst);
            for seat in &seats.seats {
                seat.wake();
            }
            for seat in &seats.seats {
                let worker = seat.take();
                self.workers.push(worker);
            }
            self.run_jobs(&[]);
            // The flows still running end here (flowEndReason "forced end").
            let now = self.now();
            for worker in &mut self.workers {
                worker.plane.flush_flows(now);
            }
        });
    }

    /// The receiving end of the export ring of ended flow records (once; `None` without
    /// flow metering, or when taken). Whoever takes it must keep up, off the data-plane
    /// threads: a full ring loses records, counted in [`EngineStats::flows`].
    pub fn take_flow_records(&mut self) -> Option<mpsc::Receiver<crate::flow_table::FlowRecord>> {
        self.flow_records.take()
    }

    /// The places of each worker's flow table (0 without flow metering).
    #[must_use]
    pub fn flow_places(&self) -> usize {
        self.workers
            .first()
            .and_then(|w| w.plane.flow_table())
            .map_or(0, crate::flow_table::FlowTable::places)
    }

    /// The live flow records in places `range` of every worker's table that `keep` keeps,
    /// and how many there were: the `top` largest (by bytes) of them.
    #[must_use]
    pub fn flows_in(
        &self,
        range: std::ops::Range<usize>,
        mut keep: impl FnMut(&crate::flow_table::FlowRecord) -> bool,
        top: usize,
    ) -> (Vec<crate::flow_table::FlowRecord>, u64) {
        let mut found: Vec<crate::flow_table::FlowRecord> = self
            .workers
            .iter()
            .filter_map(|w| w.plane.flow_table())
            .flat_map(|t| t.live_in(range.clone(), &mut keep))
            .collect();
        let matched = found.len() as u64;
        if found.len() > top {
            found.select_nth_unstable_by(top, |a, b| b.bytes.cmp(&a.bytes));
            found.truncate(top);
        }
        (found, matched)
    }

    /// Runs `job` with every worker's state here: the other workers park between two passes
    /// and wait until it is done.
    fn with_all_workers(&mut self, seats: &[Seat], job: impl FnOnce(&mut Self)) {
        for seat in seats {
            seat.ask_to_park();
        }
        for seat in seats {
            let worker = seat.take();
            self.workers.push(worker);
        }
        job(self);
        for (seat, worker) in seats
            .iter()
            .zip(self.workers.drain(1..).collect::<Vec<_>>())
        {
            seat.give_back(worker);
        }
    }

    /// When a beat (or, with liveness off, a witness check) is due and every worker has
    /// passed since the last one: notes it for [`EngineHandle::since_all_workers_passed`] and
    /// refreshes the XDP program's heartbeat.
    fn beat(&mut self, seats: &[Seat]) {
        let every = self.beat_every.unwrap_or(WITNESS_EVERY);
        let now = sys::monotonic_ns();
        if now.saturating_sub(self.last_beat) < u64::try_from(every.as_nanos()).unwrap_or(0) {
            return;
        }
        let passes: Vec<u64> = seats.iter().map(Seat::passes).collect();
        if passes
            .iter()
            .zip(&self.passes_at_beat)
            .any(|(now, then)| now == then)
        {
            // A worker has not passed for a whole beat: hung (or parked by a long job). No
            // beat; should it last the liveness timeout, the XDP program fails open.
            return;
        }
        self.passes_at_beat = passes;
        self.last_beat = now;
        self.alive.store(now, Ordering::Relaxed);
        if self.beat_every.is_none() {
            return;
        }
        match self.program.beat(now) {
            Ok(()) => self.beat_failed = false,
            Err(e) if !self.beat_failed => {
                self.beat_failed = true;
                tracing::warn!("heartbeat not written ({e}): frames go to the kernel meanwhile");
            }
            Err(_) => {}
        }
    }

    fn run_jobs(&mut self, seats: &[Seat]) {
        let Ok(first) = self.jobs.try_recv() else {
            return;
        };
        self.with_all_workers(seats, |engine| {
            let mut job = Some(first);
            while let Some(next) = job.take().or_else(|| engine.jobs.try_recv().ok()) {
                let on = sys::current_cpu();
                let (started, cpu_started) = (sys::monotonic_ns(), sys::thread_cpu_ns());
                next(engine);
                let took = sys::monotonic_ns().saturating_sub(started);
                let cpu_ns = sys::thread_cpu_ns().saturating_sub(cpu_started);
                let stayed = on.filter(|&c| sys::current_cpu() == Some(c));
                engine.jobs_run.record(JobSpan {
                    started_ns: started,
                    took_ns: took,
                    cpu_ns,
                    cpu: stayed,
                });
            }
        });
    }

    /// One pass of receive, schedule, transmit on worker 0, now (tests and benchmarks
    /// that drive the engine by hand).
    pub fn poll_once(&mut self) -> crate::Progress {
        let now = self.now();
        self.workers[0].plane.poll(now)
    }

    /// A snapshot of every counter, summed over the workers, with each worker's own.
    #[must_use]
    pub fn stats(&self) -> EngineStats {
        let mut stats = merge::engine_stats(
            self.workers.iter().map(|w| &w.plane),
            self.program.verdicts(),
        );
        stats.jobs = self.jobs_run;
        stats.stall_credit = self.stall_credit;
        for table in self.workers.iter().filter_map(|w| w.plane.flow_table()) {
            stats
                .flows
                .get_or_insert_with(Default::default)
                .add(&table.counters());
        }
        for (w, worker) in self.workers.iter().enumerate() {
            let plane = &worker.plane;
            stats.sleeps += worker.sleeps;
            stats.workers.push(WorkerStats {
                cpu: worker.cpu,
                loops: plane.loops(),
                sleeps: worker.sleeps,
                queued: plane.queued(),
                subtrees: self.fleet.subtrees(w),
                handoffs: plane.handoffs(),
                stalls: worker.watch.log,
            });
        }
        stats
    }

    /// The scheduler of tree `major` of `port` (worker 0's: every worker has the same
    /// classes, each serving its own subtrees).
    #[must_use]
    pub fn scheduler(&self, port: &str, major: u16) -> Option<&Scheduler<Frame>> {
        self.workers.first()?.plane.scheduler(port, major)
    }

    /// The qdisc majors of `port`'s trees, as the data plane has them.
    #[must_use]
    pub fn tree_majors(&self, port: &str) -> Vec<u16> {
        self.workers
            .first()
            .map(|w| w.plane.tree_majors(port))
            .unwrap_or_default()
    }

    /// Names of the ports, in configuration order.
    #[must_use]
    pub fn port_names(&self) -> Vec<String> {
        self.workers
            .first()
            .map(|w| w.plane.port_names())
            .unwrap_or_default()
    }

    /// The filters of `port`, in evaluation order.
    #[must_use]
    pub fn filters(&self, port: &str) -> Option<&[Filter]> {
        self.workers.first()?.plane.filters(port)
    }

    /// Applies `ops` in order, between two batches (run it through [`EngineHandle::execute`]):
    /// no packet is received or sent while they apply, so a batch of changes is atomic for
    /// the traffic. Every worker applies them to its copy of the trees. Frames the changes
    /// purge go back to the pool. Returns, per op, the packets it dropped or why it failed
    /// (the control plane validates first, so a failure is a bug); the first failure ends the
    /// batch, later operations are not applied. Also returns what the ops replaced, to be
    /// dropped off the data-plane thread.
    pub fn apply(&mut self, ops: Vec<PlaneOp>) -> (Vec<Result<u64, PlaneError>>, Retired) {
        let now = self.now();
        let mut planes: Vec<&mut Dataplane<FrameIo>> =
            self.workers.iter_mut().map(|w| &mut w.plane).collect();
        self.fleet.apply(&mut planes, now, ops)
    }

    /// Statistics of the listed classes of `port` (`None` for ids it does not have) and of
    /// their leaf qdiscs, with the port's scheduler-wide statistics and counters: summed over
    /// the workers (a class's buckets and mode are its owner's).
    #[must_use]
    pub fn class_stats(&self, port: &str, ids: &[ClassId]) -> Option<PortSnapshot> {
        let snapshots: Option<Vec<PortSnapshot>> = self
            .workers
            .iter()
            .map(|w| w.plane.class_stats(port, ids))
            .collect();
        Some(merge::snapshots(snapshots?))
    }

    /// Where `port` sends `frame` ([`crate::explain`]), by the classifier its workers run (one
    /// compiled copy, shared). `None`: no such port.
    #[must_use]
    pub fn explain(&self, port: &str, frame: &[u8]) -> Option<crate::explain::Classified> {
        self.workers.first()?.plane.explain(port, frame)
    }

    /// Which queue of `class`'s leaf on `port` `frame`'s flow joins (fq_codel's or sfq's flow
    /// bucket; `None` for a leaf with one queue, or cake). Every worker hashes with one key,
    /// so worker 0's fq_codel answer is every worker's; sfq re-keys each instance, so for a
    /// class another worker serves, its answer is worker 0's instance's.
    #[must_use]
    pub fn leaf_queue(&self, port: &str, class: ClassId, frame: &[u8]) -> Option<u32> {
        self.workers.first()?.plane.leaf_queue(port, class, frame)
    }

    /// Which worker serves each subtree of `port`, by the class at its top.
    #[must_use]
    pub fn subtree_owners(&self, port: &str) -> HashMap<ClassId, usize> {
        let Some(worker) = self.workers.first() else {
            return HashMap::new();
        };
        worker.plane.owners(port)
    }
}

/// The seats of the running workers; dropping it (also while unwinding) stops them, so that
/// the thread scope they run in can end.
struct StopOnDrop {
    seats: Vec<Seat>,
    stop: Arc<AtomicBool>,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for seat in &self.seats {
            seat.wake();
        }
    }
}
