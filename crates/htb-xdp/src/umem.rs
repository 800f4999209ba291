//! The UMEM and every socket's rings, behind one owner so that frames can only move between
//! rings of the same UMEM. The other module allowed to use `unsafe`.
//!
//! # Frame ownership
//!
//! Every frame of the UMEM is in exactly one place: the free pool here, a fill ring (the
//! kernel's), with the caller (received, not yet queued, sent or released), or a TX ring (the
//! kernel's, until it comes back through the completion ring). [`FrameIo`] counts the kernel's
//! share. The caller holds a frame as a [`Chunk`], which is not `Copy` and which only
//! [`Rings::transmit`] or [`Rings::release`] takes back: it cannot hand a frame back twice.
//! That is what makes the `unsafe` ring calls below sound: xsk-rs requires that a descriptor
//! belongs to this UMEM and is not on two rings (or with the kernel and read by us) at once.
//! The descriptors themselves (xsk-rs's `FrameDesc` is `Copy`) never leave this module: a
//! chunk names its frame by index, and `slots` keeps each frame's last descriptor.
#![allow(unsafe_code)]

use std::num::NonZeroU32;
use std::os::fd::{AsRawFd, RawFd};

use xsk_rs::config::{BindFlags, FrameSize, LibxdpFlags, QueueSize, SocketConfig, UmemConfig};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

use crate::error::XdpError;
use crate::rings::{Chunk, FrameCounts, Rings};

/// UMEM and ring sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoConfig {
    /// Frames in the UMEM (every queued packet holds one).
    pub frames: u32,
    /// Bytes per frame: 2048 carries frames up to 1792 bytes, 4096 up to 3840.
    pub frame_size: u32,
    /// Entries of each RX, TX, fill and completion ring (a power of two).
    pub ring_size: u32,
    /// Bind in zero-copy mode (needs driver support; veth has none).
    pub zero_copy: bool,
}

impl Default for IoConfig {
    fn default() -> Self {
        Self {
            frames: 32_768,
            frame_size: 2048,
            ring_size: 2048,
            zero_copy: false,
        }
    }
}

/// Frames kept for queued packets beyond what the rings and the receive reserve take: a UMEM
/// with fewer would drop nearly every packet it receives.
pub(crate) const QUEUE_FRAMES_MIN: u32 = 1024;

impl IoConfig {
    /// The frames the data plane needs with `channels` sockets moving `batch` frames at a time:
    /// every fill ring full, every TX ring full, the receive reserve (two batches per socket,
    /// below which received frames are dropped so the fill rings never starve), and
    /// [`QUEUE_FRAMES_MIN`] for the queues.
    #[must_use]
    pub fn frames_needed(&self, channels: u32, batch: u32) -> u64 {
        let channels = u64::from(channels);
        2 * channels * u64::from(self.ring_size)
            + channels * u64::from(batch) * 2
            + u64::from(QUEUE_FRAMES_MIN)
    }

    /// The largest interface MTU whose frames fit a UMEM frame: the frame less the kernel's
    /// 256-byte XDP headroom and an Ethernet header with two VLAN tags (18 bytes).
    #[must_use]
    pub fn max_mtu(&self) -> u32 {
        self.frame_size.saturating_sub(256 + 18)
    }

    /// Refuses a UMEM too small for its rings (with every ring full, nothing would be left to
    /// queue, and every packet would be dropped: a silent blackhole).
    ///
    /// # Errors
    /// [`XdpError::Config`] naming the sizes and what they need.
    pub fn check_budget(&self, channels: u32, batch: u32) -> Result<(), XdpError> {
        let needed = self.frames_needed(channels, batch);
        if u64::from(self.frames) >= needed {
            return Ok(());
        }
        Err(XdpError::Config(format!(
            "frames = {} is too few: {channels} socket(s) with ring_size = {} need {} in their \
             fill and TX rings, {} held back for receiving and {QUEUE_FRAMES_MIN} for queues, \
             {needed} in all; raise frames or lower ring_size",
            self.frames,
            self.ring_size,
            2 * u64::from(channels) * u64::from(self.ring_size),
            u64::from(channels) * u64::from(batch) * 2,
        )))
    }
}

