//! The data plane's thread: the engine started on it and supervised (a panic detaches XDP so
//! that the kernel forwards unshaped, then htbd exits for its service manager to restart it),
//! and stopped.

use std::thread::JoinHandle;

use htb_xdp::{Engine, EngineConfig, EngineHandle};

use crate::DaemonError;

/// A running data plane: its thread and the handle to talk to it.
#[derive(Debug)]
pub struct DataPlane {
    /// Stops the engine and runs jobs on its thread.
    pub handle: EngineHandle,
    /// The export ring's receiving end, with flows on (`[flows]`), until taken.
    pub flow_records: Option<std::sync::mpsc::Receiver<htb_xdp::flow_table::FlowRecord>>,
    thread: JoinHandle<()>,
}

impl DataPlane {
    /// Starts the engine on its own thread; returns once it is attached and running, or with
    /// the reason it could not start (then nothing is left attached).
    ///
    /// # Errors
    /// [`DaemonError::Engine`] from [`Engine::start`].
    pub fn start(config: EngineConfig) -> Result<Self, DaemonError> {
        Self::start_with(config, exit_after_panic)
    }

    /// As [`start`](Self::start), with what to do once the data plane has panicked and been
    /// detached (`start` ends the process; tests observe instead).
    ///
    /// # Errors
    /// [`DaemonError::Engine`] from [`Engine::start`].
    pub fn start_with(config: EngineConfig, after_panic: fn()) -> Result<Self, DaemonError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("htbd-dataplane".into())
            .spawn(move || match start(config) {
                Ok((mut engine, handle)) => {
                    let _ = tx.send(Ok((handle, engine.take_flow_records())));
                    let Some(engine) = supervise(engine, Engine::run, after_panic) else {
                        return;
                    };
                    let stats = engine.stats();
                    for p in &stats.ports {
                        tracing::info!(
                            "{}: rx {} pkts {} B, tx {} pkts {} B, dropped: queue {} pool {} no-egress {}, \
                             kernel: rx_ring_full {} fill_empty {} rx_dropped {} invalid {}/{}",
                            p.name, p.rx_packets, p.rx_bytes, p.tx_packets, p.tx_bytes, p.drops_queue,
                            p.drops_pool, p.drops_no_egress, p.xdp.rx_ring_full, p.xdp.rx_fill_ring_empty,
                            p.xdp.rx_dropped, p.xdp.rx_invalid, p.xdp.tx_invalid
                        );
                    }
                    tracing::info!(
                        "frames {:?}, queued {}, XDP verdicts {:?}, loops {} sleeps {}",
                        stats.frames, stats.queued, stats.verdicts, stats.loops, stats.sleeps
                    );
                    if let Some(f) = stats.flows {
                        tracing::info!(
                            "flows: {} started, {} ended and handed to the exporter, {} evicted, \
                             {} lost to a full export ring",
                            f.started,
                            f.exported,
                            f.evicted,
                            f.export_drops
                        );
                    }
                    tracing::info!("data plane stopped; detaching");
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            })
            .map_err(|source| DaemonError::Io {
                what: "cannot start the data-plane thread".into(),
                source,
            })?;
        match rx.recv() {
            Ok(Ok((handle, flow_records))) => Ok(Self {
                handle,
                flow_records,
                thread,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e.into())
            }
            Err(_) => {
                let _ = thread.join();
                Err(DaemonError::DataPlanePanicked)
            }
        }
    }

    /// Stops the engine and waits for its thread (which detaches XDP and closes the sockets).
    ///
    /// # Errors
    /// [`DaemonError::DataPlanePanicked`].
    pub fn stop(self) -> Result<(), DaemonError> {
        self.handle.stop();
        self.thread
            .join()
            .map_err(|_| DaemonError::DataPlanePanicked)
    }
}

/// Starts the engine from `config`, dropped then: the engine keeps what it needs of it (trees
/// built, filters compiled), and its thread, which runs as long as the engine, need not hold a
/// million subscribers' trees and filters besides.
fn start(config: EngineConfig) -> Result<(Engine, EngineHandle), htb_xdp::XdpError> {
    Engine::start(&config)
}

/// Runs `run` on `engine`. Should it panic, drops the engine (for the engine: detaches XDP and
/// closes the sockets, so the kernel forwards unshaped — fail-open), then calls `after_panic`
/// and returns `None`.
fn supervise<E>(mut engine: E, run: impl FnOnce(&mut E), after_panic: fn()) -> Option<E> {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut engine)));
    if ran.is_ok() {
        return Some(engine);
    }
    drop(engine);
    tracing::error!(
        "the data plane panicked (message above); XDP detached, traffic goes through the \
         kernel unshaped"
    );
    after_panic();
    None
}

/// What htbd does once its data plane has panicked: it exits with status 70 (`EX_SOFTWARE`),
/// so that the service manager restarts it (`dist/htbd.service`: `Restart=on-failure`). A process
/// that stayed up with a dead data plane would answer `htb-cli` and shape nothing.
fn exit_after_panic() {
    tracing::error!("exiting (status 70) so that the service manager restarts htbd");
    std::process::exit(70);
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::supervise;

    /// What happened, in order.
    static EVENTS: Mutex<Vec<&str>> = Mutex::new(Vec::new());

    struct Plane;

    impl Drop for Plane {
        fn drop(&mut self) {
            EVENTS.lock().unwrap().push("detached");
        }
    }

    #[test]
    fn a_panicking_data_plane_is_cleaned_up_then_reported() {
        static REPORTED: AtomicBool = AtomicBool::new(false);
        let after = || {
            EVENTS.lock().unwrap().push("after_panic");
            REPORTED.store(true, Ordering::SeqCst);
        };
        let left = supervise(Plane, |_| panic!("a test panic"), after);
        assert!(left.is_none());
        assert!(REPORTED.load(Ordering::SeqCst));
        // Detached first, so that traffic flows through the kernel before htbd exits.
        assert_eq!(*EVENTS.lock().unwrap(), ["detached", "after_panic"]);
        // A data plane that returns is handed back, and nothing is reported.
        EVENTS.lock().unwrap().clear();
        let back = supervise(Plane, |_| {}, || panic!("not called"));
        assert!(back.is_some() && EVENTS.lock().unwrap().is_empty());
    }
}
