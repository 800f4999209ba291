//! Signals: SIGTERM and SIGINT stop htbd cleanly; SIGHUP reloads the config file.
//!
//! A reload reads and validates the file, then hands its trees to the control task, which
//! applies the difference as one journaled batch ([`crate::reload`]). A file that does not
//! parse, or a change that cannot be made live, is logged with its error and nothing changes;
//! htbd keeps running either way. Settings other than the trees and filters (ports, mode,
//! socket, …) are read at start only.

use std::path::Path;

use htb_ipc::IpcError;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, oneshot, watch};

use crate::control::{Call, Reloaded};
use crate::{DaemonConfig, DaemonError, service, startup};

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The file cannot be read.
    #[error("cannot read it: {0}")]
    Read(#[from] std::io::Error),
    /// The file is invalid.
    #[error(transparent)]
    Config(#[from] htb_config::ConfigError),
    /// Its trees cannot be built (a bug: the parser validated them).
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    /// The control plane refused the change.
    #[error("{0}")]
    Refused(#[from] IpcError),
    /// htbd is stopping.
    #[error("htbd is stopping")]
    Stopping,
}

/// Waits for signals until SIGTERM or SIGINT, then tells the server to stop.
///
/// # Errors
/// A signal cannot be watched.
pub async fn handle(
    config_path: &Path,
    calls: mpsc::Sender<Call>,
    stop: watch::Sender<bool>,
) -> Result<(), DaemonError> {
    let watch = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|source| DaemonError::Io {
            what: format!("cannot watch {name}"),
            source,
        })
    };
    let mut term = watch(SignalKind::terminate(), "SIGTERM")?;
    let mut int = watch(SignalKind::interrupt(), "SIGINT")?;
    let mut hup = watch(SignalKind::hangup(), "SIGHUP")?;
    loop {
        tokio::select! {
            _ = term.recv() => {
                tracing::info!("SIGTERM: shutting down");
                break;
            }
            _ = int.recv() => {
                tracing::info!("SIGINT: shutting down");
                break;
            }
            _ = hup.recv() => {
                service::reloading();
                match reload(config_path, &calls).await {
                    Ok(r) if r.commands == 0 => tracing::info!(
                        "SIGHUP: {} reloaded: the running trees are the file's already",
                        config_path.display()
                    ),
                    Ok(r) => tracing::info!(
                        "SIGHUP: {} reloaded: {} change(s) applied as one batch, {} queued \
                         packet(s) dropped with deleted classes",
                        config_path.display(),
                        r.commands,
                        r.dropped_packets
                    ),
                    Err(e) => tracing::error!(
                        "SIGHUP: {} not reloaded, nothing changed: {e}",
                        config_path.display()
                    ),
                }
                service::reload_done();
            }
        }
    }
    service::stopping();
    let _ = stop.send(true);
    Ok(())
}

/// Reads `path` and has the control task apply its trees.
///
/// # Errors
/// [`ReloadError`]; nothing changed.
pub async fn reload(path: &Path, calls: &mpsc::Sender<Call>) -> Result<Reloaded, ReloadError> {
    let text = std::fs::read_to_string(path)?;
    let config = DaemonConfig::parse(&text)?;
    let hash = startup::config_hash(&config)?;
    let (reply, outcome) = oneshot::channel();
    calls
        .send(Call::Reload {
            trees: config.interfaces,
            hash,
            reply,
        })
        .await
        .map_err(|_| ReloadError::Stopping)?;
    Ok(outcome.await.map_err(|_| ReloadError::Stopping)??)
}
