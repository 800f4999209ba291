//! The engine's handle: what other threads (the control plane, a health check) hold to run
//! jobs on the data plane, stop it, and see whether it is alive.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration as StdDuration;

use super::Engine;
use crate::crew::Bell;
use crate::sys;

/// A request run on the data-plane thread between batches.
pub type Job = Box<dyn FnOnce(&mut Engine) + Send>;

/// Jobs that may wait for the data-plane thread at once: the channel is bounded so that no
/// client of the control plane can queue unbounded work in front of the packets.
pub const JOB_QUEUE: usize = 64;

/// Why a job was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// The engine has stopped.
    #[error("the data plane has stopped")]
    Stopped,
    /// [`JOB_QUEUE`] jobs are waiting already.
    #[error("the data plane is busy ({JOB_QUEUE} requests waiting)")]
    Busy,
}

/// Lets other threads stop the engine and run jobs on it.
#[derive(Clone, Debug)]
pub struct EngineHandle {
    pub(super) jobs: mpsc::SyncSender<Job>,
    /// CLOCK_MONOTONIC ns when every worker was last seen passing (0: not yet).
    pub(super) alive: Arc<AtomicU64>,
    /// Worker 0's bell: the engine's thread.
    pub(super) bell: Arc<Bell>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) workers: usize,
    /// When the data plane's clock read 0.
    pub(super) epoch: std::time::Instant,
}

impl EngineHandle {
    /// Queues `job` to run on the data-plane thread before its next batch.
    ///
    /// # Errors
    /// [`JobError::Busy`] when [`JOB_QUEUE`] jobs wait already (the job comes back, to retry),
    /// [`JobError::Stopped`].
    pub fn execute(&self, job: Job) -> Result<(), (JobError, Job)> {
        match self.jobs.try_send(job) {
            Ok(()) => {
                self.wake();
                Ok(())
            }
            Err(mpsc::TrySendError::Full(job)) => Err((JobError::Busy, job)),
            Err(mpsc::TrySendError::Disconnected(job)) => Err((JobError::Stopped, job)),
        }
    }

    /// When the data plane's clock ([`Engine::now`]) read 0: what turns the times in its
    /// records (flow records' first and last packet) into wall-clock time.
    #[must_use]
    pub fn epoch(&self) -> std::time::Instant {
        self.epoch
    }

    /// Asks the engine to stop after its current batch.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// How long ago every data-plane worker was last seen passing (checked every beat, or
    /// every [`WITNESS_EVERY`](super::WITNESS_EVERY) with liveness off); `None` before the first time. A hung
    /// worker, or a job that holds the data plane, makes it grow: what a health check reads.
    #[must_use]
    pub fn since_all_workers_passed(&self) -> Option<StdDuration> {
        let at = self.alive.load(Ordering::Relaxed);
        (at != 0).then(|| StdDuration::from_nanos(sys::monotonic_ns().saturating_sub(at)))
    }

    /// The number of data-plane workers (each needs its own scheduler of a new tree:
    /// [`PlaneOp::set_tree`](crate::PlaneOp::set_tree)).
    #[must_use]
    pub fn workers(&self) -> usize {
        self.workers
    }

    fn wake(&self) {
        self.bell.wake();
    }
}
