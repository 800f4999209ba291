//! The data plane's I/O shell: runs the sans-IO `Dataplane` on AF_XDP sockets and the clock,
//! on one thread, and sleeps between passes.
//!
//! Per loop: beat for the liveness check, run the control plane's jobs, one
//! `Dataplane::poll`. With nothing to do, the thread sleeps until the earliest scheduler
//! wake-up, a received frame or a control request (ns-precision `ppoll`, timer slack 1 ns) —
//! two cores are shared with the traffic. `busy_poll` spins instead.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration as StdDuration;

use htb_config::TreeSpec;
use htb_config::filter::{Classifier, Filter};
use htb_core::{ClassId, Instant, Scheduler};

use crate::dataplane::{Dataplane, Mode, PortSetup, Progress};
use crate::error::XdpError;
use crate::frame::Frame;
use crate::links::{LINK_CHECK, LinkWatch};
use crate::netdev::{NetDev, format_mac};
use crate::plane_op::{PlaneOp, new_scheduler};
use crate::program::{AttachMode, XdpProgram};
use crate::rings::Rings;
use crate::stats::{EngineStats, JobTimes, PortSnapshot};
use crate::sys;
use crate::umem::{FrameIo, IoConfig};

/// How long the loop first sleeps before kicking TX again when frames wait in a TX ring and a
/// kick moved nothing (the egress link is down: the kernel refuses the frames); it doubles
/// while nothing moves, up to [`TX_RETRY_MAX`].
const TX_RETRY: StdDuration = StdDuration::from_micros(500);
const TX_RETRY_MAX: StdDuration = StdDuration::from_millis(16);

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
    /// The HTB tree shaping what leaves through this port; `None`: unshaped (FIFO).
    pub tree: Option<TreeSpec>,
    /// Filters classifying into `tree`.
    pub filters: Vec<Filter>,
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
}

/// A request run on the data-plane thread between batches.
pub type Job = Box<dyn FnOnce(&mut Engine) + Send>;

/// Jobs that may wait for the data-plane thread at once: the channel is bounded so that no
/// client of the control plane can queue unbounded work in front of the packets.
pub const JOB_QUEUE: usize = 64;

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
    waker: Arc<UnixStream>,
    stop: Arc<AtomicBool>,
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

    /// Asks the engine to stop after its current batch.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake();
    }

    fn wake(&self) {
        use std::io::Write;
        // A full socket buffer already means "wake up": ignore WouldBlock.
        let _ = (&*self.waker).write(&[1]);
    }
}

/// The data plane on its sockets. Create it with [`Engine::start`], then [`Engine::run`] it on
/// a thread.
pub struct Engine {
    plane: Dataplane<FrameIo>,
    program: XdpProgram,
    links: LinkWatch,
    clock: std::time::Instant,
    busy_poll: bool,
    realtime: Option<u8>,
    jobs: mpsc::Receiver<Job>,
    waker: UnixStream,
    stop: Arc<AtomicBool>,
    sleeps: u64,
    /// Control jobs run, their total and longest time: forwarding waits while one runs.
    jobs_run: JobTimes,
    /// How often to beat (a tenth of the liveness timeout, 1 to 10 ms); `None`: never.
    beat_every: Option<StdDuration>,
    /// CLOCK_MONOTONIC ns of the last beat.
    last_beat: u64,
    /// The last beat failed (warned once until one succeeds).
    beat_failed: bool,
    /// How long to wait before the next TX kick while a TX ring is stuck.
    tx_retry: StdDuration,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("ports", &self.plane.port_names())
            .finish_non_exhaustive()
    }
}

