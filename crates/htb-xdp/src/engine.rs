//! The data plane's I/O shell: runs the sans-IO `Dataplane` on AF_XDP sockets and the clock,
//! on one worker thread per configured core, each sleeping between its passes.
//!
//! Worker 0 runs on the engine's thread; per loop it beats for the liveness check, watches the
//! links, runs the control plane's jobs (parking the other workers while one runs: see
//! `worker`) and makes one pass. With nothing to do, a worker sleeps until its schedulers' next
//! wake-up, a frame on its RX rings or from another worker, or a request (ns-precision
//! `ppoll`, timer slack 1 ns) — two cores are shared with the traffic. `busy_poll` spins
//! instead.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration as StdDuration;

use htb_classify::Classifier;
use htb_core::PortTree;
use htb_core::{Instant, Scheduler};

use crate::crew::{Bell, Crew};
use crate::dataplane::{Dataplane, Mode, PortSetup};
use crate::error::{ConfigError, XdpError};
use crate::fleet::Fleet;
use crate::frame::Frame;
use crate::links::{LINK_CHECK, LinkWatch};
use crate::plane_op::{IngressHook, new_scheduler};
use crate::program::{ProgramConfig, XdpProgram};
use crate::rings::Rings;
use crate::stats::{JobSpan, JobTimes};
use crate::sys;
use crate::umem::FrameIo;
use crate::worker::{Pace, Seat, Worker, duration_ns};

mod config;
mod handle;
mod inspect;

use self::config::validate;
pub use self::config::{EngineConfig, PortConfig};
pub use self::handle::{EngineHandle, JOB_QUEUE, Job, JobError};

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

/// Ended flow records the export ring holds (about 10 MB at most).
pub const FLOW_EXPORT_RING: usize = 65_536;

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
            // The operator's choices are for each port's root tree's subtrees.
            let choices = config
                .ports
                .iter()
                .map(|p| {
                    p.trees
                        .iter()
                        .find(|t| t.mq_minor.is_none())
                        .map(|t| t.split.clone())
                        .unwrap_or_default()
                })
                .collect();
            Fleet::new(config.ports.len(), &mut planes, config.split_above, choices)
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
    /// threads: a full ring loses records, counted in [`EngineStats::flows`](crate::EngineStats::flows).
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
