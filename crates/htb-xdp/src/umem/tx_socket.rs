//! A TX-only AF_XDP socket on a UMEM of its own, with a safe API: the lab's packet generator
//! (`htb-xdp-gen`) is built on it outside this crate's `unsafe` modules.
//!
//! # Frame ownership
//!
//! Each frame is a [`TxFrame`] handle, which is neither `Copy` nor `Clone`. Whoever holds it
//! may write into the frame; [`TxSocket::send`] takes it, and [`TxSocket::completed`] gives it
//! back when the kernel has finished with it. A frame on the TX ring or with the kernel has no
//! handle, so it cannot be written or sent again. A handle names its socket too, so a frame of
//! one socket cannot be sent on another. That is what makes the `unsafe` ring calls sound.

use std::num::NonZeroU32;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

use xsk_rs::config::{BindFlags, FrameSize, LibxdpFlags, QueueSize, SocketConfig, UmemConfig};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

use super::{IoConfig, XDP_PKT_CONTD, source_of};
use crate::error::{ConfigError, XdpError};

/// Numbers sockets, so that a frame handle is only taken by its own socket.
static SOCKETS: AtomicU64 = AtomicU64::new(1);

/// One frame of a [`TxSocket`], held by its user between [`TxSocket::completed`] (or
/// [`TxSocket::bind`]) and [`TxSocket::send`].
#[derive(Debug)]
pub struct TxFrame {
    socket: u64,
    index: u32,
}

impl TxFrame {
    /// The frame's number in its UMEM (0 ..= frames - 1): stable while it comes and goes.
    #[must_use]
    pub fn index(&self) -> usize {
        self.index as usize
    }
}

/// A socket bound to one queue of an interface, for sending only.
pub struct TxSocket {
    id: u64,
    umem: Umem,
    tx: TxQueue,
    cq: CompQueue,
    _rx: RxQueue,
    _fq: FillQueue,
    /// Each frame's descriptor, with the length and options last written: completions come
    /// back with length 0, and a frame is sent again as it was written.
    descs: Vec<FrameDesc>,
    frame_size: usize,
    frame_room: usize,
    scratch: Vec<FrameDesc>,
    done: Vec<FrameDesc>,
}

impl std::fmt::Debug for TxSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxSocket")
            .field("frames", &self.descs.len())
            .field("frame_room", &self.frame_room)
            .finish_non_exhaustive()
    }
}

/// What [`TxSocket::write`] and [`TxSocket::send`] refuse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxFrameError {
    /// The handle is another socket's.
    #[error("frame {0} belongs to another socket")]
    ForeignFrame(usize),
    /// More bytes than a frame holds.
    #[error("{len} bytes do not fit a frame ({room} bytes)")]
    TooLong {
        /// Bytes given.
        len: usize,
        /// What one frame holds.
        room: usize,
    },
}

impl TxSocket {
    /// Binds a socket to `interface`'s `queue` (copy mode; with multi-buffer when
    /// `multi_buffer`, so that a packet may span consecutive frames) over a new UMEM of
    /// `frames` frames, and hands out every frame.
    ///
    /// # Errors
    /// [`XdpError`] when the UMEM or the socket cannot be created.
    pub fn bind(
        interface: &str,
        queue: u32,
        frames: u32,
        multi_buffer: bool,
    ) -> Result<(Self, Vec<TxFrame>), XdpError> {
        let config = IoConfig {
            frames,
            ring_size: 2048,
            ..IoConfig::default()
        };
        let ring = QueueSize::new(config.ring_size).map_err(ConfigError::RingSize)?;
        let umem_config = UmemConfig::builder()
            .frame_size(FrameSize::new(config.frame_size).map_err(ConfigError::FrameSize)?)
            .fill_queue_size(ring)
            .comp_queue_size(ring)
            .build()
            .map_err(ConfigError::Umem)?;
        let count = NonZeroU32::new(frames).ok_or(ConfigError::NoFrames)?;
        let (umem, free) = Umem::new(umem_config, count, false)
            .map_err(|e| XdpError::Umem(e.to_string(), source_of(&e)))?;
        let mut bind = BindFlags::XDP_COPY | BindFlags::XDP_USE_NEED_WAKEUP;
        if multi_buffer {
            bind |= BindFlags::XDP_USE_SG;
        }
        let socket_config = SocketConfig::builder()
            .rx_queue_size(ring)
            .tx_queue_size(ring)
            .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
            .bind_flags(bind)
            .build();
        let iface = interface
            .parse()
            .map_err(|_| ConfigError::InterfaceName(interface.to_owned()))?;
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
        let frame_size = config.frame_size as usize;
        let mut descs = vec![FrameDesc::default(); free.len()];
        for desc in free {
            descs[desc.addr() / frame_size] = desc;
        }
        if let Err(e) = crate::sys::set_max_tx_budget(tx.fd().as_raw_fd(), 512) {
            tracing::debug!("keeping the default TX budget ({e})");
        }
        let id = SOCKETS.fetch_add(1, Ordering::Relaxed);
        let handles = (0..descs.len() as u32)
            .map(|index| TxFrame { socket: id, index })
            .collect();
        Ok((
            Self {
                id,
                umem,
                tx,
                cq,
                _rx: rx,
                _fq: fq,
                descs,
                frame_size,
                frame_room: config.frame_room() as usize,
                scratch: Vec::new(),
                done: Vec::new(),
            },
            handles,
        ))
    }

