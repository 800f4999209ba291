//! A simulated UMEM and its rings, for the data plane's tests: the kernel's side (filling RX
//! from the fill rings, sending from TX into the completion rings, a link going down) is driven
//! by the test, step by step. Every frame's place is tracked on its own, so a frame released
//! twice, sent while queued, or lost is caught at once rather than inferred from counters.
//!
//! Several workers share one UMEM as in the engine: each has its own sockets (queue `q` of
//! every port is worker `q % workers`'s, and each sends through its first socket on every
//! port), and its own frames, which return to it through the same [`FramePool`] the AF_XDP
//! rings use, wherever they are freed. The rings' state is shared; each worker keeps its own
//! copy of the frames' bytes (what it receives, and what is handed over to it travels with
//! the parcel), so that it can lend them out by reference as a real UMEM does.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use crate::frame_pool::FramePool;
use crate::rings::{Chunk, FrameCounts, Rings};

/// Where one frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// In its home's pool, or on its way there.
    Free,
    Fill,
    Rx,
    /// Held by this worker's data plane.
    Caller(usize),
    Tx,
    Completed,
    /// Handed over to another worker.
    Away,
}

/// A descriptor on an RX or TX ring: a frame, and whether more frames of its packet follow
/// (`XDP_PKT_CONTD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Desc {
    index: u32,
    more: bool,
}

#[derive(Debug, Default)]
struct Channel {
    port: usize,
    /// The worker whose socket it is.
    worker: usize,
    /// TX descriptors the data plane has kicked for, which the kernel may send (copy mode
    /// sends only inside `sendto`, so a frame nobody kicked for stays in the ring).
    kicked: usize,
    /// The frames of the packet being sent, until its last.
    sending: Vec<u32>,
    fill: VecDeque<u32>,
    rx: VecDeque<Desc>,
    tx: VecDeque<Desc>,
    completed: VecDeque<u32>,
    /// The frames of a packet taken from `rx` so far whose last has not come.
    partial: Vec<u32>,
}

/// What the kernel side saw on one port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Wire {
    /// Frames handed to the socket.
    pub delivered: u64,
    /// Frames the kernel dropped: fill ring empty or RX ring full.
    pub refused: u64,
    /// Packets sent out of the port (a chain of frames is one), and their bytes.
    pub sent: u64,
    pub sent_bytes: u64,
    /// Sent IPv4 frames carrying ECN CE.
    pub sent_ce: u64,
    /// Sent IPv4 frames whose header checksum is wrong.
    pub sent_bad_checksum: u64,
}

/// The ones' complement sum of an IPv4 header (RFC 1071), folded: 0xffff when its checksum
/// field is right.
pub(super) fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The kernel's side of the UMEM, shared by the workers' rings.
#[derive(Debug)]
struct Kernel {
    frame_size: usize,
    ring_size: usize,
    lens: Vec<u32>,
    /// Per frame, the next frame of its packet (multi-buffer chains).
    next: Vec<Option<u32>>,
    /// Frames one packet may span (1: no multi-buffer; larger packets are truncated).
    max_chain: u32,
    places: Vec<Place>,
    /// Frames in [`Place::Caller`] per worker, and in [`Place::Away`]: kept as frames move, so
    /// that the counts the data plane asks for every pass cost no walk over every frame
    /// (`check` walks them and compares).
    held: Vec<u32>,
    away: u32,
    channels: Vec<Channel>,
    /// Per port: whether its link is up, how many TX slots the kernel offers (`None`: the
    /// ring's free space), and what went over its wire.
    link_up: Vec<bool>,
    tx_limit: Vec<Option<u32>>,
    wire: Vec<Wire>,
    /// Per port, the first frame of every packet sent, in the order sent, once the test asks
    /// for them ([`SimRings::record`]).
    heads: Vec<Option<Vec<Vec<u8>>>>,
}

