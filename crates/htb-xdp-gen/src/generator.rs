//! Sends one packet over and over from a [`TxSocket`]: every chain of frames holds the packet,
//! written once; a chain goes back on the TX ring as soon as the kernel completes all its
//! frames. A packet larger than one frame (a jumbo frame) spans a chain of consecutive frames,
//! sent with multi-buffer.

use std::time::{Duration, Instant};

use htb_xdp::{MAX_CHAIN, TxFrame, TxFrameError, TxSocket, XdpError};

/// Packets put on the TX ring at once.
const BATCH: usize = 64;

/// Why the generator cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GeneratorError {
    /// The socket or its UMEM.
    #[error(transparent)]
    Socket(#[from] XdpError),
    /// Writing the packet into a frame.
    #[error(transparent)]
    Frame(#[from] TxFrameError),
    /// More frames per packet than multi-buffer chains.
    #[error("a packet of {len} bytes needs more than {max} frames")]
    TooLong {
        /// The packet's length.
        len: usize,
        /// Frames a chain may have.
        max: u32,
    },
}

/// One socket whose frames all hold the same packet.
#[derive(Debug)]
pub(crate) struct TxGenerator {
    socket: TxSocket,
    /// Chains ready to send, each one's frames in order; sent from the end.
    ready: Vec<TxFrame>,
    /// Frames per packet.
    chain: usize,
    /// Completions of one pass.
    done: Vec<TxFrame>,
    /// Per chain (frame index / chain), its frames completed so far.
    partial: Vec<Vec<TxFrame>>,
}

impl TxGenerator {
    /// Binds a socket to `interface`'s `queue` with `frames` frames and writes `packet` into
    /// every chain of them.
    pub(crate) fn new(
        interface: &str,
        queue: u32,
        packet: &[u8],
        frames: u32,
    ) -> Result<Self, GeneratorError> {
        // The frame room does not depend on the multi-buffer flag: probe it with the default
        // configuration's numbers first, so the socket is bound once with the right flag.
        let room = htb_xdp::IoConfig::default().frame_room() as usize;
        let chain = packet.len().div_ceil(room).max(1);
        if chain > MAX_CHAIN as usize {
            return Err(GeneratorError::TooLong {
                len: packet.len(),
                max: MAX_CHAIN,
            });
        }
        let (mut socket, frames) = TxSocket::bind(interface, queue, frames, chain > 1)?;
        let room = socket.frame_room();
        let chains = frames.len() / chain;
        // Frames come in index order: chain c is frames c * chain .. (c + 1) * chain.
        let mut ready = Vec::with_capacity(chains * chain);
        for frame in frames.into_iter().take(chains * chain) {
            let piece = frame.index() % chain;
            let bytes =
                &packet[(piece * room).min(packet.len())..((piece + 1) * room).min(packet.len())];
            socket.write(&frame, bytes, piece + 1 < chain)?;
            ready.push(frame);
        }
        Ok(Self {
            socket,
            ready,
            chain,
            done: Vec::new(),
            partial: (0..chains).map(|_| Vec::with_capacity(chain)).collect(),
        })
    }

    /// Sends for `duration`, at most `pps` packets per second when given (paced in batches;
    /// otherwise as fast as the kernel takes them); returns the packets the kernel completed.
    pub(crate) fn run(&mut self, duration: Duration, pps: Option<f64>) -> u64 {
        let start = Instant::now();
        let deadline = start + duration;
        let mut sent = 0u64;
        let mut submitted = 0u64;
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let room = self.socket.tx_room((BATCH * self.chain) as u32) as usize / self.chain;
            let mut n = room.min(self.ready.len() / self.chain).min(BATCH);
            if let Some(pps) = pps {
                // Packets the schedule allows by now; sleep off a lead of more than a batch.
                let due = (now.duration_since(start).as_secs_f64() * pps) as u64;
                let allowed = due.saturating_sub(submitted);
                if allowed == 0 {
                    let ahead =
                        (submitted + 1) as f64 / pps - now.duration_since(start).as_secs_f64();
                    std::thread::sleep(Duration::from_secs_f64(ahead.clamp(0.0, 0.001)));
                }
                n = n.min(usize::try_from(allowed).unwrap_or(usize::MAX));
            }
            if n > 0 {
                // Every frame is this socket's: the send cannot be refused.
                if let Ok(frames) = self.socket.send(&mut self.ready, n * self.chain) {
                    submitted += (frames / self.chain) as u64;
                }
            }
            if let Err(e) = self.socket.kick() {
                eprintln!("htb-xdp-gen: TX kick failed: {e}");
            }
            self.socket
                .completed(&mut self.done, BATCH * 4 * self.chain);
            for frame in self.done.drain(..) {
                let c = frame.index() / self.chain;
                let partial = &mut self.partial[c];
                partial.push(frame);
                if partial.len() == self.chain {
                    // Sent again in frame order, whatever order they completed in.
                    partial.sort_unstable_by_key(TxFrame::index);
                    self.ready.append(partial);
                    sent += 1;
                }
            }
        }
        sent
    }
}