/// One AF_XDP socket: a (port, RX queue) pair with its four rings.
struct Channel {
    port: usize,
    queue: u32,
    rx: RxQueue,
    tx: TxQueue,
    fq: FillQueue,
    cq: CompQueue,
    in_fill: u32,
    in_tx: u32,
}

/// One worker's share of the UMEM shared by every port: the sockets of its RX queues (queue
/// `q` of every port belongs to worker `q % workers`), the frames whose home it is, and the
/// rings that return other workers' frames home.
pub(crate) struct FrameIo {
    umem: Umem,
    channels: Vec<Channel>,
    /// Per port, the channel whose TX ring sends its frames (this worker's first socket on it).
    tx_channel: Vec<usize>,
    free: Vec<FrameDesc>,
    /// Per frame index, its descriptor as last received (lengths included).
    slots: Vec<FrameDesc>,
    /// Scratch for the descriptors of one RX or TX batch.
    scratch: Vec<FrameDesc>,
    /// Frames whose home this worker is (`home`), and how many that is.
    home: std::ops::Range<u32>,
    /// Frames of every worker: `frames_per_worker` each, the last one the rest.
    frames_per_worker: u32,
    /// Frames this worker holds as chunks (received or taken over, not yet sent, released or
    /// handed over).
    with_caller: u32,
    /// Free frames of other workers that this one completed or dropped, on their way home:
    /// `returns[w]` to worker `w` (`None` for this one).
    returns: Vec<Option<rtrb::Producer<FrameDesc>>>,
    /// Free frames of this worker coming home from the others.
    homecoming: Vec<rtrb::Consumer<FrameDesc>>,
    ring_size: u32,
    frame_size: usize,
}

/// A frame on its way to another worker's rings of the same UMEM: its chunk and descriptor.
/// Not `Copy`: taking it over ([`Rings::take_over`]) consumes it.
#[derive(Debug)]
#[must_use = "a parcel holds a frame: take it over, or it leaks from the UMEM"]
pub(crate) struct Parcel {
    chunk: Chunk,
    desc: FrameDesc,
}

