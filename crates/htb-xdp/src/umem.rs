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
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use xsk_rs::config::{BindFlags, FrameSize, LibxdpFlags, QueueSize, SocketConfig, UmemConfig};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

use crate::error::{ConfigError, XdpError};
use crate::frame_pool::FramePool;
use crate::io_config::IoConfig;
use crate::rings::{Chunk, FrameCounts, Rings};

mod tx_socket;
pub use tx_socket::{TxFrame, TxFrameError, TxSocket};

/// `XDP_PKT_CONTD` in a descriptor's options: more frames of this packet follow.
const XDP_PKT_CONTD: u32 = 1;

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
    /// A multi-buffer packet whose last frame has not been taken from the RX ring yet.
    partial: Option<PartialChain>,
}

/// The frames of a packet taken so far from an RX ring (multi-buffer).
#[derive(Clone, Copy, Debug)]
struct PartialChain {
    head: u32,
    last: u32,
    len: u32,
    frames: u32,
    /// Longer than [`MAX_CHAIN`](crate::MAX_CHAIN): its frames are freed as they come, and the packet dropped.
    discard: bool,
}

/// The chains of multi-buffer packets, shared by every worker of the UMEM: per frame, the
/// next frame of its packet and its own length. Written by the worker that received the
/// frame, read by the one that sends or frees the packet; a frame handed over crosses an SPSC
/// ring (release, then acquire), so relaxed accesses here are ordered by it.
#[derive(Debug)]
struct Links(Box<[AtomicU64]>);

/// No next frame.
const END: u32 = u32::MAX;

impl Links {
    fn new(frames: usize) -> Self {
        Self((0..frames).map(|_| AtomicU64::new(0)).collect())
    }

    fn set(&self, index: u32, next: u32, len: u32) {
        self.0[index as usize].store(u64::from(next) << 32 | u64::from(len), Ordering::Relaxed);
    }

    /// Frame `index`'s next frame (or [`END`]) and its length.
    fn get(&self, index: u32) -> (u32, u32) {
        let v = self.0[index as usize].load(Ordering::Relaxed);
        ((v >> 32) as u32, v as u32)
    }

    /// Frame `index` is followed by `next`.
    fn link(&self, index: u32, next: u32) {
        let (_, len) = self.get(index);
        self.set(index, next, len);
    }
}

