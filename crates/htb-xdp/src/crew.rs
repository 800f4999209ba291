//! The data-plane workers' links to one another: a single-producer single-consumer ring of
//! frames from every worker to every other (a frame received by one worker for a class another
//! owns is handed over, not copied: the UMEM is shared), and each worker's bell, rung when a
//! frame is handed to it while it sleeps.
//!
//! Nothing here takes a lock: each ring has one writer and one reader (`rtrb`), and a bell is
//! a flag and a socket. The sleep protocol is the usual one for lost wake-ups: the sleeper
//! raises its flag, then looks at its rings once more before sleeping; the sender pushes,
//! then looks at the flag (both sequentially consistent, so one of them sees the other).

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};

use crate::frame::FrameTag;

/// Frames that may wait in one worker-to-worker ring; a frame that finds it full is dropped
/// (counted): the receiving worker is that far behind.
pub(crate) const HANDOFF_RING: usize = 4096;

/// Wakes a sleeping worker.
#[derive(Debug)]
pub(crate) struct Bell {
    asleep: AtomicBool,
    waker: UnixStream,
}

impl Bell {
    /// A bell writing to `waker`, whose other end the worker polls.
    pub(crate) fn new(waker: UnixStream) -> Self {
        Self {
            asleep: AtomicBool::new(false),
            waker,
        }
    }

    /// Wakes the worker if it sleeps (or is about to).
    pub(crate) fn ring(&self) {
        if self.asleep.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    /// Wakes the worker whatever it is doing (a control request, a stop).
    pub(crate) fn wake(&self) {
        // A full socket buffer already means "wake up": ignore WouldBlock.
        let _ = (&self.waker).write(&[1]);
    }

    /// The worker is about to sleep (`true`) or is awake again.
    pub(crate) fn set_asleep(&self, asleep: bool) {
        self.asleep.store(asleep, Ordering::SeqCst);
    }
}

/// A frame on its way between workers: the frame, the port it leaves through, and the filter
/// that classified it (`None`: unclassified).
#[derive(Debug)]
pub(crate) struct Handoff<P> {
    pub(crate) parcel: P,
    pub(crate) tag: FrameTag,
    pub(crate) egress: u16,
    pub(crate) filter: Option<u32>,
}

/// Frames moved between workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandoffCounts {
    /// Frames this worker handed to others.
    pub handed_out: u64,
    /// Frames this worker took from others.
    pub taken_in: u64,
    /// Frames dropped because the ring to their worker was full.
    pub dropped: u64,
}

/// One worker's ends of the rings, and every worker's bell.
pub(crate) struct Crew<P> {
    me: usize,
    /// `to[w]`: the ring to worker `w` (`None` for this one).
    to: Vec<Option<rtrb::Producer<Handoff<P>>>>,
    /// Rings from the other workers.
    from: Vec<rtrb::Consumer<Handoff<P>>>,
    bells: Vec<Arc<Bell>>,
    /// Bit `w`: a frame was pushed to worker `w` since the last [`ring_bells`](Self::ring_bells).
    pushed: u64,
    pub(crate) counts: HandoffCounts,
}

impl<P> std::fmt::Debug for Crew<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Crew")
            .field("me", &self.me)
            .field("workers", &self.bells.len())
            .finish_non_exhaustive()
    }
}

