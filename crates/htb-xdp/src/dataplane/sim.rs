//! A simulated UMEM and its rings, for the data plane's tests: the kernel's side (filling RX
//! from the fill rings, sending from TX into the completion rings, a link going down) is driven
//! by the test, step by step. Every frame's place is tracked on its own, so a frame released
//! twice, sent while queued, or lost is caught at once rather than inferred from counters.

use std::collections::VecDeque;

use crate::rings::{Chunk, FrameCounts, Rings};

/// Where one frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Free,
    Fill,
    Rx,
    Caller,
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

/// The simulated UMEM.
#[derive(Debug)]
pub(super) struct SimRings {
    frame_size: usize,
    ring_size: usize,
    mem: Vec<u8>,
    lens: Vec<u32>,
    /// Per frame, the next frame of its packet (multi-buffer chains).
    next: Vec<Option<u32>>,
    /// Frames one packet may span (1: no multi-buffer; larger packets are truncated).
    max_chain: u32,
    /// The frames of a packet being sent, per port, until its last.
    sending: Vec<Vec<u32>>,
    /// Packets the caller holds.
    packets_held: u32,
    places: Vec<Place>,
    free: Vec<u32>,
    channels: Vec<Channel>,
    /// Per port: its TX channel, whether its link is up, how many TX slots the kernel offers
    /// (`None`: the ring's free space), and what went over its wire.
    tx_channel: Vec<usize>,
    link_up: Vec<bool>,
    tx_limit: Vec<Option<u32>>,
    /// Per port: frames of its TX ring the data plane has kicked, which the kernel may send.
    /// Copy mode sends only inside `sendto`, so a frame nobody kicked for stays in the ring.
    kicked: Vec<usize>,
    /// Kicks that found frames to send: a data plane that kicked per frame would show here.
    pub(super) kicks: u64,
    pub(super) wire: Vec<Wire>,
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
        let mut channels = Vec::new();
        let mut tx_channel = Vec::new();
        for (port, &n) in queues.iter().enumerate() {
            tx_channel.push(channels.len());
            for _ in 0..n {
                channels.push(Channel {
                    port,
                    ..Channel::default()
                });
            }
        }
        let total = frames as usize;
        let mut rings = Self {
            frame_size,
            ring_size,
            mem: vec![0; total * frame_size],
            lens: vec![0; total],
            next: vec![None; total],
            max_chain: max_chain.max(1),
            sending: vec![Vec::new(); queues.len()],
            packets_held: 0,
            places: vec![Place::Free; total],
            free: (0..frames).rev().collect(),
            channels,
            tx_channel,
            link_up: vec![true; queues.len()],
            tx_limit: vec![None; queues.len()],
            kicked: vec![0; queues.len()],
            kicks: 0,
            wire: vec![Wire::default(); queues.len()],
        };
        rings.refill();
        rings
    }

    fn move_to(&mut self, index: u32, from: Place, to: Place) {
        let place = &mut self.places[index as usize];
        assert_eq!(*place, from, "frame {index} is not where the rings put it");
        *place = to;
    }

    /// The kernel receives `packet` on `channel`: into frames from its fill ring (one, or a
    /// chain with multi-buffer), onto its RX ring. Returns false when the kernel had to drop
    /// it: too few fill frames or RX slots for the whole packet (`__xsk_rcv` checks both
    /// first), or a packet longer than a chain holds.
    pub(super) fn deliver(&mut self, channel: usize, packet: &[u8]) -> bool {
        let port = self.channels[channel].port;
        let needed = if self.max_chain == 1 {
            1
        } else {
            packet.len().div_ceil(self.frame_size).max(1)
        };
        let ch = &mut self.channels[channel];
        if needed > self.max_chain as usize
            || ch.rx.len() + needed > self.ring_size
            || ch.fill.len() < needed
        {
            self.wire[port].refused += 1;
            return false;
        }
        let mut rest = packet;
        for piece in 0..needed {
            let ch = &mut self.channels[channel];
            let index = ch.fill.pop_front().expect("counted above");
            ch.rx.push_back(Desc {
                index,
                more: piece + 1 < needed,
            });
            self.move_to(index, Place::Fill, Place::Rx);
            let len = rest.len().min(self.frame_size);
            let at = index as usize * self.frame_size;
            self.mem[at..at + len].copy_from_slice(&rest[..len]);
            self.lens[index as usize] = len as u32;
            rest = if needed == 1 { &[] } else { &rest[len..] };
        }
        self.wire[port].delivered += 1;
        true
    }

    /// The kernel sends up to `max` frames from `port`'s TX ring (none while its link is
    /// down, none beyond the completion ring's room, none the data plane has not kicked for);
    /// a packet is on the wire with its last.
    pub(super) fn send(&mut self, port: usize, max: usize) -> usize {
        if !self.link_up[port] {
            return 0;
        }
        let mut sent = 0;
        while sent < max.min(self.kicked[port]) {
            let ch = &mut self.channels[self.tx_channel[port]];
            if ch.completed.len() >= self.ring_size {
                break;
            }
            let Some(desc) = ch.tx.pop_front() else {
                break;
            };
            ch.completed.push_back(desc.index);
            self.move_to(desc.index, Place::Tx, Place::Completed);
            self.kicked[port] -= 1;
            self.sending[port].push(desc.index);
            sent += 1;
            if desc.more {
                continue;
            }
            let frames = std::mem::take(&mut self.sending[port]);
            let bytes: u64 = frames
                .iter()
                .map(|&i| u64::from(self.lens[i as usize]))
                .sum();
            let at = frames[0] as usize * self.frame_size;
            let head = &self.mem[at..at + self.lens[frames[0] as usize] as usize];
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

    pub(super) fn set_link(&mut self, port: usize, up: bool) {
        self.link_up[port] = up;
    }

    pub(super) fn limit_tx(&mut self, port: usize, slots: Option<u32>) {
        self.tx_limit[port] = slots;
    }

    /// Frames the kernel put on RX rings that the data plane has not taken yet.
    pub(super) fn rx_len(&self) -> usize {
        self.channels.iter().map(|c| c.rx.len()).sum()
    }

    /// Frames waiting in TX or completion rings.
    pub(super) fn in_flight(&self) -> usize {
        self.channels
            .iter()
            .map(|c| c.tx.len() + c.completed.len())
            .sum()
    }

    /// Checks that every frame is in exactly one place and that the counters agree.
    pub(super) fn check(&self) {
        let mut seen = vec![0u8; self.places.len()];
        let mut mark = |list: &mut dyn Iterator<Item = &u32>, place: Place| {
            for &i in list {
                seen[i as usize] += 1;
                assert_eq!(
                    self.places[i as usize], place,
                    "frame {i} listed as {place:?}"
                );
            }
        };
        mark(&mut self.free.iter(), Place::Free);
        for ch in &self.channels {
            mark(&mut ch.fill.iter(), Place::Fill);
            mark(&mut ch.rx.iter().map(|d| &d.index), Place::Rx);
            mark(&mut ch.tx.iter().map(|d| &d.index), Place::Tx);
            mark(&mut ch.completed.iter(), Place::Completed);
        }
        for (i, (&n, &place)) in seen.iter().zip(&self.places).enumerate() {
            let expected = u8::from(place != Place::Caller && place != Place::Away);
            assert_eq!(n, expected, "frame {i} ({place:?}) is on {n} lists");
        }
        let caller = self.places.iter().filter(|&&p| p == Place::Caller).count();
        assert_eq!(self.counts().with_caller as usize, caller);
        // Every TX ring holds whole packets: its last descriptor ends one.
        for ch in &self.channels {
            assert!(
                ch.tx.back().is_none_or(|d| !d.more),
                "a TX ring ends mid-packet"
            );
        }
    }
}

impl Rings for SimRings {
    type Parcel = Chunk;

    fn channels(&self) -> usize {
        self.channels.len()
    }

    fn channel_port(&self, channel: usize) -> usize {
        self.channels[channel].port
    }

    fn receive(&mut self, channel: usize, out: &mut Vec<Chunk>, max: usize) -> usize {
        let mut packets = 0;
        for _ in 0..max {
            let Some(desc) = self.channels[channel].rx.pop_front() else {
                break;
            };
            self.move_to(desc.index, Place::Rx, Place::Caller);
            let ch = &mut self.channels[channel];
            if let Some(&last) = ch.partial.last() {
                self.next[last as usize] = Some(desc.index);
            }
            self.next[desc.index as usize] = None;
            ch.partial.push(desc.index);
            if desc.more {
                continue;
            }
            let frames = std::mem::take(&mut ch.partial);
            let len = frames.iter().map(|&i| self.lens[i as usize]).sum();
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
        self.max_chain
    }

    fn bytes(&self, chunk: &Chunk) -> &[u8] {
        assert_eq!(self.places[chunk.index() as usize], Place::Caller);
        let at = chunk.index() as usize * self.frame_size;
        &self.mem[at..at + self.lens[chunk.index() as usize] as usize]
    }

    fn rewrite(&mut self, chunk: &mut Chunk, edit: &mut dyn FnMut(&mut [u8])) {
        assert_eq!(self.places[chunk.index() as usize], Place::Caller);
        let at = chunk.index() as usize * self.frame_size;
        edit(&mut self.mem[at..at + self.lens[chunk.index() as usize] as usize]);
    }

    fn tx_room(&mut self, port: usize, want: u32) -> u32 {
        let ch = &self.channels[self.tx_channel[port]];
        let room = (self.ring_size - ch.tx.len()) as u32;
        room.min(self.tx_limit[port].unwrap_or(u32::MAX)).min(want)
    }

    fn transmit(&mut self, port: usize, chunks: &mut Vec<Chunk>) -> usize {
        // All or nothing, as xsk_ring_prod__reserve.
        let room = self.ring_size - self.channels[self.tx_channel[port]].tx.len();
        let frames: usize = chunks.iter().map(|c| usize::from(c.frames())).sum();
        if frames > room {
            return 0;
        }
        let n = chunks.len();
        self.packets_held -= n as u32;
        for chunk in chunks.drain(..) {
            let chain = self.chain(&chunk);
            for (i, &index) in chain.iter().enumerate() {
                self.move_to(index, Place::Caller, Place::Tx);
                self.channels[self.tx_channel[port]].tx.push_back(Desc {
                    index,
                    more: i + 1 < chain.len(),
                });
            }
        }
        n
    }

    fn kick(&mut self) -> bool {
        let mut kicked_any = false;
        for port in 0..self.kicked.len() {
            let waiting = self.channels[self.tx_channel[port]].tx.len();
            kicked_any |= waiting > self.kicked[port];
            self.kicked[port] = waiting;
        }
        self.kicks += u64::from(kicked_any);
        self.in_flight() > 0
    }

    fn reap(&mut self) -> usize {
        let mut n = 0;
        for c in 0..self.channels.len() {
            while let Some(index) = self.channels[c].completed.pop_front() {
                self.move_to(index, Place::Completed, Place::Free);
                self.free.push(index);
                n += 1;
            }
        }
        n
    }

    fn refill(&mut self) {
        for c in 0..self.channels.len() {
            let held = self.channels[c].fill.len() + self.channels[c].rx.len();
            for _ in held..self.ring_size {
                let Some(index) = self.free.pop() else {
                    return;
                };
                self.move_to(index, Place::Free, Place::Fill);
                self.channels[c].fill.push_back(index);
            }
        }
    }

    fn release(&mut self, chunk: Chunk) {
        self.packets_held -= 1;
        for index in self.chain(&chunk) {
            self.move_to(index, Place::Caller, Place::Free);
            self.free.push(index);
        }
    }

    fn hand_over(&mut self, chunk: Chunk) -> Chunk {
        self.packets_held -= 1;
        for index in self.chain(&chunk) {
            self.move_to(index, Place::Caller, Place::Away);
        }
        chunk
    }

    fn take_over(&mut self, parcel: Chunk) -> Chunk {
        self.packets_held += 1;
        for index in self.chain(&parcel) {
            self.move_to(index, Place::Away, Place::Caller);
        }
        parcel
    }

    fn counts(&self) -> FrameCounts {
        let total = self.places.len() as u32;
        let away = self.places.iter().filter(|p| **p == Place::Away).count() as u32;
        let free = self.free.len() as u32;
        let in_fill = self
            .channels
            .iter()
            .map(|c| (c.fill.len() + c.rx.len()) as u32)
            .sum();
        let in_tx = self.in_flight() as u32;
        let with_caller = total - free - in_fill - in_tx - away;
        FrameCounts {
            total,
            free,
            in_fill,
            in_tx,
            with_caller,
            packets_held: self.packets_held,
            between_workers: away,
        }
    }
}
