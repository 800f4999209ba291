//! The data plane: one thread moves frames from the RX rings through each egress port's
//! classifier and HTB scheduler to its TX ring.
//!
//! Per loop: receive a batch on every socket, classify and enqueue each frame into its egress
//! port's scheduler; dequeue what the schedulers release into the TX rings and kick them; take
//! completed frames back; refill the fill rings. With nothing to do, the thread sleeps until
//! the earliest scheduler wake-up, a received frame or a control request (ns-precision
//! `ppoll`, timer slack 1 ns) — two cores are shared with the traffic. `busy_poll` spins instead.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration as StdDuration;

use htb_config::TreeSpec;
use htb_config::filter::{Classifier, Filter};
use htb_core::{
    ClassId, ClassSpec, Instant, LeafConfig, LeafStats, Scheduler, SchedulerConfig, Target,
};
use xsk_rs::FrameDesc;

use crate::error::XdpError;
use crate::frame::{FlowHasher, Frame};
use crate::netdev::{NetDev, format_mac};
use crate::parse::{parse, set_ce};
use crate::program::{AttachMode, Verdicts, XdpProgram};
use crate::sys;
use crate::umem::{FrameCounts, FrameIo, IoConfig};

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

/// What one pass of the loop did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Frames were received, queued, sent or completed.
    Moved,
    /// Nothing moved, but frames wait in a TX ring.
    TxStuck,
    /// Nothing to do until a frame arrives or a class may send.
    Idle,
}

/// How frames find their egress port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// By the kernel's routes and neighbours (looked up in XDP).
    #[default]
    Router,
    /// Everything from a port goes out of its peer.
    Bridge,
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
    /// Frames dropped from queues by control changes (class or qdisc deleted, leaf made inner).
    pub drops_purged: u64,
    /// Kernel socket counters (`XDP_STATISTICS`), summed over this port's sockets.
    pub xdp: XdpCounters,
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
    /// Frames queued in schedulers (part of `frames.with_caller`).
    pub queued: u64,
    /// The XDP program's verdicts.
    pub verdicts: Verdicts,
    /// Loop iterations.
    pub loops: u64,
    /// Times the loop slept.
    pub sleeps: u64,
}

struct Port {
    dev: NetDev,
    peer: Option<usize>,
    htb: Scheduler<Frame>,
    classifier: Classifier,
    /// Per filter, its class as a checked handle (no id lookup per packet; a handle made stale
    /// by a tree change falls back to the id).
    targets: Vec<Target>,
    stats: PortStats,
}

impl Port {
    fn resolve_targets(&mut self) {
        self.targets = self
            .classifier
            .filters()
            .iter()
            .map(|f| {
                self.htb
                    .handle(f.class)
                    .map_or(Target::Class(f.class), Target::Handle)
            })
            .collect();
    }
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

/// The data plane. Create it with [`Engine::start`], then [`Engine::run`] it on a thread.
pub struct Engine {
    io: FrameIo,
    program: XdpProgram,
    ports: Vec<Port>,
    mode: Mode,
    by_mac: HashMap<[u8; 6], usize>,
    clock: std::time::Instant,
    busy_poll: bool,
    realtime: Option<u8>,
    batch: usize,
    rx_batch: Vec<FrameDesc>,
    tx_batch: Vec<FrameDesc>,
    jobs: mpsc::Receiver<Job>,
    waker: UnixStream,
    stop: Arc<AtomicBool>,
    loops: u64,
    sleeps: u64,
    low_water: u32,
    flows: FlowHasher,
    frame_size: u32,
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
            .field("mode", &self.mode)
            .field("ports", &self.ports.len())
            .finish_non_exhaustive()
    }
}