impl FrameIo {
    /// Creates the UMEM and one socket per (port, queue), and splits them into `workers`
    /// shares: queue `q` of each port goes to worker `q % workers`, and the frames are divided
    /// evenly. `ports[i]` is `(name, queues)`; every port needs at least `workers` queues (each
    /// worker sends through its own socket on every port).
    pub(crate) fn new_shares(
        config: &IoConfig,
        ports: &[(String, u32)],
        workers: usize,
    ) -> Result<Vec<Self>, XdpError> {
        let workers = workers.max(1);
        if let Some((name, queues)) = ports.iter().find(|(_, q)| (*q as usize) < workers) {
            return Err(XdpError::Config(format!(
                "{workers} workers need {workers} queues on every interface, and {name} has \
                 {queues}: each worker receives on its own queues and sends through its own \
                 socket (raise the queues: `ethtool -L {name} combined {workers}`, or \
                 `numtxqueues {workers} numrxqueues {workers}` for a veth; or lower workers)"
            )));
        }
        let ring = QueueSize::new(config.ring_size)
            .map_err(|e| XdpError::Config(format!("ring size: {e}")))?;
        let frame_size = FrameSize::new(config.frame_size)
            .map_err(|e| XdpError::Config(format!("frame size: {e}")))?;
        let umem_config = UmemConfig::builder()
            .frame_size(frame_size)
            .fill_queue_size(ring)
            .comp_queue_size(ring)
            .build()
            .map_err(|e| XdpError::Config(format!("UMEM: {e}")))?;
        let count = NonZeroU32::new(config.frames)
            .ok_or_else(|| XdpError::Config("frames must be above 0".into()))?;
        let (umem, mut free) = Umem::new(umem_config, count, false)
            .map_err(|e| XdpError::Umem(e.to_string(), source_of(&e)))?;
        let frame_bytes = config.frame_size as usize;
        free.sort_by_key(|d| std::cmp::Reverse(d.addr() / frame_bytes));

        let bind = if config.zero_copy {
            BindFlags::XDP_ZEROCOPY
        } else {
            BindFlags::XDP_COPY
        };
        let socket_config = SocketConfig::builder()
            .rx_queue_size(ring)
            .tx_queue_size(ring)
            .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
            .bind_flags(bind | BindFlags::XDP_USE_NEED_WAKEUP)
            .build();

        let mut channels: Vec<Vec<Channel>> = (0..workers).map(|_| Vec::new()).collect();
        let mut tx_channel: Vec<Vec<usize>> = (0..workers).map(|_| Vec::new()).collect();
        for (port, (name, queues)) in ports.iter().enumerate() {
            let iface = name
                .parse()
                .map_err(|_| XdpError::Config(format!("invalid interface name {name:?}")))?;
            for (w, tx) in tx_channel.iter_mut().enumerate() {
                tx.push(channels[w].len());
            }
            for queue in 0..*queues {
                // SAFETY: xsk-rs requires INHIBIT_PROG_LOAD when a (device, queue) is bound more
                // than once; we set it always, and bind each (device, queue) once. The rings it
                // returns are used only with this UMEM, through this type.
                let created = unsafe { Socket::new(socket_config, &umem, &iface, queue) };
                let (tx, rx, rings) = created.map_err(|e| XdpError::Socket {
                    interface: name.clone(),
                    queue,
                    reason: e.to_string(),
                    source: source_of(&e),
                })?;
                let (fq, cq) = rings.ok_or_else(|| XdpError::Socket {
                    interface: name.clone(),
                    queue,
                    reason: "no fill/completion ring pair for a first bind".into(),
                    source: None,
                })?;
                if let Err(e) =
                    crate::sys::set_max_tx_budget(tx.fd().as_raw_fd(), config.ring_size.min(512))
                {
                    tracing::debug!("{name} queue {queue}: keeping the default TX budget ({e})");
                }
                channels[queue as usize % workers].push(Channel {
                    port,
                    queue,
                    rx,
                    tx,
                    fq,
                    cq,
                    in_fill: 0,
                    in_tx: 0,
                });
            }
        }
        let total = config.frames;
        let per_worker = total / workers as u32;
        let home_size = |w: usize| {
            if w + 1 == workers {
                total - per_worker * (workers as u32 - 1)
            } else {
                per_worker
            }
        };
        // returns[from][to]: the ring from worker `from` to worker `to`, sized for every frame
        // whose home `to` is (so a push never fails while the frames are counted right).
        let mut returns: Vec<Vec<Option<rtrb::Producer<FrameDesc>>>> = (0..workers)
            .map(|_| (0..workers).map(|_| None).collect())
            .collect();
        let mut homecoming: Vec<Vec<rtrb::Consumer<FrameDesc>>> =
            (0..workers).map(|_| Vec::new()).collect();
        for (from, row) in returns.iter_mut().enumerate() {
            for (to, slot) in row.iter_mut().enumerate() {
                if from != to {
                    let (producer, consumer) = rtrb::RingBuffer::new(home_size(to) as usize);
                    *slot = Some(producer);
                    homecoming[to].push(consumer);
                }
            }
        }
        let mut shares = Vec::with_capacity(workers);
        for (w, ((channels, tx_channel), (returns, homecoming))) in channels
            .into_iter()
            .zip(tx_channel)
            .zip(returns.into_iter().zip(homecoming))
            .enumerate()
        {
            let start = per_worker * w as u32;
            let end = start + home_size(w);
            // `free` is sorted by index, highest first: this worker's frames are at its end.
            let mine = free.split_off(free.len() - (end - start) as usize);
            let mut io = Self {
                umem: umem.clone(),
                channels,
                tx_channel,
                free: mine,
                slots: vec![FrameDesc::default(); total as usize],
                scratch: Vec::new(),
                home: start..end,
                frames_per_worker: per_worker.max(1),
                with_caller: 0,
                returns,
                homecoming,
                ring_size: config.ring_size,
                frame_size: config.frame_size as usize,
            };
            io.refill();
            shares.push(io);
        }
        Ok(shares)
    }