impl Kernel {
    fn move_to(&mut self, index: u32, from: Place, to: Place) {
        let place = &mut self.places[index as usize];
        assert_eq!(*place, from, "frame {index} is not where the rings put it");
        *place = to;
        for (place, step) in [(from, -1i64), (to, 1)] {
            let count = match place {
                Place::Caller(w) => &mut self.held[w],
                Place::Away => &mut self.away,
                _ => continue,
            };
            *count = u32::try_from(i64::from(*count) + step).expect("counted once");
        }
    }

    /// The frames of a packet the caller holds, first to last, checked against the chunk.
    fn chain(&self, chunk: &Chunk) -> Vec<u32> {
        let mut frames = vec![chunk.index()];
        while let Some(next) = self.next[*frames.last().unwrap_or(&0) as usize] {
            frames.push(next);
        }
        assert_eq!(
            frames.len(),
            usize::from(chunk.frames()),
            "{chunk:?}: {frames:?}"
        );
        let len: u32 = frames.iter().map(|&i| self.lens[i as usize]).sum();
        assert_eq!(len, chunk.len(), "{chunk:?}: the chain's length");
        frames
    }

    /// Sends up to `max` frames of channel `c`'s TX ring that were kicked for (their bytes in
    /// `mem`); returns how many.
    fn send_from(&mut self, c: usize, max: usize, mem: &[u8]) -> usize {
        let port = self.channels[c].port;
        let mut sent = 0;
        while sent < max.min(self.channels[c].kicked) {
            let ch = &mut self.channels[c];
            if ch.completed.len() >= self.ring_size {
                break;
            }
            let Some(desc) = ch.tx.pop_front() else {
                break;
            };
            ch.completed.push_back(desc.index);
            ch.kicked -= 1;
            ch.sending.push(desc.index);
            self.move_to(desc.index, Place::Tx, Place::Completed);
            sent += 1;
            if desc.more {
                continue;
            }
            let frames = std::mem::take(&mut self.channels[c].sending);
            let bytes: u64 = frames
                .iter()
                .map(|&i| u64::from(self.lens[i as usize]))
                .sum();
            let at = frames[0] as usize * self.frame_size;
            let head = &mem[at..at + self.lens[frames[0] as usize] as usize];
            if let Some(heads) = &mut self.heads[port] {
                heads.push(head.to_vec());
            }
            let wire = &mut self.wire[port];
            wire.sent += 1;
            wire.sent_bytes += bytes;
            if head.get(12..14) == Some(&[0x08, 0x00]) && head.len() >= 34 {
                wire.sent_ce += u64::from(head[15] & 3 == 3);
                wire.sent_bad_checksum += u64::from(ipv4_checksum(&head[14..34]) != 0xffff);
            }
        }
        sent
    }
}

/// One worker's rings on the simulated UMEM (the only worker's, by [`SimRings::new`]).
#[derive(Debug)]
pub(super) struct SimRings {
    kernel: Rc<RefCell<Kernel>>,
    me: usize,
    /// The bytes of the frames this worker received or took over.
    mem: Vec<u8>,
    /// This worker's channels (the kernel's indexes).
    channels: Vec<usize>,
    /// Per port, the channel this worker sends through.
    tx_channel: Vec<usize>,
    pool: FramePool<u32>,
    /// Packets this worker holds.
    packets_held: u32,
    /// Kicks that found frames to send: a data plane that kicked per frame would show here.
    pub(super) kicks: u64,
}

impl SimRings {
    /// `frames` frames of `frame_size` bytes; `queues[port]` channels per port, rings of
    /// `ring_size` entries. The fill rings are filled, as `FrameIo::new` does. Packets larger
    /// than a frame arrive as chains of up to `max_chain` frames (multi-buffer).
    pub(super) fn new(
        frames: u32,
        frame_size: usize,
        ring_size: usize,
        queues: &[usize],
        max_chain: u32,
    ) -> Self {
        Self::shares(frames, frame_size, ring_size, queues, max_chain, 1)
            .pop()
            .expect("one worker")
    }