    /// Bytes one frame holds.
    #[must_use]
    pub fn frame_room(&self) -> usize {
        self.frame_room
    }

    /// Writes `bytes` into `frame`, from its start; `more`: the packet goes on in the next frame
    /// sent (multi-buffer's `XDP_PKT_CONTD`). The frame keeps them when it comes back, to be
    /// sent again as it is.
    ///
    /// # Errors
    /// [`TxFrameError`]: another socket's frame, or more bytes than a frame holds.
    pub fn write(&mut self, frame: &TxFrame, bytes: &[u8], more: bool) -> Result<(), TxFrameError> {
        self.check(frame)?;
        if bytes.len() > self.frame_room {
            return Err(TxFrameError::TooLong {
                len: bytes.len(),
                room: self.frame_room,
            });
        }
        let desc = &mut self.descs[frame.index()];
        // SAFETY: the caller holds the frame's handle, so the frame is on no ring and the
        // kernel does not read it; `desc` is borrowed mutably from this socket's own table.
        let mut data = unsafe { self.umem.data_mut(desc) };
        let mut cursor = data.cursor();
        cursor.set_pos(0);
        // The length was checked against the frame's room: the cursor cannot run out.
        let _ = std::io::Write::write_all(&mut cursor, bytes);
        desc.set_options(if more { XDP_PKT_CONTD } else { 0 });
        Ok(())
    }

    /// Puts the last `count` frames of `frames` on the TX ring, in order, all or none (a packet
    /// spanning frames must not be cut), and returns how many went (`count` or 0). The frames
    /// sent leave `frames`. Nothing leaves before [`kick`](Self::kick).
    ///
    /// # Errors
    /// [`TxFrameError::ForeignFrame`]: one of them is another socket's (none is sent).
    pub fn send(&mut self, frames: &mut Vec<TxFrame>, count: usize) -> Result<usize, TxFrameError> {
        let from = frames.len().saturating_sub(count);
        self.scratch.clear();
        for frame in &frames[from..] {
            self.check(frame)?;
            self.scratch.push(self.descs[frame.index()]);
        }
        // SAFETY: every descriptor is a frame of this UMEM whose handle the caller held (so it
        // is on no ring and the kernel does not have it); the handles are dropped below when
        // the ring took them, and come back only through the completion ring.
        let produced = unsafe { self.tx.produce(&self.scratch) };
        if produced == self.scratch.len() {
            frames.truncate(from);
            Ok(produced)
        } else {
            Ok(0)
        }
    }

    /// Free slots on the TX ring, up to `wanted`.
    pub fn tx_room(&mut self, wanted: u32) -> u32 {
        self.tx.nb_free(wanted)
    }

    /// Tells the kernel the TX ring has frames (the `sendto` that `XDP_USE_NEED_WAKEUP`
    /// asks for).
    ///
    /// # Errors
    /// The system call's.
    pub fn kick(&mut self) -> std::io::Result<()> {
        self.tx.wakeup()
    }

    /// Appends to `into` the frames the kernel finished sending, at most `max`.
    pub fn completed(&mut self, into: &mut Vec<TxFrame>, max: usize) {
        self.done.resize(max, FrameDesc::default());
        // SAFETY: completions are frames of this UMEM that the kernel finished with; each
        // comes back once, so each gets one handle.
        let n = unsafe { self.cq.consume(&mut self.done) };
        into.extend(self.done[..n].iter().map(|d| TxFrame {
            socket: self.id,
            index: (d.addr() / self.frame_size) as u32,
        }));
    }

    fn check(&self, frame: &TxFrame) -> Result<(), TxFrameError> {
        if frame.socket == self.id {
            Ok(())
        } else {
            Err(TxFrameError::ForeignFrame(frame.index()))
        }
    }
}
