//! # htbd: the htb shaping router daemon
//!
//! Reads a TOML config ([`DaemonConfig`]), starts the AF_XDP data plane ([`htb_xdp::Engine`]) on
//! its own thread, and runs the control side (signals; later the control socket) on a small
//! tokio runtime. `main.rs` only parses arguments and sets up logging.

mod config;
mod forwarding;
pub mod tc_export;

use std::thread::JoinHandle;

pub use config::DaemonConfig;
use htb_xdp::{Engine, EngineConfig, EngineHandle, Mode, XdpError};

/// Why the daemon could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] htb_config::ConfigError),
    /// The data plane could not start.
    #[error(transparent)]
    Engine(#[from] XdpError),
    /// Kernel forwarding could not be enabled.
    #[error("cannot enable kernel forwarding ({path}): {source}")]
    Forwarding {
        /// The sysctl file.
        path: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An I/O step failed.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The data-plane thread died.
    #[error("the data-plane thread panicked")]
    DataPlanePanicked,
}

/// A running data plane: its thread and the handle to talk to it.
#[derive(Debug)]
pub struct DataPlane {
    /// Stops the engine and runs jobs on its thread.
    pub handle: EngineHandle,
    thread: JoinHandle<()>,
}

impl DataPlane {
    /// Starts the engine on its own thread; returns once it is attached and running, or with
    /// the reason it could not start (then nothing is left attached).
    ///
    /// # Errors
    /// [`DaemonError::Engine`] from [`Engine::start`].
    pub fn start(config: EngineConfig) -> Result<Self, DaemonError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("htbd-dataplane".into())
            .spawn(move || match Engine::start(&config) {
                Ok((mut engine, handle)) => {
                    let _ = tx.send(Ok(handle));
                    engine.run();
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
            Ok(Ok(handle)) => Ok(Self { handle, thread }),
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

/// Runs the daemon until SIGTERM or SIGINT.
///
/// # Errors
/// [`DaemonError`] when the data plane cannot start; then nothing stays attached.
pub fn run(config: DaemonConfig) -> Result<(), DaemonError> {
    let ports: Vec<String> = config.engine.ports.iter().map(|p| p.name.clone()).collect();
    match config.engine.mode {
        Mode::Router => forwarding::enable_kernel_forwarding()?,
        Mode::Bridge => forwarding::check_bridge_fail_open(&ports),
    }
    let dataplane = DataPlane::start(config.engine.clone())?;
    tracing::info!(
        "htbd running in {:?} mode on {}",
        config.engine.mode,
        ports.join(", ")
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| DaemonError::Io {
            what: "cannot start the control runtime".into(),
            source,
        })?;
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|source| DaemonError::Io {
                what: "cannot watch SIGTERM".into(),
                source,
            })?;
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        }
        Ok::<(), DaemonError>(())
    })?;
    dataplane.stop()
}
