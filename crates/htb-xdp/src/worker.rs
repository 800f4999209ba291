//! One data-plane worker: a `Dataplane` on its share of the sockets, on its own thread, sleeping
//! until its own next event — a frame on one of its RX rings, a frame another worker handed to
//! it, its schedulers' next wake-up, a control request.
//!
//! Worker 0 runs on the engine's thread, which also serves the control plane's jobs; the
//! others run on threads of their own ([`spawn`]). For a job, the engine *parks* them: each
//! hands its whole state back through a channel between two passes and waits for it to come
//! back, so the job sees every worker's schedulers with no lock on the packet path and nothing
//! shared that a pass writes.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration as StdDuration;

use htb_core::Instant;

use crate::crew::Bell;
use crate::dataplane::{Dataplane, Progress};
use crate::rings::Rings;
use crate::stall_watch::StallWatch;
use crate::sys;
use crate::umem::FrameIo;

/// How long the loop first sleeps before kicking TX again when frames wait in a TX ring and a
/// kick moved nothing (the egress link is down: the kernel refuses the frames); it doubles
/// while nothing moves, up to [`TX_RETRY_MAX`].
const TX_RETRY: StdDuration = StdDuration::from_micros(500);
const TX_RETRY_MAX: StdDuration = StdDuration::from_millis(16);

/// What every worker runs by.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pace {
    /// The engine's clock: every worker's `now` is ns since this instant (the schedulers that
    /// share buckets need one clock).
    pub(crate) epoch: std::time::Instant,
    /// Spin instead of sleeping.
    pub(crate) busy_poll: bool,
    /// Wake at least this often (so that the liveness beat sees each worker pass); `None`:
    /// no need.
    pub(crate) wake_every: Option<StdDuration>,
    /// SCHED_FIFO priority of the worker threads.
    pub(crate) realtime: Option<u8>,
}

impl Pace {
    /// ns since the epoch.
    pub(crate) fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A worker's state: everything a pass touches.
pub(crate) struct Worker {
    pub(crate) plane: Dataplane<FrameIo>,
    /// The read end of its bell.
    waker: UnixStream,
    /// The CPU it is pinned to, if any.
    pub(crate) cpu: Option<usize>,
    pub(crate) sleeps: u64,
    /// Passes so far, read by the engine's liveness beat.
    pub(crate) passes: Arc<AtomicU64>,
    tx_retry: StdDuration,
    /// When passes are due, and the stalls.
    pub(crate) watch: StallWatch,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("me", &self.plane.crew().me())
            .field("cpu", &self.cpu)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker running `plane`, woken through `waker` (the other end of its bell), giving its
    /// classes up to `stall_credit` back per stall.
    pub(crate) fn new(
        plane: Dataplane<FrameIo>,
        waker: UnixStream,
        cpu: Option<usize>,
        stall_credit: Option<htb_core::Duration>,
    ) -> Self {
        Self {
            plane,
            waker,
            cpu,
            sleeps: 0,
            passes: Arc::new(AtomicU64::new(0)),
            tx_retry: TX_RETRY,
            watch: StallWatch::new(stall_credit),
        }
    }

    /// Sets up the calling thread for this worker: timer slack, CPU, priority.
    pub(crate) fn enter_thread(&self, pace: &Pace) {
        let me = self.plane.crew().me();
        if let Err(e) = sys::set_timer_slack(StdDuration::from_nanos(1)) {
            tracing::warn!("cannot lower the timer slack ({e}); wake-ups may be up to 50 µs late");
        }
        if let Some(cpu) = self.cpu {
            match sys::pin_to_cpu(cpu) {
                Ok(()) => tracing::info!("data-plane worker {me} runs on CPU {cpu}"),
                Err(e) => tracing::warn!("cannot pin data-plane worker {me} to CPU {cpu} ({e})"),
            }
        }
        if let Some(priority) = pace.realtime {
            match sys::set_realtime(priority) {
                Ok(()) => {
                    tracing::info!("data-plane worker {me} runs SCHED_FIFO at priority {priority}");
                }
                Err(e) => tracing::warn!("cannot make data-plane worker {me} real-time ({e})"),
            }
        }
    }

    /// One pass, then a sleep when there is nothing to do (at most `at_most`).
    pub(crate) fn step(&mut self, pace: &Pace, at_most: Option<StdDuration>) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        let now = pace.now();
        if let Some(stall) = self.watch.pass_begins(now) {
            self.plane.credit_stall(stall.from, stall.to, stall.at_most);
        }
        let progress = self.plane.poll(now);
        match progress {
            Progress::Moved => self.tx_retry = TX_RETRY,
            // Frames the kernel would not send, and nothing else moved: kick again later,
            // backing off, rather than spin on a link that is down.
            Progress::TxStuck if !pace.busy_poll => {
                let wait = at_most.map_or(self.tx_retry, |m| m.min(self.tx_retry));
                self.sleep(pace, Some(wait));
                self.tx_retry = (self.tx_retry * 2).min(TX_RETRY_MAX);
            }
            Progress::Idle if !pace.busy_poll => self.sleep(pace, at_most),
            Progress::TxStuck | Progress::Idle => {}
        }
    }

