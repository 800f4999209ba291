//! The boundary between the data plane and the rings it moves frames through.
//!
//! The data plane (`Dataplane`) never touches a socket: it asks a [`Rings`] for
//! received frames and hands frames back to it to send or release, as smoltcp's stack asks its
//! `phy::Device`. Production runs on the AF_XDP implementation (`umem::FrameIo`); the property
//! tests run on a simulated UMEM, without root.
//!
//! # Frame ownership
//!
//! A frame the data plane holds is a [`Chunk`]: not `Copy`, not `Clone`, made only by
//! [`Rings::receive`], and given up only by [`Rings::transmit`] (it goes to a TX ring) or
//! [`Rings::release`] (back to the free pool). So a frame cannot be sent twice, or sent and
//! released: the compiler refuses it. What the types cannot say — that no `Chunk` is simply
//! dropped — the counters check: [`FrameCounts::packets_held`] must equal what the schedulers
//! queue whenever the data plane is between passes.

/// A packet held by the data plane: the UMEM frame it starts in, the length of the whole
/// packet, and how many frames it spans. A packet larger than one frame (a jumbo frame received
/// with AF_XDP multi-buffer, `XDP_USE_SG`) is a chain: its first frame holds the headers, and
/// the ring implementation keeps the links to the others, so a chunk stays small for the
/// queues. Whatever releases or sends a chunk releases or sends its whole chain.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a frame must be sent or released, or it leaks from the UMEM"]
pub struct Chunk {
    index: u32,
    len: u32,
    frames: u16,
}

impl Chunk {
    /// Only a ring implementation creates chunks, for frames it has just received.
    pub(crate) fn received(index: u32, len: u32) -> Self {
        Self {
            index,
            len,
            frames: 1,
        }
    }

    /// A packet received in `frames` chained frames starting at frame `index`.
    pub(crate) fn received_chain(index: u32, len: u32, frames: u16) -> Self {
        Self { index, len, frames }
    }

    /// The UMEM frames the packet occupies: 1, or the length of its chain.
    #[must_use]
    pub fn frames(&self) -> u16 {
        self.frames
    }

    /// The index in the UMEM of the packet's (first) frame.
    #[must_use]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The packet's length in bytes, over every frame of its chain.
    #[must_use]
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the frame holds no bytes (rings never deliver one; for completeness).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Where the frames are, for the leak check and the statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameCounts {
    /// All frames of the UMEM.
    pub total: u32,
    /// In the free pool.
    pub free: u32,
    /// Lent to the kernel's fill rings (or waiting in its RX rings for us).
    pub in_fill: u32,
    /// Submitted to TX rings, not completed yet.
    pub in_tx: u32,
    /// With the data plane (received and not yet sent or released):
    /// `total - free - in_fill - in_tx` with one worker.
    pub with_caller: u32,
    /// The packets those frames hold (as many as the frames, unless some are chains of
    /// multi-buffer frames): what the schedulers must be queueing between passes.
    pub packets_held: u32,
    /// On their way between workers (handed over, or going home free): the rest.
    pub between_workers: u32,
}

impl FrameCounts {
    /// Adds another worker's counts of the same UMEM's frames (all but `between_workers`,
    /// which only the sum can tell: [`with_between_workers`](Self::with_between_workers)).
    /// Every field is named, so that one added to the struct does not compile until it is
    /// handled here.
    pub fn add(&mut self, other: &Self) {
        let Self {
            total,
            free,
            in_fill,
            in_tx,
            with_caller,
            packets_held,
            between_workers: _,
        } = *other;
        self.total += total;
        self.free += free;
        self.in_fill += in_fill;
        self.in_tx += in_tx;
        self.with_caller += with_caller;
        self.packets_held += packets_held;
    }

    /// The sum with what it does not account for: frames between workers.
    #[must_use]
    pub fn with_between_workers(self) -> Self {
        Self {
            between_workers: self
                .total
                .saturating_sub(self.free + self.in_fill + self.in_tx + self.with_caller),
            ..self
        }
    }
}

/// The sockets of every port on one UMEM, as the data plane sees them. Channels are sockets
/// (one per port and RX queue); each port sends through one of its channels.
pub(crate) trait Rings {
    /// A frame on its way to another worker's rings of the same UMEM.
    type Parcel: Send;

    /// Number of channels.
    fn channels(&self) -> usize;

    /// The port a channel belongs to.
    fn channel_port(&self, channel: usize) -> usize;

    /// Takes up to `max` frames received on `channel` and moves the packets they complete into
    /// `out`; they are the caller's now. Returns how many packets. (A chain whose last frame
    /// has not been taken yet waits here for the next call.)
    fn receive(&mut self, channel: usize, out: &mut Vec<Chunk>, max: usize) -> usize;

    /// The most frames one packet may span: 1 without multi-buffer.
    fn max_chain(&self) -> u32;

    /// The packet in a frame the caller holds: its first frame's bytes (all of it, unless it
    /// is a chain; the headers are always there).
    fn bytes(&self, chunk: &Chunk) -> &[u8];

    /// Runs `edit` on the first frame of a packet the caller holds (to write an ECN mark).
    fn rewrite(&mut self, chunk: &mut Chunk, edit: &mut dyn FnMut(&mut [u8]));

    /// How many frames (descriptors) `port`'s TX ring takes now, at most `want`.
    fn tx_room(&mut self, port: usize, want: u32) -> u32;

    /// Submits the packets in `chunks` (every frame of each) to `port`'s TX ring, all or none,
    /// removing them if it took them; otherwise they are still the caller's. Returns how many
    /// packets it took.
    fn transmit(&mut self, port: usize, chunks: &mut Vec<Chunk>) -> usize;

    /// Asks the kernel to send what waits in the TX rings. Returns whether any still holds
    /// frames not completed.
    fn kick(&mut self) -> bool;

    /// Takes completed TX frames back into the free pool. Returns how many.
    fn reap(&mut self) -> usize;

    /// Tops the fill rings up from the free pool.
    fn refill(&mut self);

    /// Returns a packet the caller holds (every frame of it) to the free pool (a drop).
    fn release(&mut self, chunk: Chunk);

    /// Gives a frame the caller holds to another worker (whose rings share this UMEM): it is
    /// no longer this worker's until [`take_over`](Self::take_over) on the other side.
    fn hand_over(&mut self, chunk: Chunk) -> Self::Parcel;

    /// Takes a frame another worker handed over: the caller holds it now.
    fn take_over(&mut self, parcel: Self::Parcel) -> Chunk;

    /// Where the frames are.
    fn counts(&self) -> FrameCounts;
}