impl<P: Send> Crew<P> {
    /// The crews of `bells.len()` workers (at most 64), linked every one to every other.
    pub(crate) fn new_set(bells: &[Arc<Bell>]) -> Vec<Self> {
        let n = bells.len();
        let mut to: Vec<Vec<Option<rtrb::Producer<Handoff<P>>>>> =
            (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        let mut from: Vec<Vec<rtrb::Consumer<Handoff<P>>>> = (0..n).map(|_| Vec::new()).collect();
        for (a, row) in to.iter_mut().enumerate() {
            for (b, slot) in row.iter_mut().enumerate() {
                if a != b {
                    let (producer, consumer) = rtrb::RingBuffer::new(HANDOFF_RING);
                    *slot = Some(producer);
                    from[b].push(consumer);
                }
            }
        }
        to.into_iter()
            .zip(from)
            .enumerate()
            .map(|(me, (to, from))| Self {
                me,
                to,
                from,
                bells: bells.to_vec(),
                pushed: 0,
                counts: HandoffCounts::default(),
            })
            .collect()
    }

    /// This worker's index.
    pub(crate) fn me(&self) -> usize {
        self.me
    }

    /// Number of workers.
    pub(crate) fn workers(&self) -> usize {
        self.bells.len()
    }

    /// Hands `handoff` to worker `to`; gives it back when that worker's ring is full.
    pub(crate) fn send(&mut self, to: usize, handoff: Handoff<P>) -> Result<(), Handoff<P>> {
        let Some(ring) = self.to.get_mut(to).and_then(Option::as_mut) else {
            return Err(handoff);
        };
        match ring.push(handoff) {
            Ok(()) => {
                self.counts.handed_out += 1;
                self.pushed |= 1 << to;
                Ok(())
            }
            Err(rtrb::PushError::Full(handoff)) => {
                self.counts.dropped += 1;
                Err(handoff)
            }
        }
    }

    /// Wakes the workers frames were handed to since the last call, if they sleep.
    pub(crate) fn ring_bells(&mut self) {
        if self.pushed == 0 {
            return;
        }
        fence(Ordering::SeqCst);
        let mut pushed = std::mem::take(&mut self.pushed);
        while pushed != 0 {
            let w = pushed.trailing_zeros() as usize;
            pushed &= pushed - 1;
            self.bells[w].ring();
        }
    }

    /// The next frame handed to this worker, from any other.
    pub(crate) fn receive(&mut self) -> Option<Handoff<P>> {
        for ring in &mut self.from {
            if let Ok(handoff) = ring.pop() {
                self.counts.taken_in += 1;
                return Some(handoff);
            }
        }
        None
    }

    /// Whether frames wait for this worker.
    pub(crate) fn has_inbound(&self) -> bool {
        self.from.iter().any(|r| !r.is_empty())
    }

    /// This worker's bell.
    pub(crate) fn bell(&self) -> &Arc<Bell> {
        &self.bells[self.me]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bells(n: usize) -> (Vec<Arc<Bell>>, Vec<UnixStream>) {
        let mut bells = Vec::new();
        let mut ends = Vec::new();
        for _ in 0..n {
            let (a, b) = UnixStream::pair().unwrap();
            a.set_nonblocking(true).unwrap();
            b.set_nonblocking(true).unwrap();
            bells.push(Arc::new(Bell::new(a)));
            ends.push(b);
        }
        (bells, ends)
    }

    fn handoff(n: u32) -> Handoff<u32> {
        Handoff {
            parcel: n,
            tag: FrameTag::for_test(),
            egress: 0,
            filter: Some(n),
        }
    }

    #[test]
    fn frames_reach_their_worker_in_order_and_a_full_ring_gives_them_back() {
        let (bells, _ends) = bells(3);
        let mut crews = Crew::<u32>::new_set(&bells);
        for n in 0..3 {
            crews[0].send(2, handoff(n)).unwrap();
        }
        crews[1].send(2, handoff(10)).unwrap();
        let mut got = Vec::new();
        while let Some(h) = crews[2].receive() {
            got.push(h.parcel);
        }
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 10]);
        assert!(crews[1].receive().is_none() && !crews[0].has_inbound());
        assert!(crews[0].send(0, handoff(0)).is_err(), "no ring to itself");
        for n in 0..HANDOFF_RING as u32 {
            crews[0].send(1, handoff(n)).unwrap();
        }
        let back = crews[0].send(1, handoff(99)).unwrap_err();
        assert_eq!(back.parcel, 99);
        assert_eq!(crews[0].counts.dropped, 1);
        assert_eq!(crews[0].counts.handed_out, 3 + HANDOFF_RING as u64);
    }

    #[test]
    fn a_sleeping_worker_is_woken_and_an_awake_one_is_not_written_to() {
        use std::io::Read;
        let (bells, mut ends) = bells(2);
        let mut crews = Crew::<u32>::new_set(&bells);
        let mut buf = [0u8; 8];
        crews[0].send(1, handoff(1)).unwrap();
        crews[0].ring_bells();
        assert!(ends[1].read(&mut buf).is_err(), "awake: no write");
        bells[1].set_asleep(true);
        crews[0].send(1, handoff(2)).unwrap();
        crews[0].ring_bells();
        assert_eq!(ends[1].read(&mut buf).unwrap(), 1, "asleep: woken");
        crews[0].ring_bells();
        assert!(ends[1].read(&mut buf).is_err(), "nothing new: no write");
    }
}