    /// The RX queue of a channel's socket.
    pub(crate) fn channel_queue(&self, channel: usize) -> u32 {
        self.channels[channel].queue
    }

    /// The worker whose frame `index` is.
    fn home_of(&self, index: usize) -> usize {
        (index / self.frames_per_worker as usize).min(self.returns.len() - 1)
    }

    /// A free frame goes to its home's pool: this one's, or back through a return ring.
    fn free_frame(&mut self, desc: FrameDesc) {
        let home = self.home_of(desc.addr() / self.frame_size);
        match self.returns.get_mut(home).and_then(Option::as_mut) {
            Some(ring) => {
                if let Err(rtrb::PushError::Full(desc)) = ring.push(desc) {
                    // Sized for all of the home's frames, so never; kept here rather than lost.
                    self.free.push(desc);
                }
            }
            None => self.free.push(desc),
        }
    }

    /// The socket fd of a channel (for the XSKMAP and for polling).
    pub(crate) fn fd(&self, channel: usize) -> RawFd {
        self.channels[channel].rx.fd().as_raw_fd()
    }

    /// Kernel statistics of a channel's socket (`XDP_STATISTICS`).
    pub(crate) fn xdp_statistics(
        &self,
        channel: usize,
    ) -> std::io::Result<xsk_rs::socket::XdpStatistics> {
        self.channels[channel].rx.fd().xdp_statistics()
    }

    /// The descriptor of a frame the caller holds.
    fn slot(&self, chunk: &Chunk) -> &FrameDesc {
        &self.slots[chunk.index() as usize]
    }
}

impl Rings for FrameIo {
    type Parcel = Parcel;

    fn channels(&self) -> usize {
        self.channels.len()
    }

    fn channel_port(&self, channel: usize) -> usize {
        self.channels[channel].port
    }

    fn receive(&mut self, channel: usize, out: &mut Vec<Chunk>, max: usize) -> usize {
        self.scratch.clear();
        self.scratch.resize(max, FrameDesc::default());
        let ch = &mut self.channels[channel];
        // SAFETY: the descriptors written are frames of this UMEM that the kernel filled and
        // releases to us; none of them is anywhere else (see the module docs).
        let n = unsafe { ch.rx.consume(&mut self.scratch) };
        ch.in_fill -= n as u32;
        self.with_caller += n as u32;
        for desc in &self.scratch[..n] {
            let index = desc.addr() / self.frame_size;
            self.slots[index] = *desc;
            out.push(Chunk::received(index as u32, desc.lengths().data() as u32));
        }
        n
    }

    fn bytes(&self, chunk: &Chunk) -> &[u8] {
        // SAFETY: the caller holds `chunk`, a frame of this UMEM that no ring references, so the
        // kernel does not write it while we read.
        unsafe { self.umem.data(self.slot(chunk)) }.contents()
    }

    fn rewrite(&mut self, chunk: &mut Chunk, edit: &mut dyn FnMut(&mut [u8])) {
        let desc = &mut self.slots[chunk.index() as usize];
        // SAFETY: the caller holds `chunk` (mutably), a frame of this UMEM that no ring
        // references, so neither the kernel nor anyone else reads or writes it while we do.
        let mut data = unsafe { self.umem.data_mut(desc) };
        edit(data.contents_mut());
    }

