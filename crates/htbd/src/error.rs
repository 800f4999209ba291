//! Why the daemon could not start or run: every step's error, for `main.rs` to print.

use htb_xdp::XdpError;

use crate::{faults, ipc, model, persist, web};

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
    /// Router mode needs the kernel to forward IPv4; htbd does not change sysctls.
    #[error(
        "router mode needs kernel IPv4 forwarding (htbd forwards through bpf_fib_lookup, which \
         honours it, and the kernel takes over when htbd stops), and net.ipv4.ip_forward is 0: \
         run sysctl -w net.ipv4.ip_forward=1, and set it in /etc/sysctl.d/ to keep it"
    )]
    Forwarding,
    /// The HTTP listener's token file is not usable.
    #[error("[daemon] http_token: {0}")]
    Token(#[from] web::auth::TokenError),
    /// The saved state cannot be used.
    #[error(transparent)]
    Store(#[from] persist::StoreError),
    /// The saved filters' u32 links cannot be followed.
    #[error("saved filters: {0}")]
    Links(#[from] model::LinkError),
    /// Router mode would bypass netfilter rules, and the config does not allow it.
    #[error(
        "router mode forwards in XDP, before netfilter, so these rules would not see the traffic \
         htbd forwards: {rules}. Move them elsewhere, use bridge mode, or set [daemon] netfilter = \
         \"bypass\" to run anyway"
    )]
    NetfilterBypassed {
        /// The chains, `family table chain (hook, rules)`.
        rules: String,
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
    /// The control socket or its permissions could not be set up.
    #[error(transparent)]
    Socket(#[from] ipc::SocketError),
    /// `HTBD_FAULTS` is malformed.
    #[error(transparent)]
    Faults(#[from] faults::FaultsError),
    /// The saved state cannot be used.
    #[error("saved state in {dir}: {message}", dir = dir.display())]
    State {
        /// `state_dir`.
        dir: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
}
