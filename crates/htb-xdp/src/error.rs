//! Errors of the packet engine, with the OS error underneath where there is one.

use std::io;

/// What went wrong setting up or running the packet engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XdpError {
    /// A setting is not usable.
    #[error("{0}")]
    Config(String),
    /// A network interface is missing or unusable.
    #[error("interface {interface}: {reason}")]
    Interface {
        /// The interface.
        interface: String,
        /// Why.
        reason: String,
    },
    /// The UMEM could not be created.
    #[error("cannot create the UMEM: {0}")]
    Umem(String, #[source] Option<io::Error>),
    /// An AF_XDP socket could not be created.
    #[error("cannot create an AF_XDP socket on {interface} queue {queue}: {reason}{}", source.as_ref().map(|e| format!(" ({e})")).unwrap_or_default())]
    Socket {
        /// The interface.
        interface: String,
        /// The RX queue.
        queue: u32,
        /// What xsk-rs said.
        reason: String,
        /// The OS error.
        #[source]
        source: Option<io::Error>,
    },
    /// Loading or attaching the XDP program, or updating its maps, failed.
    #[error("XDP program: {what}: {reason}")]
    Program {
        /// The step.
        what: String,
        /// What aya said.
        reason: String,
    },
    /// A system call failed.
    #[error("{call} failed: {source}")]
    Syscall {
        /// The call.
        call: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Why the data plane refused one operation of a batch. The control plane validates every
/// change against its own model first, so each of these is a bug where the two disagree; the
/// batch is then taken back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlaneError {
    /// The operation names a port the data plane does not forward on.
    #[error("no port {0}")]
    NoPort(String),
    /// The port has no tree with the operation's major.
    #[error("{port}: no tree {major:x}:")]
    NoTree {
        /// The port.
        port: String,
        /// The tree's major the operation names.
        major: u16,
    },
    /// A new tree arrived without a scheduler for this worker.
    #[error("{0}: a new tree without a scheduler")]
    NoScheduler(String),
    /// The scheduler refused the change (htb-core's reason, kept typed).
    #[error(transparent)]
    Class(#[from] htb_core::ClassError),
}