fn validate(config: &EngineConfig) -> Result<Vec<NetDev>, XdpError> {
    if config.ports.is_empty() {
        return Err(XdpError::Config("no interfaces".into()));
    }
    let max_mtu = config.io.max_mtu();
    let mut devs = Vec::new();
    for port in &config.ports {
        if devs.iter().any(|d: &NetDev| d.name == port.name) {
            return Err(XdpError::Config(format!(
                "interface {} is listed twice",
                port.name
            )));
        }
        let dev = NetDev::open(&port.name)?;
        if dev.mtu > max_mtu {
            return Err(XdpError::Interface {
                interface: dev.name,
                reason: format!(
                    "MTU {} does not fit frames of {} bytes (at most {} bytes of MTU)",
                    dev.mtu, config.io.frame_size, max_mtu
                ),
            });
        }
        devs.push(dev);
    }
    match config.mode {
        Mode::Bridge => {
            for port in &config.ports {
                let peer = port.peer.as_deref().ok_or_else(|| {
                    XdpError::Config(format!("bridge mode: interface {} needs a peer", port.name))
                })?;
                let other = config
                    .ports
                    .iter()
                    .find(|p| p.name == peer)
                    .ok_or_else(|| {
                        XdpError::Config(format!(
                            "peer {peer} of {} is not a listed interface",
                            port.name
                        ))
                    })?;
                if other.peer.as_deref() != Some(port.name.as_str()) {
                    return Err(XdpError::Config(format!(
                        "{} and {peer} must name each other as peers",
                        port.name
                    )));
                }
            }
        }
        Mode::Router => {
            if let Some(p) = config.ports.iter().find(|p| p.peer.is_some()) {
                return Err(XdpError::Config(format!(
                    "interface {}: peer is for bridge mode only",
                    p.name
                )));
            }
            for (i, a) in devs.iter().enumerate() {
                if let Some(b) = devs[i + 1..].iter().find(|b| b.mac == a.mac) {
                    return Err(XdpError::Config(format!(
                        "router mode needs distinct MAC addresses, but {} and {} share {}",
                        a.name,
                        b.name,
                        format_mac(&a.mac)
                    )));
                }
            }
        }
    }
    let channels = devs.iter().map(|d| d.rx_queues).sum();
    let batch = config.batch.clamp(1, config.io.ring_size as usize) as u32;
    config.io.check_budget(channels, batch)?;
    Ok(devs)
}

fn scheduler(port: &PortConfig) -> Result<(Scheduler<Frame>, Classifier), XdpError> {
    // No tree: every frame goes through the direct queue, unshaped.
    let htb = new_scheduler(port.tree.as_ref())
        .map_err(|e| XdpError::Config(format!("{}: {e}", port.name)))?;
    for filter in &port.filters {
        if !htb.contains(filter.class) {
            return Err(XdpError::Config(format!(
                "{}: filter ({}) targets class {} which is not defined",
                port.name, filter.matcher, filter.class
            )));
        }
    }
    Ok((htb, Classifier::new(port.filters.clone())))
}