    fn tx_room(&mut self, port: usize, want: u32) -> u32 {
        let ch = &mut self.channels[self.tx_channel[port]];
        // libxdp's xsk_prod_nb_free answers at least `nb` when it can, possibly more.
        ch.tx.nb_free(want).min(want)
    }

    fn transmit(&mut self, port: usize, chunks: &mut Vec<Chunk>) -> usize {
        if chunks.is_empty() {
            return 0;
        }
        self.scratch.clear();
        self.scratch
            .extend(chunks.iter().map(|c| self.slots[c.index() as usize]));
        let ch = &mut self.channels[self.tx_channel[port]];
        // SAFETY: every descriptor is a frame of this UMEM held by the caller as a chunk; the
        // ring takes all or none of them, and the chunks of those it took are consumed below.
        let n = unsafe { ch.tx.produce(&self.scratch) };
        ch.in_tx += n as u32;
        self.with_caller -= n as u32;
        chunks.drain(..n);
        n
    }

    /// Copy mode sends only inside `sendto`, at most the TX budget per call.
    fn kick(&mut self) -> bool {
        let mut pending = false;
        for ch in &mut self.channels {
            if ch.in_tx > 0 {
                pending = true;
                if ch.tx.needs_wakeup()
                    && let Err(e) = ch.tx.wakeup()
                {
                    tracing::debug!("TX kick failed: {e}");
                }
            }
        }
        pending
    }

    fn reap(&mut self) -> usize {
        let mut reaped = 0;
        for c in 0..self.channels.len() {
            let ch = &mut self.channels[c];
            if ch.in_tx == 0 {
                continue;
            }
            let start = self.free.len();
            let n = ch.in_tx as usize;
            self.free.resize(start + n, FrameDesc::default());
            // SAFETY: completion entries are frames of this UMEM the kernel finished sending;
            // they return to our pool and nowhere else.
            let done = unsafe { ch.cq.consume(&mut self.free[start..]) };
            self.free.truncate(start + done);
            ch.in_tx -= done as u32;
            reaped += done;
            if self.returns.len() > 1 {
                // Frames received by other workers go home.
                let completed = self.free.split_off(start);
                for desc in completed {
                    self.free_frame(desc);
                }
            }
        }
        reaped
    }

    /// Capped at the ring size and at what the pool holds.
    fn refill(&mut self) {
        for ring in &mut self.homecoming {
            while let Ok(desc) = ring.pop() {
                self.free.push(desc);
            }
        }
        for ch in &mut self.channels {
            let want = self
                .ring_size
                .saturating_sub(ch.in_fill)
                .min(self.free.len() as u32);
            if want == 0 {
                continue;
            }
            // Reserve is all-or-nothing: ask how much room there is first. xsk_prod_nb_free
            // may answer more than asked (all the room it knows of), and more than the free
            // pool holds: taking that many would underflow.
            let room = ch.fq.nb_free(want).min(want);
            if room == 0 {
                continue;
            }
            let from = self.free.len() - room as usize;
            // SAFETY: these frames are in the free pool, owned by nobody else; after this call
            // they belong to the kernel until they come back through RX.
            let n = unsafe { ch.fq.produce(&self.free[from..]) };
            self.free.truncate(self.free.len() - n);
            ch.in_fill += n as u32;
        }
    }

    fn release(&mut self, chunk: Chunk) {
        self.with_caller -= 1;
        let desc = *self.slot(&chunk);
        self.free_frame(desc);
    }

    fn hand_over(&mut self, chunk: Chunk) -> Parcel {
        self.with_caller -= 1;
        let desc = *self.slot(&chunk);
        Parcel { chunk, desc }
    }

    fn take_over(&mut self, parcel: Parcel) -> Chunk {
        self.with_caller += 1;
        self.slots[parcel.chunk.index() as usize] = parcel.desc;
        parcel.chunk
    }