fn validate(config: &EngineConfig) -> Result<Vec<NetDev>, XdpError> {
    if config.ports.is_empty() {
        return Err(XdpError::Config("no interfaces".into()));
    }
    let payload = config.io.frame_size.saturating_sub(256);
    let mut devs = Vec::new();
    for port in &config.ports {
        if devs.iter().any(|d: &NetDev| d.name == port.name) {
            return Err(XdpError::Config(format!(
                "interface {} is listed twice",
                port.name
            )));
        }
        let dev = NetDev::open(&port.name)?;
        if dev.mtu + 18 > payload {
            return Err(XdpError::Interface {
                interface: dev.name,
                reason: format!(
                    "MTU {} does not fit frames of {} bytes (at most {} bytes of MTU)",
                    dev.mtu,
                    config.io.frame_size,
                    payload.saturating_sub(18)
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
        for (port, dev) in config.ports.iter().zip(devs) {
            let (htb, classifier) = scheduler(port)?;
            let peer = port
                .peer
                .as_ref()
                .and_then(|p| config.ports.iter().position(|c| &c.name == p));
            let stats = PortStats {
                name: dev.name.clone(),
                ..PortStats::default()
            };
            let mut port = Port {
                dev,
                peer,
                htb,
                classifier,
                targets: Vec::new(),
                stats,
            };
            port.resolve_targets();
            ports.push(port);
        }
        let mut program = XdpProgram::load(config.mode == Mode::Bridge, config.liveness)?;
        let channels: Vec<(String, u32)> = ports
            .iter()
            .map(|p| (p.dev.name.clone(), p.dev.rx_queues))
            .collect();
        let io = FrameIo::new(&config.io, &channels)?;
        let mut slot = 0u32;
        for (i, port) in ports.iter().enumerate() {
            program.add_port(port.dev.ifindex, slot, port.dev.rx_queues, port.dev.mac)?;
            for ch in (0..io.channels()).filter(|&c| io.channel_port(c) == i) {
                program.set_socket(slot, io.fd(ch))?;
                slot += 1;
            }
        }
        for port in &ports {
            let mode = program.attach(&port.dev.name, config.attach)?;
            tracing::info!(
                "{}: XDP attached in {mode} mode, {} RX queue(s)",
                port.dev.name,
                port.dev.rx_queues
            );
        }
        let by_mac = ports
            .iter()
            .enumerate()
            .map(|(i, p)| (p.dev.mac, i))
            .collect();
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
        let low_water = (io.channels() * batch * 2) as u32;
        let engine = Self {
            io,
            program,
            ports,
            mode: config.mode,
            by_mac,
            clock,
            busy_poll: config.busy_poll,
            realtime: config.realtime,
            batch,
            rx_batch: Vec::with_capacity(batch),
            tx_batch: Vec::with_capacity(batch),
            jobs,
            waker: waker_rx,
            stop,
            loops: 0,
            sleeps: 0,
            low_water,
            flows: FlowHasher::default(),
            frame_size: config.io.frame_size,
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
            job(self);
        }
    }

    /// One pass of receive, schedule, transmit.
    pub fn poll_once(&mut self) -> Progress {
        self.loops += 1;
        let mut work = false;
        let now = self.now();
        for channel in 0..self.io.channels() {
            let port = self.io.channel_port(channel);
            let mut batch = std::mem::take(&mut self.rx_batch);
            let n = self.io.receive(channel, &mut batch, self.batch);
            work |= n > 0;
            // Keep frames for the fill rings: when the pool runs low, drop here, counted,
            // rather than at the NIC.
            let pool_low = n > 0 && self.io.counts().free < self.low_water;
            for desc in batch.drain(..) {
                self.ingest(port, desc, now, pool_low);
            }
            self.rx_batch = batch;
        }
        work |= self.io.reap() > 0;
        for port in 0..self.ports.len() {
            work |= self.transmit(port, now);
        }
        let pending = self.io.kick();
        work |= self.io.reap() > 0;
        self.io.refill();
        match (work, pending) {
            (true, _) => Progress::Moved,
            (false, true) => Progress::TxStuck,
            (false, false) => Progress::Idle,
        }
    }

    /// Classifies a received frame into its egress port's scheduler (or drops it).
    fn ingest(&mut self, ingress: usize, desc: FrameDesc, now: Instant, pool_low: bool) {
        let bytes = self.io.bytes(&desc);
        let len = bytes.len() as u64;
        let stats = &mut self.ports[ingress].stats;
        stats.rx_packets += 1;
        stats.rx_bytes += len;
        let egress = match self.mode {
            Mode::Bridge => self.ports[ingress].peer,
            // The XDP program wrote the egress port's MAC as the source.
            Mode::Router => bytes
                .get(6..12)
                .and_then(|m| <[u8; 6]>::try_from(m).ok())
                .and_then(|m| self.by_mac.get(&m).copied()),
        };
        let Some(egress) = egress else {
            self.ports[ingress].stats.drops_no_egress += 1;
            self.io.release(desc);
            return;
        };
        if pool_low {
            self.ports[egress].stats.drops_pool += 1;
            self.io.release(desc);
            return;
        }
        let parsed = parse(bytes);
        let frame = Frame::new(desc, &parsed, &self.flows, self.frame_size);
        let port = &mut self.ports[egress];
        let target = port
            .classifier
            .classify_index(&parsed.info)
            .map_or(Target::Unclassified, |i| port.targets[i]);
        if let Err(dropped) = port.htb.enqueue(now, target, frame) {
            port.stats.drops_queue += 1;
            self.io.release(dropped.packet.desc);
        }
        self.release_dropped(egress);
    }

    /// Takes back the frames `port`'s leaves dropped (CoDel, a full flow, a batch from the
    /// fattest flow) and returns them to the pool.
    fn release_dropped(&mut self, port: usize) {
        let p = &mut self.ports[port];
        for frame in p.htb.drain_dropped() {
            p.stats.drops_queue += 1;
            self.io.release(frame.desc);
        }
    }

    /// Moves what `port`'s scheduler releases into its TX ring. Returns whether any moved.
    fn transmit(&mut self, port: usize, now: Instant) -> bool {
        let mut moved = false;
        loop {
            let room = self.io.tx_room(port, self.batch as u32) as usize;
            if room == 0 {
                return moved;
            }
            while self.tx_batch.len() < room {
                let Some(mut frame) = self.ports[port].htb.dequeue(now) else {
                    break;
                };
                if let Some((l3, ipv6)) = frame.ce_site() {
                    // The leaf marked it instead of dropping it.
                    self.io
                        .edit(&mut frame.desc, |bytes| set_ce(bytes, l3, ipv6));
                }
                let p = &mut self.ports[port];
                p.stats.tx_packets += 1;
                p.stats.tx_bytes += frame.desc.lengths().data() as u64;
                self.tx_batch.push(frame.desc);
            }
            self.release_dropped(port);
            if self.tx_batch.is_empty() {
                return moved;
            }
            let sent = self.io.transmit(port, &self.tx_batch);
            debug_assert_eq!(sent, self.tx_batch.len(), "room was checked");
            // Should the ring refuse despite the room check, the frames are dropped, not leaked.
            for desc in self.tx_batch.drain(sent..) {
                self.io.release(desc);
            }
            self.tx_batch.clear();
            moved = true;
            if sent < room {
                return moved;
            }
        }
    }

    /// Sleeps until the earliest scheduler wake-up, a frame on any RX ring, a control request,
    /// the next heartbeat, or `at_most`.
    fn sleep(&mut self, at_most: Option<StdDuration>) {
        let now = self.now();
        let next = self.ports.iter().filter_map(|p| p.htb.next_wakeup()).min();
        let timeout = match next {
            Some(at) if at <= now => return,
            Some(at) => Some(StdDuration::from_nanos((at - now).as_nanos())),
            None => None,
        };
        let timeout = [timeout, at_most, self.beat_every]
            .into_iter()
            .flatten()
            .min();
        let mut fds: Vec<libc::pollfd> = (0..self.io.channels())
            .map(|c| libc::pollfd {
                fd: self.io.fd(c),
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
        let mut ports: Vec<PortStats> = self.ports.iter().map(|p| p.stats.clone()).collect();
        for channel in 0..self.io.channels() {
            if let Ok(s) = self.io.xdp_statistics(channel) {
                let x = &mut ports[self.io.channel_port(channel)].xdp;
                x.rx_dropped += s.rx_dropped();
                x.rx_ring_full += s.rx_ring_full();
                x.rx_fill_ring_empty += s.rx_fill_ring_empty_descs();
                x.rx_invalid += s.rx_invalid_descs();
                x.tx_invalid += s.tx_invalid_descs();
            }
        }
        EngineStats {
            ports,
            frames: self.io.counts(),
            queued: self.ports.iter().map(|p| p.htb.len()).sum(),
            verdicts: self.program.verdicts(),
            loops: self.loops,
            sleeps: self.sleeps,
        }
    }

    /// The scheduler shaping what leaves through `port`.
    #[must_use]
    pub fn scheduler(&self, port: &str) -> Option<&Scheduler<Frame>> {
        self.ports
            .iter()
            .find(|p| p.dev.name == port)
            .map(|p| &p.htb)
    }

    /// Names of the ports, in configuration order.
    #[must_use]
    pub fn port_names(&self) -> Vec<String> {
        self.ports.iter().map(|p| p.dev.name.clone()).collect()
    }

    /// The filters of `port`, in evaluation order.
    #[must_use]
    pub fn filters(&self, port: &str) -> Option<&[Filter]> {
        self.ports
            .iter()
            .find(|p| p.dev.name == port)
            .map(|p| p.classifier.filters())
    }

    /// Applies `ops` in order, between two batches (run it through [`EngineHandle::execute`]):
    /// no packet is received or sent while they apply, so a batch of changes is atomic for
    /// the traffic. Frames the changes purge go back to the pool. Returns, per op, the packets
    /// it dropped or why it failed (the control plane validates first, so a failure is a bug).
    pub fn apply(&mut self, ops: Vec<PlaneOp>) -> Vec<Result<u64, String>> {
        let now = self.now();
        let mut touched = vec![false; self.ports.len()];
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            let Some(index) = self.ports.iter().position(|p| p.dev.name == op.port()) else {
                results.push(Err(format!("no port {}", op.port())));
                continue;
            };
            touched[index] = true;
            let port = &mut self.ports[index];
            let purged = match op {
                PlaneOp::SetTree { scheduler, .. } => {
                    let mut old = std::mem::replace(&mut port.htb, *scheduler);
                    Ok(old.drain())
                }
                PlaneOp::SetQdisc {
                    default_minor,
                    r2q,
                    direct_qlen,
                    ..
                } => {
                    port.htb.set_default_class(default_minor);
                    port.htb.set_r2q(r2q);
                    port.htb.set_direct_qlen(direct_qlen);
                    Ok(Vec::new())
                }
                PlaneOp::AddClass {
                    id, parent, spec, ..
                } => port.htb.add_class(now, id, parent, &spec).map(|c| c.purged),
                PlaneOp::ChangeClass { id, spec, .. } => {
                    port.htb.change_class(now, id, &spec).map(|c| c.purged)
                }
                PlaneOp::DeleteClass { id, .. } => port.htb.delete_class(now, id).map(|c| c.purged),
                PlaneOp::SetLeaf { id, leaf, .. } => {
                    port.htb.set_leaf(now, id, leaf.as_ref()).map(|c| c.purged)
                }
                PlaneOp::ChangeLeaf { id, leaf, .. } => {
                    // Packets over new limits are dropped, not purged.
                    port.htb.change_leaf(now, id, &leaf).map(|c| c.purged)
                }
                PlaneOp::SetFilters { filters, .. } => {
                    port.classifier = Classifier::new(filters);
                    Ok(Vec::new())
                }
            };
            let dropped: Vec<Frame> = self.ports[index].htb.drain_dropped().collect();
            results.push(match purged {
                Ok(frames) => {
                    let n = (frames.len() + dropped.len()) as u64;
                    self.ports[index].stats.drops_purged += n;
                    for frame in frames.into_iter().chain(dropped) {
                        self.io.release(frame.desc);
                    }
                    Ok(n)
                }
                Err(e) => {
                    for frame in dropped {
                        self.io.release(frame.desc);
                    }
                    Err(e.to_string())
                }
            });
        }
        // Class slots may have moved: re-resolve the filters' class handles.
        for (port, touched) in self.ports.iter_mut().zip(touched) {
            if touched {
                port.resolve_targets();
            }
        }
        results
    }

    /// Statistics of the listed classes of `port` (`None` for ids it does not have) and of
    /// their leaf qdiscs, with the port's scheduler-wide statistics and counters.
    #[must_use]
    pub fn class_stats(&self, port: &str, ids: &[ClassId]) -> Option<PortSnapshot> {
        let p = self.ports.iter().find(|p| p.dev.name == port)?;
        Some(PortSnapshot {
            scheduler: p.htb.stats(),
            port: p.stats.clone(),
            classes: ids.iter().map(|&id| p.htb.class_stats(id)).collect(),
            leaves: ids.iter().map(|&id| p.htb.leaf_stats(id)).collect(),
        })
    }
}

/// A change to a port's tree or filters, for [`Engine::apply`].
#[derive(Debug)]
#[non_exhaustive]
pub enum PlaneOp {
    /// Replace the whole tree (tc `qdisc add|del|replace`); frames queued in the old one are
    /// dropped. Build the scheduler off the data-plane thread with [`new_scheduler`].
    SetTree {
        /// Port name.
        port: String,
        /// The new scheduler.
        scheduler: Box<Scheduler<Frame>>,
    },
    /// New qdisc parameters; classes stay.
    SetQdisc {
        /// Port name.
        port: String,
        /// Default class minor.
        default_minor: u32,
        /// Rate-to-quantum divisor.
        r2q: u32,
        /// Direct queue limit.
        direct_qlen: u32,
    },
    /// tc `class add`.
    AddClass {
        /// Port name.
        port: String,
        /// Class.
        id: ClassId,
        /// Parent (`None`: root).
        parent: Option<ClassId>,
        /// Parameters.
        spec: ClassSpec,
    },
    /// tc `class change`.
    ChangeClass {
        /// Port name.
        port: String,
        /// Class.
        id: ClassId,
        /// Parameters.
        spec: ClassSpec,
    },
    /// tc `class del`.
    DeleteClass {
        /// Port name.
        port: String,
        /// Class.
        id: ClassId,
    },
    /// A new, empty leaf qdisc for a leaf class (`None`: the default one); the old one's
    /// frames are dropped.
    SetLeaf {
        /// Port name.
        port: String,
        /// Class.
        id: ClassId,
        /// The leaf.
        leaf: Option<LeafConfig>,
    },
    /// New parameters for a leaf class's qdisc, in place (same kind).
    ChangeLeaf {
        /// Port name.
        port: String,
        /// Class.
        id: ClassId,
        /// The parameters.
        leaf: LeafConfig,
    },
    /// Replace the port's filters.
    SetFilters {
        /// Port name.
        port: String,
        /// The filters (any order: they are sorted by prio, stably).
        filters: Vec<Filter>,
    },
}

impl PlaneOp {
    /// The port it changes.
    #[must_use]
    pub fn port(&self) -> &str {
        match self {
            Self::SetTree { port, .. }
            | Self::SetQdisc { port, .. }
            | Self::AddClass { port, .. }
            | Self::ChangeClass { port, .. }
            | Self::DeleteClass { port, .. }
            | Self::SetLeaf { port, .. }
            | Self::ChangeLeaf { port, .. }
            | Self::SetFilters { port, .. } => port,
        }
    }
}

/// A scheduler for a port: `tree`'s classes, or none (unshaped: everything goes through the
/// direct queue). Its leaves' randomness (`sfq`'s perturbation) is seeded from the OS, once per
/// process.
///
/// # Errors
/// A class the tree cannot hold (only if the tree was not validated).
pub fn new_scheduler(tree: Option<&TreeSpec>) -> Result<Scheduler<Frame>, htb_core::ClassError> {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        use std::hash::BuildHasher;
        std::hash::RandomState::new().hash_one("htbd leaf seed")
    });
    match tree {
        Some(tree) => {
            let mut tree = tree.clone();
            tree.config.seed = seed;
            tree.build(Instant::ZERO)
        }
        None => Ok(Scheduler::new(SchedulerConfig {
            seed,
            ..SchedulerConfig::default()
        })),
    }
}

/// One port's statistics, from [`Engine::class_stats`].
#[derive(Clone, Debug)]
pub struct PortSnapshot {
    /// The scheduler's totals.
    pub scheduler: htb_core::SchedulerStats,
    /// The port's counters.
    pub port: PortStats,
    /// Per requested class, in request order.
    pub classes: Vec<Option<htb_core::ClassStats>>,
    /// Per requested class, its leaf qdisc's statistics (`None` for inner classes).
    pub leaves: Vec<Option<LeafStats>>,
}