impl Engine {
    /// Validates `config`, loads the XDP program, creates the UMEM and sockets, fills the maps
    /// and attaches to every port — all or nothing: on error, whatever was set up is undone.
    ///
    /// # Errors
    /// [`XdpError`] naming the interface or step that failed.
    pub fn start(config: &EngineConfig) -> Result<(Self, EngineHandle), XdpError> {
        let devs = validate(config)?;
        let clock = std::time::Instant::now();
        let mut ports = Vec::with_capacity(devs.len());
        for (port, dev) in config.ports.iter().zip(&devs) {
            let (htb, classifier) = scheduler(port)?;
            let peer = port
                .peer
                .as_ref()
                .and_then(|p| config.ports.iter().position(|c| &c.name == p));
            ports.push(PortSetup {
                name: dev.name.clone(),
                mac: dev.mac,
                peer,
                htb,
                classifier,
            });
        }
        let mut program = XdpProgram::load(config.mode == Mode::Bridge, config.liveness)?;
        let channels: Vec<(String, u32)> =
            devs.iter().map(|d| (d.name.clone(), d.rx_queues)).collect();
        let io = FrameIo::new(&config.io, &channels)?;
        let mut slot = 0u32;
        let mut slots = Vec::with_capacity(devs.len());
        for (i, dev) in devs.iter().enumerate() {
            slots.push((slot, dev.rx_queues));
            program.add_port(dev.ifindex, slot, dev.rx_queues, dev.mac)?;
            for ch in (0..io.channels()).filter(|&c| io.channel_port(c) == i) {
                program.set_socket(slot, io.fd(ch))?;
                slot += 1;
            }
        }
        for dev in &devs {
            let mode = program.attach(&dev.name, config.attach)?;
            tracing::info!(
                "{}: XDP attached in {mode} mode, {} RX queue(s)",
                dev.name,
                dev.rx_queues
            );
        }
        let (jobs_tx, jobs) = mpsc::sync_channel(JOB_QUEUE);
        let (waker, waker_rx) = UnixStream::pair().map_err(|source| XdpError::Syscall {
            call: "socketpair",
            source,
        })?;
        waker
            .set_nonblocking(true)
            .map_err(|source| XdpError::Syscall {
                call: "fcntl",
                source,
            })?;
        waker_rx
            .set_nonblocking(true)
            .map_err(|source| XdpError::Syscall {
                call: "fcntl",
                source,
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let handle = EngineHandle {
            jobs: jobs_tx,
            waker: Arc::new(waker),
            stop: Arc::clone(&stop),
        };
        let batch = config.batch.clamp(1, config.io.ring_size as usize);
        let engine = Self {
            plane: Dataplane::new(io, config.mode, ports, batch, config.io.frame_size),
            program,
            links: LinkWatch::new(devs, slots, config.io.max_mtu()),
            clock,
            busy_poll: config.busy_poll,
            realtime: config.realtime,
            jobs,
            waker: waker_rx,
            stop,
            sleeps: 0,
            jobs_run: JobTimes::default(),
            beat_every: config.liveness.map(beat_period),
            last_beat: 0,
            beat_failed: false,
            tx_retry: TX_RETRY,
        };
        Ok((engine, handle))
    }

    /// The engine's clock: ns since start.
    #[must_use]
    pub fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.clock.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Runs until [`EngineHandle::stop`]; then returns, and dropping the engine detaches the
    /// XDP program and closes the sockets.
    pub fn run(&mut self) {
        if let Err(e) = sys::set_timer_slack(StdDuration::from_nanos(1)) {
            tracing::warn!("cannot lower the timer slack ({e}); wake-ups may be up to 50 µs late");
        }
        if let Some(priority) = self.realtime {
            match sys::set_realtime(priority) {
                Ok(()) => tracing::info!("data plane runs SCHED_FIFO at priority {priority}"),
                Err(e) => tracing::warn!("cannot make the data plane real-time ({e})"),
            }
        }
        while !self.stop.load(Ordering::Relaxed) {
            self.beat();
            for (port, mac) in self.links.check(&mut self.program) {
                self.plane.set_mac(port, mac);
            }
            self.run_jobs();
            match self.poll_once() {
                Progress::Moved => self.tx_retry = TX_RETRY,
                // Frames the kernel would not send, and nothing else moved: kick again later,
                // backing off, rather than spin on a link that is down.
                Progress::TxStuck if !self.busy_poll => {
                    self.sleep(Some(self.tx_retry));
                    self.tx_retry = (self.tx_retry * 2).min(TX_RETRY_MAX);
                }
                Progress::Idle if !self.busy_poll => self.sleep(None),
                Progress::TxStuck | Progress::Idle => {}
            }
        }
        self.run_jobs();
    }

    /// Refreshes the XDP program's heartbeat when a beat is due.
    fn beat(&mut self) {
        let Some(every) = self.beat_every else {
            return;
        };
        let now = sys::monotonic_ns();
        if now.saturating_sub(self.last_beat) < u64::try_from(every.as_nanos()).unwrap_or(0) {
            return;
        }
        self.last_beat = now;
        match self.program.beat(now) {
            Ok(()) => self.beat_failed = false,
            Err(e) if !self.beat_failed => {
                self.beat_failed = true;
                tracing::warn!("heartbeat not written ({e}): frames go to the kernel meanwhile");
            }
            Err(_) => {}
        }
    }

    fn run_jobs(&mut self) {
        while let Ok(job) = self.jobs.try_recv() {
            let started = sys::monotonic_ns();
            job(self);
            let took = sys::monotonic_ns().saturating_sub(started);
            self.jobs_run.count += 1;
            self.jobs_run.total_ns += took;
            self.jobs_run.longest_ns = self.jobs_run.longest_ns.max(took);
        }
    }

    /// One pass of receive, schedule, transmit, now.
    pub fn poll_once(&mut self) -> Progress {
        let now = self.now();
        self.plane.poll(now)
    }

    /// Sleeps until the earliest scheduler wake-up, a frame on any RX ring, a control request,
    /// the next heartbeat, or `at_most`.
    fn sleep(&mut self, at_most: Option<StdDuration>) {
        let now = self.now();
        let next = self.plane.next_wakeup();
        let timeout = match next {
            Some(at) if at <= now => return,
            Some(at) => Some(StdDuration::from_nanos((at - now).as_nanos())),
            None => None,
        };
        let timeout = [timeout, at_most, self.beat_every, Some(LINK_CHECK)]
            .into_iter()
            .flatten()
            .min();
        let io = self.plane.rings();
        let mut fds: Vec<libc::pollfd> = (0..io.channels())
            .map(|c| libc::pollfd {
                fd: io.fd(c),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        fds.push(libc::pollfd {
            fd: self.waker.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        self.sleeps += 1;
        match sys::wait_readable(&mut fds, timeout) {
            Ok(_) => {
                if fds.last().is_some_and(|f| f.revents & libc::POLLIN != 0) {
                    let mut drain = [0u8; 64];
                    while matches!((&self.waker).read(&mut drain), Ok(n) if n > 0) {}
                }
            }
            Err(e) => tracing::warn!("ppoll failed: {e}"),
        }
    }

    /// A snapshot of every counter.
    #[must_use]
    pub fn stats(&self) -> EngineStats {
        let mut ports = self.plane.port_stats();
        let io = self.plane.rings();
        for channel in 0..io.channels() {
            if let Ok(s) = io.xdp_statistics(channel) {
                let x = &mut ports[io.channel_port(channel)].xdp;
                x.rx_dropped += s.rx_dropped();
                x.rx_ring_full += s.rx_ring_full();
                x.rx_fill_ring_empty += s.rx_fill_ring_empty_descs();
                x.rx_invalid += s.rx_invalid_descs();
                x.tx_invalid += s.tx_invalid_descs();
            }
        }
        EngineStats {
            ports,
            frames: self.plane.frames(),
            queued: self.plane.queued(),
            verdicts: self.program.verdicts(),
            loops: self.plane.loops(),
            sleeps: self.sleeps,
            jobs: self.jobs_run,
        }
    }

    /// The scheduler shaping what leaves through `port`.
    #[must_use]
    pub fn scheduler(&self, port: &str) -> Option<&Scheduler<Frame>> {
        self.plane.scheduler(port)
    }

    /// Names of the ports, in configuration order.
    #[must_use]
    pub fn port_names(&self) -> Vec<String> {
        self.plane.port_names()
    }

    /// The filters of `port`, in evaluation order.
    #[must_use]
    pub fn filters(&self, port: &str) -> Option<&[Filter]> {
        self.plane.filters(port)
    }

    /// Applies `ops` in order, between two batches (run it through [`EngineHandle::execute`]):
    /// no packet is received or sent while they apply, so a batch of changes is atomic for
    /// the traffic. Frames the changes purge go back to the pool. Returns, per op, the packets
    /// it dropped or why it failed (the control plane validates first, so a failure is a bug);
    /// the first failure ends the batch, later operations are not applied.
    pub fn apply(&mut self, ops: Vec<PlaneOp>) -> Vec<Result<u64, String>> {
        let now = self.now();
        self.plane.apply(now, ops)
    }

    /// Statistics of the listed classes of `port` (`None` for ids it does not have) and of
    /// their leaf qdiscs, with the port's scheduler-wide statistics and counters.
    #[must_use]
    pub fn class_stats(&self, port: &str, ids: &[ClassId]) -> Option<PortSnapshot> {
        self.plane.class_stats(port, ids)
    }
}