    /// As [`new`](Self::new), shared by `workers` workers: queue `q` of each port is worker
    /// `q % workers`'s (every port needs a queue per worker), and the frames are split evenly.
    pub(super) fn shares(
        frames: u32,
        frame_size: usize,
        ring_size: usize,
        queues: &[usize],
        max_chain: u32,
        workers: usize,
    ) -> Vec<Self> {
        assert!(
            queues.iter().all(|&q| q >= workers),
            "{queues:?}: a queue per worker on every port"
        );
        let mut channels = Vec::new();
        for (port, &n) in queues.iter().enumerate() {
            for q in 0..n {
                channels.push(Channel {
                    port,
                    worker: q % workers,
                    ..Channel::default()
                });
            }
        }
        let total = frames as usize;
        let kernel = Rc::new(RefCell::new(Kernel {
            frame_size,
            ring_size,
            lens: vec![0; total],
            next: vec![None; total],
            max_chain: max_chain.max(1),
            places: vec![Place::Free; total],
            held: vec![0; workers],
            away: 0,
            channels,
            link_up: vec![true; queues.len()],
            tx_limit: vec![None; queues.len()],
            wire: vec![Wire::default(); queues.len()],
            heads: vec![None; queues.len()],
        }));
        let pools = FramePool::shares(frames, workers, |home| home.rev().collect());
        pools
            .into_iter()
            .enumerate()
            .map(|(me, pool)| {
                let k = kernel.borrow();
                let mine: Vec<usize> = (0..k.channels.len())
                    .filter(|&c| k.channels[c].worker == me)
                    .collect();
                let tx_channel = (0..queues.len())
                    .map(|port| {
                        *mine
                            .iter()
                            .find(|&&c| k.channels[c].port == port)
                            .expect("a queue per worker")
                    })
                    .collect();
                drop(k);
                let mut rings = Self {
                    kernel: Rc::clone(&kernel),
                    me,
                    mem: vec![0; total * frame_size],
                    channels: mine,
                    tx_channel,
                    pool,
                    packets_held: 0,
                    kicks: 0,
                };
                rings.refill();
                rings
            })
            .collect()
    }

    /// The worker whose socket channel `channel` (the kernel's index) is.
    pub(super) fn channel_worker(&self, channel: usize) -> usize {
        self.kernel.borrow().channels[channel].worker
    }

    /// The kernel receives `packet` on `channel` (the kernel's index; this worker's socket):
    /// into frames from its fill ring (one, or a chain with multi-buffer), onto its RX ring.
    /// Returns false when the kernel had to drop it: too few fill frames or RX slots for the
    /// whole packet (`__xsk_rcv` checks both first), or a packet longer than a chain holds.
    pub(super) fn deliver(&mut self, channel: usize, packet: &[u8]) -> bool {
        let mut k = self.kernel.borrow_mut();
        assert_eq!(k.channels[channel].worker, self.me, "channel {channel}");
        let port = k.channels[channel].port;
        let needed = if k.max_chain == 1 {
            1
        } else {
            packet.len().div_ceil(k.frame_size).max(1)
        };
        let ch = &k.channels[channel];
        if needed > k.max_chain as usize
            || ch.rx.len() + needed > k.ring_size
            || ch.fill.len() < needed
        {
            k.wire[port].refused += 1;
            return false;
        }
        let mut rest = packet;
        for piece in 0..needed {
            let ch = &mut k.channels[channel];
            let index = ch.fill.pop_front().expect("counted above");
            ch.rx.push_back(Desc {
                index,
                more: piece + 1 < needed,
            });
            k.move_to(index, Place::Fill, Place::Rx);
            let len = rest.len().min(k.frame_size);
            let at = index as usize * k.frame_size;
            self.mem[at..at + len].copy_from_slice(&rest[..len]);
            k.lens[index as usize] = len as u32;
            rest = if needed == 1 { &[] } else { &rest[len..] };
        }
        k.wire[port].delivered += 1;
        true
    }