    /// `total` is the frames whose home this worker is; those on their way between workers
    /// are in no one's counts.
    fn counts(&self) -> FrameCounts {
        let in_fill = self.channels.iter().map(|c| c.in_fill).sum();
        let in_tx = self.channels.iter().map(|c| c.in_tx).sum();
        FrameCounts {
            total: self.home.len() as u32,
            free: self.free.len() as u32,
            in_fill,
            in_tx,
            with_caller: self.with_caller,
            between_workers: 0,
        }
    }
}

fn source_of(e: &dyn std::error::Error) -> Option<std::io::Error> {
    e.source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .map(|io| std::io::Error::new(io.kind(), io.to_string()))
}

/// A TX-only AF_XDP traffic generator: one socket whose frames all hold the same packet, sent
/// as fast as the ring and the kernel take them (the lab's 64-byte packet source; iperf3
/// cannot offer enough small packets on two cores).
pub struct TxGenerator {
    _umem: Umem,
    tx: TxQueue,
    cq: CompQueue,
    _rx: RxQueue,
    _fq: FillQueue,
    free: Vec<FrameDesc>,
    /// Each frame's descriptor with the packet's length: completions come back with length 0.
    templates: Vec<FrameDesc>,
    frame_size: usize,
    batch: usize,
}

impl std::fmt::Debug for TxGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxGenerator")
            .field("frames", &self.free.len())
            .finish_non_exhaustive()
    }
}

impl TxGenerator {
    /// Binds a socket to `interface`'s `queue` and writes `packet` into every frame.
    ///
    /// # Errors
    /// [`XdpError`] when the UMEM or socket cannot be created, or the packet does not fit.
    pub fn new(interface: &str, queue: u32, packet: &[u8], frames: u32) -> Result<Self, XdpError> {
        use std::io::Write;
        let config = IoConfig {
            frames,
            ring_size: 2048,
            ..IoConfig::default()
        };
        if packet.len() > (config.frame_size - 256) as usize {
            return Err(XdpError::Config(format!(
                "a {}-byte packet does not fit a frame",
                packet.len()
            )));
        }
        let ring = QueueSize::new(config.ring_size).map_err(|e| XdpError::Config(e.to_string()))?;
        let umem_config = UmemConfig::builder()
            .frame_size(
                FrameSize::new(config.frame_size).map_err(|e| XdpError::Config(e.to_string()))?,
            )
            .fill_queue_size(ring)
            .comp_queue_size(ring)
            .build()
            .map_err(|e| XdpError::Config(e.to_string()))?;
        let count = NonZeroU32::new(frames)
            .ok_or_else(|| XdpError::Config("frames must be above 0".into()))?;
        let (umem, mut free) = Umem::new(umem_config, count, false)
            .map_err(|e| XdpError::Umem(e.to_string(), source_of(&e)))?;
        let socket_config = SocketConfig::builder()
            .rx_queue_size(ring)
            .tx_queue_size(ring)
            .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
            .bind_flags(BindFlags::XDP_COPY | BindFlags::XDP_USE_NEED_WAKEUP)
            .build();
        let iface = interface
            .parse()
            .map_err(|_| XdpError::Config(format!("invalid interface {interface:?}")))?;
        let socket_error = |reason: String, source| XdpError::Socket {
            interface: interface.to_owned(),
            queue,
            reason,
            source,
        };
        // SAFETY: one bind of (interface, queue) with INHIBIT_PROG_LOAD; the rings are used
        // only with this UMEM, by this type.
        let (tx, rx, rings) = unsafe { Socket::new(socket_config, &umem, &iface, queue) }
            .map_err(|e| socket_error(e.to_string(), source_of(&e)))?;
        let (fq, cq) =
            rings.ok_or_else(|| socket_error("no fill/completion rings".into(), None))?;
        for desc in &mut free {
            // SAFETY: every frame is ours (none is on a ring yet); `desc` is borrowed mutably.
            let mut data = unsafe { umem.data_mut(desc) };
            data.cursor()
                .write_all(packet)
                .map_err(|e| XdpError::Config(format!("writing a frame: {e}")))?;
        }
        if let Err(e) = crate::sys::set_max_tx_budget(tx.fd().as_raw_fd(), 512) {
            tracing::debug!("keeping the default TX budget ({e})");
        }
        let frame_size = config.frame_size as usize;
        let mut templates = vec![FrameDesc::default(); free.len()];
        for desc in &free {
            templates[desc.addr() / frame_size] = *desc;
        }
        Ok(Self {
            _umem: umem,
            tx,
            cq,
            _rx: rx,
            _fq: fq,
            free,
            templates,
            frame_size,
            batch: 64,
        })
    }