/// One worker's share of the UMEM shared by every port: the sockets of its RX queues (queue
/// `q` of every port belongs to worker `q % workers`), the frames whose home it is, and the
/// rings that return other workers' frames home.
pub(crate) struct FrameIo {
    umem: Umem,
    channels: Vec<Channel>,
    /// Per port, the channel whose TX ring sends its frames (this worker's first socket on it).
    tx_channel: Vec<usize>,
    /// The frames whose home this worker is, and the rings that return the others' home.
    pool: FramePool<FrameDesc>,
    /// Per frame index, its descriptor as last received (lengths included); every frame's
    /// address from the start, so that any worker can send any frame of a chain.
    slots: Vec<FrameDesc>,
    /// The chains of multi-buffer packets (empty without multi-buffer).
    links: Arc<Links>,
    /// Frames per packet at most.
    max_chain: u32,
    /// Packets the caller holds.
    packets_held: u32,
    /// Multi-buffer packets longer than [`MAX_CHAIN`](crate::MAX_CHAIN) frames, dropped here (the XDP program
    /// passes such packets to the kernel, so only a kernel that split a packet finer than
    /// expected sends one).
    oversized: u64,
    /// Scratch for the descriptors of one RX or TX batch.
    scratch: Vec<FrameDesc>,
    /// Scratch for completed frames on their way to their homes.
    returning: Vec<FrameDesc>,
    /// Frames this worker holds as chunks (received or taken over, not yet sent, released or
    /// handed over).
    with_caller: u32,
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
            return Err(ConfigError::TooFewQueues {
                workers,
                port: name.clone(),
                queues: *queues,
            }
            .into());
        }
        let ring = QueueSize::new(config.ring_size).map_err(ConfigError::RingSize)?;
        let frame_size = FrameSize::new(config.frame_size).map_err(ConfigError::FrameSize)?;
        let umem_config = UmemConfig::builder()
            .frame_size(frame_size)
            .fill_queue_size(ring)
            .comp_queue_size(ring)
            .build()
            .map_err(ConfigError::Umem)?;
        let count = NonZeroU32::new(config.frames).ok_or(ConfigError::NoFrames)?;
        let (umem, mut free) = Umem::new(umem_config, count, false)
            .map_err(|e| XdpError::Umem(e.to_string(), source_of(&e)))?;
        let frame_bytes = config.frame_size as usize;
        free.sort_by_key(|d| std::cmp::Reverse(d.addr() / frame_bytes));
        let mut every_frame = vec![FrameDesc::default(); free.len()];
        for desc in &free {
            every_frame[desc.addr() / frame_bytes] = *desc;
        }
        let links = Arc::new(Links::new(if config.multi_buffer { free.len() } else { 0 }));

        let mut bind = if config.zero_copy {
            BindFlags::XDP_ZEROCOPY
        } else {
            BindFlags::XDP_COPY
        };
        if config.multi_buffer {
            // Inherited by every later socket of this UMEM (they may not set flags).
            bind |= BindFlags::XDP_USE_SG;
        }
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
                .map_err(|_| ConfigError::InterfaceName(name.clone()))?;
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
                    reason: if config.multi_buffer && config.zero_copy {
                        format!(
                            "{e} (the MTU needs multi-buffer, and zero-copy multi-buffer needs \
                             driver support: lower the MTU or turn zero_copy off)"
                        )
                    } else {
                        e.to_string()
                    },
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
                    partial: None,
                });
            }
        }
        // `free` is sorted by index, highest first: each worker's frames are at its end.
        let pools = FramePool::shares(config.frames, workers, |home| {
            free.split_off(free.len() - home.len())
        });
        let mut shares = Vec::with_capacity(workers);
        for ((channels, tx_channel), pool) in channels.into_iter().zip(tx_channel).zip(pools) {
            let mut io = Self {
                umem: umem.clone(),
                channels,
                tx_channel,
                pool,
                slots: every_frame.clone(),
                links: Arc::clone(&links),
                max_chain: config.max_chain(),
                packets_held: 0,
                oversized: 0,
                scratch: Vec::new(),
                returning: Vec::new(),
                with_caller: 0,
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

    /// A free frame goes to its home's pool: this one's, or back through a return ring.
    fn free_frame(&mut self, desc: FrameDesc) {
        let index = u32::try_from(desc.addr() / self.frame_size).unwrap_or(u32::MAX);
        self.pool.put(index, desc);
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

    /// The frames of `chunk`'s packet after its first, in order.
    fn tail(&self, chunk: &Chunk) -> impl Iterator<Item = (u32, u32)> + '_ {
        let mut next = self.links_after(chunk);
        std::iter::from_fn(move || {
            if next == END {
                return None;
            }
            let (after, len) = self.links.get(next);
            let this = next;
            next = after;
            Some((this, len))
        })
        .take(usize::from(chunk.frames()).saturating_sub(1))
    }

    /// Frees every frame of a packet the caller no longer holds (walking its links as it
    /// goes: freeing a frame does not touch them).
    fn free_chain(&mut self, chunk: &Chunk) {
        let head = *self.slot(chunk);
        let mut next = self.links_after(chunk);
        self.free_frame(head);
        for _ in 1..chunk.frames() {
            if next == END {
                break;
            }
            let (after, _) = self.links.get(next);
            self.free_frame(self.slots[next as usize]);
            next = after;
        }
    }

    /// The frame after `chunk`'s first ([`END`] for a single frame).
    fn links_after(&self, chunk: &Chunk) -> u32 {
        if chunk.frames() > 1 {
            self.links.get(chunk.index()).0
        } else {
            END
        }
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
        let mut packets = 0;
        let mut discarded = Vec::new();
        for desc in &self.scratch[..n] {
            let index = desc.addr() / self.frame_size;
            self.slots[index] = *desc;
            let index = index as u32;
            let len = desc.lengths().data() as u32;
            if self.max_chain == 1 {
                out.push(Chunk::received(index, len));
                packets += 1;
                continue;
            }
            // A multi-buffer packet: its frames come in order, each but the last flagged.
            self.links.set(index, END, len);
            let more = desc.options() & XDP_PKT_CONTD != 0;
            let chain = match ch.partial.take() {
                None => PartialChain {
                    head: index,
                    last: index,
                    len,
                    frames: 1,
                    discard: false,
                },
                Some(mut chain) => {
                    chain.frames += 1;
                    chain.len += len;
                    if chain.frames > self.max_chain && !chain.discard {
                        // Free what came so far; the rest is freed as it comes.
                        chain.discard = true;
                        let mut at = chain.head;
                        discarded.push(at);
                        while at != chain.last {
                            at = self.links.get(at).0;
                            discarded.push(at);
                        }
                    }
                    if chain.discard {
                        discarded.push(index);
                    } else {
                        self.links.link(chain.last, index);
                    }
                    chain.last = index;
                    chain
                }
            };
            if more {
                ch.partial = Some(chain);
            } else if chain.discard {
                self.oversized += 1;
                if self.oversized.is_power_of_two() {
                    tracing::warn!(
                        "{} packet(s) of more than {} frames dropped: the kernel split them \
                         finer than multi-buffer sends (raise frame_size)",
                        self.oversized,
                        self.max_chain
                    );
                }
            } else {
                let frames = u16::try_from(chain.frames).unwrap_or(u16::MAX);
                out.push(Chunk::received_chain(chain.head, chain.len, frames));
                packets += 1;
            }
        }
        self.with_caller -= discarded.len() as u32;
        for index in discarded {
            self.free_frame(self.slots[index as usize]);
        }
        self.packets_held += packets;
        packets as usize
    }

    fn max_chain(&self) -> u32 {
        self.max_chain
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
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        for chunk in chunks.iter() {
            let mut head = self.slots[chunk.index() as usize];
            if chunk.frames() == 1 {
                head.set_options(0);
                scratch.push(head);
                continue;
            }
            head.set_options(XDP_PKT_CONTD);
            scratch.push(head);
            for (index, len) in self.tail(chunk) {
                let mut desc = self.slots[index as usize];
                // SAFETY: the caller holds the chain, so no ring references this frame; only
                // the descriptor's length is set, through the cursor.
                unsafe { self.umem.data_mut(&mut desc) }
                    .cursor()
                    .set_pos(len as usize);
                desc.set_options(XDP_PKT_CONTD);
                scratch.push(desc);
            }
            if let Some(last) = scratch.last_mut() {
                last.set_options(0);
            }
        }
        let ch = &mut self.channels[self.tx_channel[port]];
        // SAFETY: every descriptor is a frame of this UMEM held by the caller as (part of) a
        // chunk; the ring takes all or none of them, and the chunks are consumed below if so.
        let n = unsafe { ch.tx.produce(&scratch) };
        let taken = if n == scratch.len() {
            ch.in_tx += n as u32;
            self.with_caller -= n as u32;
            self.packets_held -= chunks.len() as u32;
            chunks.drain(..).count()
        } else {
            0
        };
        self.scratch = scratch;
        taken
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

    /// Completions come per frame, chains too: each frame goes back on its own.
    fn reap(&mut self) -> usize {
        let mut reaped = 0;
        for c in 0..self.channels.len() {
            let ch = &mut self.channels[c];
            if ch.in_tx == 0 {
                continue;
            }
            let free = &mut self.pool.free;
            let start = free.len();
            let n = ch.in_tx as usize;
            free.resize(start + n, FrameDesc::default());
            // SAFETY: completion entries are frames of this UMEM the kernel finished sending;
            // they return to our pool and nowhere else.
            let done = unsafe { ch.cq.consume(&mut free[start..]) };
            free.truncate(start + done);
            ch.in_tx -= done as u32;
            reaped += done;
            if self.pool.shared() {
                // Frames received by other workers go home (through a scratch list kept
                // between calls: no allocation per reap).
                let mut completed = std::mem::take(&mut self.returning);
                completed.extend(self.pool.free.drain(start..));
                for desc in completed.drain(..) {
                    self.free_frame(desc);
                }
                self.returning = completed;
            }
        }
        reaped
    }

    /// Keeps every fill ring full, capped at what the pool holds: a channel may hold a fill
    /// ring and an RX ring of frames (`in_fill` counts both), so that a pass that comes late
    /// finds the RX ring full (the kernel queued a ring's worth) with the fill ring still
    /// stocked, instead of drops counted as "fill ring empty" while frames sit in the pool.
    /// Kicks the fill ring when the kernel asks (`XDP_RING_NEED_WAKEUP`, zero-copy drivers).
    fn refill(&mut self) {
        self.pool.welcome_home();
        let free = &mut self.pool.free;
        for ch in &mut self.channels {
            let want = (2 * self.ring_size)
                .saturating_sub(ch.in_fill)
                .min(self.ring_size)
                .min(free.len() as u32);
            if want > 0 {
                // Reserve is all-or-nothing: ask how much room there is first.
                // xsk_prod_nb_free may answer more than asked (all the room it knows of), and
                // more than the free pool holds: taking that many would underflow.
                let room = ch.fq.nb_free(want).min(want);
                if room > 0 {
                    let from = free.len() - room as usize;
                    // SAFETY: these frames are in the free pool, owned by nobody else; after
                    // this call they belong to the kernel until they come back through RX.
                    let n = unsafe { ch.fq.produce(&free[from..]) };
                    free.truncate(free.len() - n);
                    ch.in_fill += n as u32;
                }
            }
            if ch.fq.needs_wakeup()
                && let Err(e) = ch.fq.wakeup(ch.rx.fd_mut(), 0)
            {
                tracing::debug!("fill ring kick failed: {e}");
            }
        }
    }

    fn release(&mut self, chunk: Chunk) {
        self.with_caller -= u32::from(chunk.frames());
        self.packets_held -= 1;
        self.free_chain(&chunk);
    }

    fn hand_over(&mut self, chunk: Chunk) -> Parcel {
        self.with_caller -= u32::from(chunk.frames());
        self.packets_held -= 1;
        let desc = *self.slot(&chunk);
        Parcel { chunk, desc }
    }

    fn take_over(&mut self, parcel: Parcel) -> Chunk {
        self.with_caller += u32::from(parcel.chunk.frames());
        self.packets_held += 1;
        self.slots[parcel.chunk.index() as usize] = parcel.desc;
        parcel.chunk
    }

    /// `total` is the frames whose home this worker is; those on their way between workers
    /// are in no one's counts. Frames of a chain still arriving count as the caller's.
    fn counts(&self) -> FrameCounts {
        let in_fill = self.channels.iter().map(|c| c.in_fill).sum();
        let in_tx = self.channels.iter().map(|c| c.in_tx).sum();
        FrameCounts {
            total: self.pool.home().len() as u32,
            free: self.pool.free.len() as u32,
            in_fill,
            in_tx,
            with_caller: self.with_caller,
            packets_held: self.packets_held,
            between_workers: 0,
        }
    }
}

/// The OS error under an xsk-rs error, kept as the OS error (`raw_os_error` survives; xsk-rs
/// gives it by reference only).
fn source_of(e: &dyn std::error::Error) -> Option<std::io::Error> {
    e.source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .map(|io| {
            io.raw_os_error().map_or_else(
                || std::io::Error::new(io.kind(), io.to_string()),
                std::io::Error::from_raw_os_error,
            )
        })
}