    /// The kernel sends up to `max` frames from this worker's TX ring of `port` (none while
    /// its link is down, none beyond the completion ring's room, none the data plane has not
    /// kicked for); a packet is on the wire with its last frame.
    pub(super) fn send(&mut self, port: usize, max: usize) -> usize {
        let mut k = self.kernel.borrow_mut();
        if !k.link_up[port] {
            return 0;
        }
        k.send_from(self.tx_channel[port], max, &self.mem)
    }

    pub(super) fn set_link(&mut self, port: usize, up: bool) {
        self.kernel.borrow_mut().link_up[port] = up;
    }

    pub(super) fn limit_tx(&mut self, port: usize, slots: Option<u32>) {
        self.kernel.borrow_mut().tx_limit[port] = slots;
    }

    /// What went over `port`'s wire (every worker's frames).
    pub(super) fn wire(&self, port: usize) -> Wire {
        self.kernel.borrow().wire[port]
    }

    /// From now on, keeps the first frame of every packet sent out of `port` (any worker's).
    pub(super) fn record(&mut self, port: usize) {
        self.kernel.borrow_mut().heads[port].get_or_insert_with(Vec::new);
    }

    /// The first frames of the packets sent out of `port` since [`record`](Self::record), in
    /// the order they went over the wire.
    pub(super) fn sent_heads(&self, port: usize) -> Vec<Vec<u8>> {
        self.kernel.borrow().heads[port].clone().unwrap_or_default()
    }

    /// Frames the kernel put on this worker's RX rings that it has not taken yet.
    pub(super) fn rx_len(&self) -> usize {
        let k = self.kernel.borrow();
        self.channels.iter().map(|&c| k.channels[c].rx.len()).sum()
    }

    /// Frames waiting in this worker's TX or completion rings.
    pub(super) fn in_flight(&self) -> usize {
        let k = self.kernel.borrow();
        self.channels
            .iter()
            .map(|&c| k.channels[c].tx.len() + k.channels[c].completed.len())
            .sum()
    }

    /// Frames held by no worker, no ring and no pool: handed over, or on their way home.
    pub(super) fn in_transit(&self) -> usize {
        self.kernel.borrow().away as usize
    }

    /// Checks that every frame is in at most one list, each listed frame where its list says,
    /// this worker's pool holds only its own frames, and its counters agree.
    pub(super) fn check(&self) {
        let k = self.kernel.borrow();
        let mut seen = vec![0u8; k.places.len()];
        let mut mark = |list: &mut dyn Iterator<Item = &u32>, place: Place| {
            for &i in list {
                seen[i as usize] += 1;
                assert_eq!(k.places[i as usize], place, "frame {i} listed as {place:?}");
            }
        };
        mark(&mut self.pool.free.iter(), Place::Free);
        for ch in &k.channels {
            mark(&mut ch.fill.iter(), Place::Fill);
            mark(&mut ch.rx.iter().map(|d| &d.index), Place::Rx);
            mark(&mut ch.tx.iter().map(|d| &d.index), Place::Tx);
            mark(&mut ch.completed.iter(), Place::Completed);
        }
        for (i, (&n, &place)) in seen.iter().zip(&k.places).enumerate() {
            let listed = matches!(
                place,
                Place::Fill | Place::Rx | Place::Tx | Place::Completed
            );
            assert!(
                n <= 1 && (!listed || n == 1),
                "frame {i} ({place:?}) is on {n} lists"
            );
        }
        for &i in &self.pool.free {
            assert_eq!(self.pool.home_of(i), self.me, "frame {i} in another's pool");
        }
        let caller = k
            .places
            .iter()
            .filter(|&&p| p == Place::Caller(self.me))
            .count();
        let away = k.places.iter().filter(|&&p| p == Place::Away).count();
        assert_eq!(k.away as usize, away, "frames between workers");
        assert_eq!(self.counts().with_caller as usize, caller);
        // Every TX ring holds whole packets: its last descriptor ends one.
        for ch in &k.channels {
            assert!(
                ch.tx.back().is_none_or(|d| !d.more),
                "a TX ring ends mid-packet"
            );
        }
    }

