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

/// One socket whose frames all hold the same packet (or, with [`Flows`], the packet with a
/// source port that walks through a range, rewritten as each frame comes back).
#[derive(Debug)]
pub(crate) struct TxGenerator {
    socket: TxSocket,
    /// Varying source ports, when asked for.
    flows: Option<Flows>,
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
            flows: None,
        })
    }

    /// From now on, each packet sent is of the next of `count` flows, round and round: source
    /// ports from 10000 (50 000 of them per destination port, the packet's and up), at byte
    /// `sport_at` of `packet`. Single-frame packets only.
    ///
    /// # Errors
    /// A packet that spans several frames.
    pub(crate) fn vary_source_port(
        &mut self,
        packet: &[u8],
        sport_at: usize,
        count: u32,
    ) -> Result<(), GeneratorError> {
        if self.chain > 1 {
            return Err(GeneratorError::TooLong {
                len: packet.len(),
                max: 1,
            });
        }
        let dport = packet
            .get(sport_at + 2..sport_at + 4)
            .map_or(0, |d| u16::from_be_bytes([d[0], d[1]]));
        let mut flows = Flows {
            packet: packet.to_vec(),
            sport_at,
            dport,
            count: count.max(1),
            next: 0,
        };
        for frame in &self.ready {
            flows.write_next(&mut self.socket, frame)?;
        }
        self.flows = Some(flows);
        Ok(())
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
                    if let Some(flows) = self.flows.as_mut() {
                        // One frame per packet here: the next flow's source port.
                        for frame in partial.iter() {
                            let _ = flows.write_next(&mut self.socket, frame);
                        }
                    }
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

/// Source ports walked through: the packet is rewritten into each frame before it goes again.
#[derive(Debug)]
struct Flows {
    packet: Vec<u8>,
    sport_at: usize,
    /// The packet's own destination port, the first flows'.
    dport: u16,
    count: u32,
    next: u32,
}

/// The first source port of `--flows`.
const FIRST_SPORT: u32 = 10_000;

/// Source ports per destination port: flow `n` has source port `FIRST_SPORT + n % PORTS` and
/// the packet's destination port plus `n / PORTS`, so that a million flows fit in the ports.
const PORTS: u32 = 50_000;

impl Flows {
    /// Writes the packet with the next flow's ports into `frame` (UDP checksum 0 over IPv4: the
    /// ports need no checksum change).
    fn write_next(&mut self, socket: &mut TxSocket, frame: &TxFrame) -> Result<(), TxFrameError> {
        let n = self.next;
        self.next = (self.next + 1) % self.count;
        let sport = u16::try_from(FIRST_SPORT + n % PORTS).unwrap_or(u16::MAX);
        let at = self.sport_at;
        if let Some(ports) = self.packet.get_mut(at..at + 4) {
            let dport = self
                .dport
                .wrapping_add(u16::try_from(n / PORTS).unwrap_or(0));
            ports[..2].copy_from_slice(&sport.to_be_bytes());
            ports[2..].copy_from_slice(&dport.to_be_bytes());
        }
        socket.write(frame, &self.packet, false)
    }
}