    /// Sends for `duration`, at most `pps` frames per second when given (paced in batches;
    /// otherwise as fast as the kernel takes them); returns the frames the kernel completed.
    pub fn run(&mut self, duration: std::time::Duration, pps: Option<f64>) -> u64 {
        let start = std::time::Instant::now();
        let deadline = start + duration;
        let mut sent = 0u64;
        let mut submitted = 0u64;
        let mut done = vec![FrameDesc::default(); self.batch * 4];
        loop {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            let mut n = (self.tx.nb_free(self.batch as u32) as usize)
                .min(self.free.len())
                .min(self.batch);
            if let Some(pps) = pps {
                // Frames the schedule allows by now; sleep off a lead of more than a batch.
                let due = (now.duration_since(start).as_secs_f64() * pps) as u64;
                let allowed = due.saturating_sub(submitted);
                if allowed == 0 {
                    let ahead =
                        (submitted + 1) as f64 / pps - now.duration_since(start).as_secs_f64();
                    std::thread::sleep(std::time::Duration::from_secs_f64(ahead.clamp(0.0, 0.001)));
                }
                n = n.min(usize::try_from(allowed).unwrap_or(usize::MAX));
            }
            if n > 0 {
                let from = self.free.len() - n;
                // SAFETY: these frames are in our free list, owned by nobody else; they come
                // back through the completion ring.
                let produced = unsafe { self.tx.produce(&self.free[from..]) };
                self.free.truncate(self.free.len() - produced);
                submitted += produced as u64;
            }
            if let Err(e) = self.tx.wakeup() {
                tracing::debug!("TX kick failed: {e}");
            }
            // SAFETY: completions are frames of this UMEM the kernel finished with.
            let completed = unsafe { self.cq.consume(&mut done) };
            self.free.extend(
                done[..completed]
                    .iter()
                    .map(|d| self.templates[d.addr() / self.frame_size]),
            );
            sent += completed as u64;
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_of_2048_bytes_hold_an_mtu_of_1774() {
        assert_eq!(IoConfig::default().max_mtu(), 1774);
        let jumbo = IoConfig {
            frame_size: 4096,
            ..IoConfig::default()
        };
        assert_eq!(jumbo.max_mtu(), 3822);
    }

    #[test]
    fn a_umem_too_small_for_its_rings_is_refused_with_the_sizes() {
        let default = IoConfig::default();
        // Two veth ports (one queue each), batch 64: 2 × 2 × 2048 + 256 + 1024 frames.
        assert_eq!(default.frames_needed(2, 64), 9472);
        assert!(default.check_budget(2, 64).is_ok());
        // The blackhole of the issue: rings of 16384 on two ports fill all 32768 frames.
        let big_rings = IoConfig {
            ring_size: 16384,
            ..default
        };
        let err = big_rings.check_budget(2, 64).unwrap_err().to_string();
        assert!(
            err.contains("frames = 32768 is too few")
                && err.contains("ring_size = 16384")
                && err.contains("66816 in all"),
            "{err}"
        );
        // Enough frames for them is accepted.
        let enough = IoConfig {
            frames: 66816,
            ..big_rings
        };
        assert!(enough.check_budget(2, 64).is_ok());
    }
}