    /// The frames of a packet this worker holds, back to the pools (theirs or this one).
    fn free_chain(&mut self, chunk: &Chunk) {
        let mut k = self.kernel.borrow_mut();
        for index in k.chain(chunk) {
            free_frame(&mut k, &mut self.pool, index, Place::Caller(self.me));
        }
    }
}

/// A frame is free again: out of `from`, into its home's pool (this worker's, or on its way
/// home through a return ring).
fn free_frame(k: &mut Kernel, pool: &mut FramePool<u32>, index: u32, from: Place) {
    k.move_to(index, from, Place::Free);
    pool.put(index, index);
}

/// A packet on its way between workers, with its frames' bytes.
#[derive(Debug)]
pub(super) struct SimParcel {
    chunk: Chunk,
    bytes: Vec<Vec<u8>>,
}

impl Rings for SimRings {
    type Parcel = SimParcel;

    fn channels(&self) -> usize {
        self.channels.len()
    }

    fn channel_port(&self, channel: usize) -> usize {
        self.kernel.borrow().channels[self.channels[channel]].port
    }

    fn receive(&mut self, channel: usize, out: &mut Vec<Chunk>, max: usize) -> usize {
        let c = self.channels[channel];
        let me = self.me;
        let mut k = self.kernel.borrow_mut();
        let mut packets = 0;
        for _ in 0..max {
            let Some(desc) = k.channels[c].rx.pop_front() else {
                break;
            };
            k.move_to(desc.index, Place::Rx, Place::Caller(me));
            if let Some(&last) = k.channels[c].partial.last() {
                k.next[last as usize] = Some(desc.index);
            }
            k.next[desc.index as usize] = None;
            k.channels[c].partial.push(desc.index);
            if desc.more {
                continue;
            }
            let frames = std::mem::take(&mut k.channels[c].partial);
            let len = frames.iter().map(|&i| k.lens[i as usize]).sum();
            out.push(if frames.len() == 1 {
                Chunk::received(frames[0], len)
            } else {
                Chunk::received_chain(frames[0], len, frames.len() as u16)
            });
            packets += 1;
        }
        self.packets_held += packets as u32;
        packets
    }

    fn max_chain(&self) -> u32 {
        self.kernel.borrow().max_chain
    }

    fn bytes(&self, chunk: &Chunk) -> &[u8] {
        let k = self.kernel.borrow();
        assert_eq!(k.places[chunk.index() as usize], Place::Caller(self.me));
        let at = chunk.index() as usize * k.frame_size;
        let len = k.lens[chunk.index() as usize] as usize;
        &self.mem[at..at + len]
    }

    fn rewrite(&mut self, chunk: &mut Chunk, edit: &mut dyn FnMut(&mut [u8])) {
        let k = self.kernel.borrow();
        assert_eq!(k.places[chunk.index() as usize], Place::Caller(self.me));
        let at = chunk.index() as usize * k.frame_size;
        let len = k.lens[chunk.index() as usize] as usize;
        edit(&mut self.mem[at..at + len]);
    }

    fn tx_room(&mut self, port: usize, want: u32) -> u32 {
        let k = self.kernel.borrow();
        let ch = &k.channels[self.tx_channel[port]];
        let room = (k.ring_size - ch.tx.len()) as u32;
        room.min(k.tx_limit[port].unwrap_or(u32::MAX)).min(want)
    }

