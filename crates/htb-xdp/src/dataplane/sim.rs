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

#[derive(Debug, Default)]
struct Channel {
    port: usize,
    fill: VecDeque<u32>,
    rx: VecDeque<u32>,
    tx: VecDeque<u32>,
    completed: VecDeque<u32>,
}

/// What the kernel side saw on one port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Wire {
    /// Frames handed to the socket.
    pub delivered: u64,
    /// Frames the kernel dropped: fill ring empty or RX ring full.
    pub refused: u64,
    /// Frames sent out of the port, and their bytes.
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
    places: Vec<Place>,
    free: Vec<u32>,
    channels: Vec<Channel>,
    /// Per port: its TX channel, whether its link is up, how many TX slots the kernel offers
    /// (`None`: the ring's free space), and what went over its wire.
    tx_channel: Vec<usize>,
    link_up: Vec<bool>,
    tx_limit: Vec<Option<u32>>,
    pub(super) wire: Vec<Wire>,
}

impl SimRings {
    /// `frames` frames of `frame_size` bytes; `queues[port]` channels per port, rings of
    /// `ring_size` entries. The fill rings are filled, as `FrameIo::new` does.
    pub(super) fn new(frames: u32, frame_size: usize, ring_size: usize, queues: &[usize]) -> Self {
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
            places: vec![Place::Free; total],
            free: (0..frames).rev().collect(),
            channels,
            tx_channel,
            link_up: vec![true; queues.len()],
            tx_limit: vec![None; queues.len()],
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

    /// The kernel receives `packet` on `channel`: into a frame from its fill ring, onto its RX
    /// ring. Returns false when the kernel had to drop it.
    pub(super) fn deliver(&mut self, channel: usize, packet: &[u8]) -> bool {
        let port = self.channels[channel].port;
        let ch = &mut self.channels[channel];
        if ch.rx.len() >= self.ring_size {
            self.wire[port].refused += 1;
            return false;
        }
        let Some(index) = ch.fill.pop_front() else {
            self.wire[port].refused += 1;
            return false;
        };
        ch.rx.push_back(index);
        self.move_to(index, Place::Fill, Place::Rx);
        let len = packet.len().min(self.frame_size);
        let at = index as usize * self.frame_size;
        self.mem[at..at + len].copy_from_slice(&packet[..len]);
        self.lens[index as usize] = len as u32;
        self.wire[port].delivered += 1;
        true
    }

    /// The kernel sends up to `max` frames from `port`'s TX ring (none while its link is
    /// down, none beyond the completion ring's room).
    pub(super) fn send(&mut self, port: usize, max: usize) -> usize {
        if !self.link_up[port] {
            return 0;
        }
        let mut sent = 0;
        while sent < max {
            let ch = &mut self.channels[self.tx_channel[port]];
            if ch.completed.len() >= self.ring_size {
                break;
            }
            let Some(index) = ch.tx.pop_front() else {
                break;
            };
            ch.completed.push_back(index);
            self.move_to(index, Place::Tx, Place::Completed);
            let at = index as usize * self.frame_size;
            let frame = &self.mem[at..at + self.lens[index as usize] as usize];
            let wire = &mut self.wire[port];
            wire.sent += 1;
            wire.sent_bytes += frame.len() as u64;
            if frame.get(12..14) == Some(&[0x08, 0x00]) && frame.len() >= 34 {
                wire.sent_ce += u64::from(frame[15] & 3 == 3);
                wire.sent_bad_checksum += u64::from(ipv4_checksum(&frame[14..34]) != 0xffff);
            }
            sent += 1;
        }
        sent
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
            mark(&mut ch.rx.iter(), Place::Rx);
            mark(&mut ch.tx.iter(), Place::Tx);
            mark(&mut ch.completed.iter(), Place::Completed);
        }
        for (i, (&n, &place)) in seen.iter().zip(&self.places).enumerate() {
            let expected = u8::from(place != Place::Caller && place != Place::Away);
            assert_eq!(n, expected, "frame {i} ({place:?}) is on {n} lists");
        }
        let caller = self.places.iter().filter(|&&p| p == Place::Caller).count();
        assert_eq!(self.counts().with_caller as usize, caller);
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
        let mut n = 0;
        while n < max {
            let Some(index) = self.channels[channel].rx.pop_front() else {
                break;
            };
            self.move_to(index, Place::Rx, Place::Caller);
            out.push(Chunk::received(index, self.lens[index as usize]));
            n += 1;
        }
        n
    }

    fn bytes(&self, chunk: &Chunk) -> &[u8] {
        assert_eq!(self.places[chunk.index() as usize], Place::Caller);
        let at = chunk.index() as usize * self.frame_size;
        &self.mem[at..at + chunk.len() as usize]
    }

    fn rewrite(&mut self, chunk: &mut Chunk, edit: &mut dyn FnMut(&mut [u8])) {
        assert_eq!(self.places[chunk.index() as usize], Place::Caller);
        let at = chunk.index() as usize * self.frame_size;
        edit(&mut self.mem[at..at + chunk.len() as usize]);
    }

    fn tx_room(&mut self, port: usize, want: u32) -> u32 {
        let ch = &self.channels[self.tx_channel[port]];
        let room = (self.ring_size - ch.tx.len()) as u32;
        room.min(self.tx_limit[port].unwrap_or(u32::MAX)).min(want)
    }

    fn transmit(&mut self, port: usize, chunks: &mut Vec<Chunk>) -> usize {
        // All or nothing, as xsk_ring_prod__reserve.
        let room = self.ring_size - self.channels[self.tx_channel[port]].tx.len();
        if chunks.len() > room {
            return 0;
        }
        let n = chunks.len();
        for chunk in chunks.drain(..) {
            self.move_to(chunk.index(), Place::Caller, Place::Tx);
            self.channels[self.tx_channel[port]]
                .tx
                .push_back(chunk.index());
        }
        n
    }

    fn kick(&mut self) -> bool {
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
        self.move_to(chunk.index(), Place::Caller, Place::Free);
        self.free.push(chunk.index());
    }

    fn hand_over(&mut self, chunk: Chunk) -> Chunk {
        self.move_to(chunk.index(), Place::Caller, Place::Away);
        chunk
    }

    fn take_over(&mut self, parcel: Chunk) -> Chunk {
        self.move_to(parcel.index(), Place::Away, Place::Caller);
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
        FrameCounts {
            total,
            free,
            in_fill,
            in_tx,
            with_caller: total - free - in_fill - in_tx - away,
            between_workers: away,
        }
    }
}