    /// Sleeps until the schedulers' earliest wake-up, a frame on one of this worker's RX rings
    /// or from another worker, a ring of its bell, `pace.wake_every` or `at_most`.
    fn sleep(&mut self, pace: &Pace, at_most: Option<StdDuration>) {
        let now = pace.now();
        let timeout = match self.plane.next_wakeup() {
            Some(at) if at <= now => return,
            Some(at) => Some(StdDuration::from_nanos((at - now).as_nanos())),
            None => None,
        };
        let timeout = [timeout, at_most, pace.wake_every]
            .into_iter()
            .flatten()
            .min();
        let bell = Arc::clone(self.plane.crew().bell());
        bell.set_asleep(true);
        // Frames handed over between the pass and the flag would ring no bell: look again.
        if self.plane.crew().has_inbound() {
            bell.set_asleep(false);
            return;
        }
        let io = self.plane.rings();
        let mut fds: Vec<libc::pollfd> = (0..io.channels())
            .map(|c| libc::pollfd {
                fd: io.fd(c),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        fds.push(libc::pollfd {
            fd: self.waker.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        self.watch
            .sleeps_until(timeout.map(|t| now + htb_core::Duration::from_nanos(duration_ns(t))));
        self.sleeps += 1;
        let woke = sys::wait_readable(&mut fds, timeout);
        bell.set_asleep(false);
        match woke {
            Ok(_) => {
                if fds.last().is_some_and(|f| f.revents & libc::POLLIN != 0) {
                    let mut drain = [0u8; 64];
                    while matches!((&self.waker).read(&mut drain), Ok(n) if n > 0) {}
                }
            }
            Err(e) => tracing::warn!("ppoll failed: {e}"),
        }
    }
}

/// `d` in ns, saturating.
pub(crate) fn duration_ns(d: StdDuration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The engine's side of a worker running on its own thread.
#[derive(Debug)]
pub(crate) struct Seat {
    pause: Arc<AtomicBool>,
    bell: Arc<Bell>,
    parked: mpsc::Receiver<Box<Worker>>,
    resume: mpsc::SyncSender<Box<Worker>>,
    passes: Arc<AtomicU64>,
}

impl Seat {
    /// Asks the worker to park after its current pass (then [`take`](Self::take) it).
    pub(crate) fn ask_to_park(&self) {
        self.pause.store(true, Ordering::SeqCst);
        self.bell.wake();
    }

    /// Waits for the worker asked to park (or stopped) and takes its state.
    ///
    /// # Panics
    /// When the worker's thread has died (it panicked): the engine cannot go on without its
    /// sockets, and its supervisor fails open.
    pub(crate) fn take(&self) -> Worker {
        *self
            .parked
            .recv()
            .expect("a data-plane worker died (its panic is logged above)")
    }

    /// Gives a parked worker its state back.
    pub(crate) fn give_back(&self, worker: Worker) {
        // A worker that has gone cannot take it: its panic ends the engine anyway.
        let _ = self.resume.send(Box::new(worker));
    }

    /// Passes the worker has made.
    pub(crate) fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// Wakes the worker (to see a stop).
    pub(crate) fn wake(&self) {
        self.bell.wake();
    }
}

/// Runs `worker` on a thread of `scope` until `stop`; parks it whenever the returned seat asks.
/// On stop it parks for good, so the engine gets every worker back.
pub(crate) fn spawn<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    worker: Worker,
    pace: Pace,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Seat> {
    let pause = Arc::new(AtomicBool::new(false));
    let (park_tx, parked) = mpsc::sync_channel::<Box<Worker>>(1);
    let (resume, resume_rx) = mpsc::sync_channel::<Box<Worker>>(1);
    let seat = Seat {
        pause: Arc::clone(&pause),
        bell: Arc::clone(worker.plane.crew().bell()),
        parked,
        resume,
        passes: Arc::clone(&worker.passes),
    };
    let me = worker.plane.crew().me();
    std::thread::Builder::new()
        .name(format!("htbd-worker-{me}"))
        .spawn_scoped(scope, move || {
            let mut worker = Box::new(worker);
            worker.enter_thread(&pace);
            loop {
                if pause.swap(false, Ordering::SeqCst) {
                    if park_tx.send(worker).is_err() {
                        return;
                    }
                    match resume_rx.recv() {
                        Ok(w) => worker = w,
                        Err(_) => return,
                    }
                    continue;
                }
                if stop.load(Ordering::SeqCst) {
                    let _ = park_tx.send(worker);
                    return;
                }
                worker.step(&pace, None);
            }
        })?;
    Ok(seat)
}