    fn transmit(&mut self, port: usize, chunks: &mut Vec<Chunk>) -> usize {
        let c = self.tx_channel[port];
        let me = self.me;
        let mut k = self.kernel.borrow_mut();
        // All or nothing, as xsk_ring_prod__reserve.
        let room = k.ring_size - k.channels[c].tx.len();
        let frames: usize = chunks.iter().map(|c| usize::from(c.frames())).sum();
        if frames > room {
            return 0;
        }
        let n = chunks.len();
        self.packets_held -= n as u32;
        for chunk in chunks.drain(..) {
            let chain = k.chain(&chunk);
            for (i, &index) in chain.iter().enumerate() {
                k.move_to(index, Place::Caller(me), Place::Tx);
                k.channels[c].tx.push_back(Desc {
                    index,
                    more: i + 1 < chain.len(),
                });
            }
        }
        n
    }

    fn kick(&mut self) -> bool {
        let mut kicked_any = false;
        {
            let mut k = self.kernel.borrow_mut();
            for &c in &self.tx_channel {
                let ch = &mut k.channels[c];
                kicked_any |= ch.tx.len() > ch.kicked;
                ch.kicked = ch.tx.len();
            }
        }
        self.kicks += u64::from(kicked_any);
        self.in_flight() > 0
    }

    fn reap(&mut self) -> usize {
        let mut n = 0;
        let mut k = self.kernel.borrow_mut();
        for &c in &self.channels {
            while let Some(index) = k.channels[c].completed.pop_front() {
                free_frame(&mut k, &mut self.pool, index, Place::Completed);
                n += 1;
            }
        }
        n
    }

    fn refill(&mut self) {
        self.pool.welcome_home();
        let mut k = self.kernel.borrow_mut();
        for &c in &self.channels {
            let held = k.channels[c].fill.len() + k.channels[c].rx.len();
            for _ in held..k.ring_size {
                let Some(index) = self.pool.free.pop() else {
                    return;
                };
                k.move_to(index, Place::Free, Place::Fill);
                k.channels[c].fill.push_back(index);
            }
        }
    }

    fn release(&mut self, chunk: Chunk) {
        self.packets_held -= 1;
        self.free_chain(&chunk);
    }

    fn hand_over(&mut self, chunk: Chunk) -> SimParcel {
        self.packets_held -= 1;
        let mut k = self.kernel.borrow_mut();
        let mut bytes = Vec::new();
        for index in k.chain(&chunk) {
            k.move_to(index, Place::Caller(self.me), Place::Away);
            let at = index as usize * k.frame_size;
            bytes.push(self.mem[at..at + k.lens[index as usize] as usize].to_vec());
        }
        SimParcel { chunk, bytes }
    }

    fn take_over(&mut self, parcel: SimParcel) -> Chunk {
        self.packets_held += 1;
        let mut k = self.kernel.borrow_mut();
        for (index, bytes) in k.chain(&parcel.chunk).into_iter().zip(&parcel.bytes) {
            k.move_to(index, Place::Away, Place::Caller(self.me));
            let at = index as usize * k.frame_size;
            self.mem[at..at + bytes.len()].copy_from_slice(bytes);
        }
        parcel.chunk
    }

    /// As `FrameIo`'s: `total` is the frames whose home this worker is; those on their way
    /// between workers are in no one's counts.
    fn counts(&self) -> FrameCounts {
        let k = self.kernel.borrow();
        let in_fill = self
            .channels
            .iter()
            .map(|&c| (k.channels[c].fill.len() + k.channels[c].rx.len()) as u32)
            .sum();
        let with_caller = k.held[self.me];
        FrameCounts {
            total: self.pool.home().len() as u32,
            free: self.pool.free.len() as u32,
            in_fill,
            in_tx: self.in_flight() as u32,
            with_caller,
            packets_held: self.packets_held,
            between_workers: 0,
        }
    }
}
