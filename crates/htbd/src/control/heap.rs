//! Giving a large batch's freed memory back after it ends.
//!
//! A batch of a million subscribers holds its decoded commands, its undo steps and the data
//! plane's operations until it is done; the engine's memory lock keeps those pages resident
//! once freed, so htbd's resident set stayed at the batch's high-water mark (2.16 kB per
//! subscriber after a 1 000 000 import with four workers, against 3.12 kB at its peak; 2026-11-29,
//! `htb-lab scale`). After a large batch the freed heap is handed back
//! ([`htb_xdp::heap::return_freed_heap`]) on a blocking thread, after the client has its
//! answer.

use tokio::task::JoinHandle;

/// Batches of at least this many commands free enough to be worth a trim (which briefly takes
/// the process's memory-map lock to unlock and relock its memory). An import or a mass delete
/// is far above it; an operator's everyday change is far below.
const RETURN_AFTER_COMMANDS: usize = 10_000;

/// At most one trim at a time, started after a large batch.
#[derive(Debug, Default)]
pub(super) struct HeapReturn {
    running: Option<JoinHandle<()>>,
}

impl HeapReturn {
    /// Called once a batch of `commands` is answered: starts a trim when it was large and none
    /// is still running.
    pub(super) fn after_batch(&mut self, commands: usize) {
        if commands < RETURN_AFTER_COMMANDS
            || self.running.as_ref().is_some_and(|t| !t.is_finished())
        {
            return;
        }
        self.running = Some(tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            match htb_xdp::heap::return_freed_heap() {
                Ok(r) => tracing::info!(
                    "after a batch of {commands} commands: resident memory {} → {} MB, freed \
                     heap given back in {} ms{}{}",
                    r.resident_before >> 20,
                    r.resident_after >> 20,
                    started.elapsed().as_millis(),
                    if r.relocked {
                        " (the memory lock lifted for it and put back)"
                    } else {
                        ""
                    },
                    if r.released {
                        ""
                    } else {
                        "; the allocator had nothing to release"
                    }
                ),
                Err(e) => tracing::warn!(
                    "cannot give the freed heap back after a batch of {commands} commands: {e}"
                ),
            }
        }));
    }
}
