//! # htbd: the htb shaping router daemon
//!
//! Reads a TOML config ([`DaemonConfig`]) and the saved live state ([`persist`]), starts the
//! AF_XDP data plane ([`htb_xdp::Engine`]) on its own thread, and runs the control side —
//! signals, the control socket (`ipc`) and the control task that validates, persists and
//! applies changes (`control`, [`model`]) — on a single-threaded tokio runtime. `main.rs` only
//! parses arguments and sets up logging.

mod config;
pub mod control;
mod daemon;
mod data_plane;
mod error;
pub mod faults;
pub mod flow_export;
mod forwarding;
pub mod ipc;
pub mod metrics;
pub mod model;
pub mod netfilter;
pub mod persist;
pub mod reload;
pub mod service;
pub mod signals;
pub mod startup;
mod status;
pub mod tc_export;
mod trees;
pub mod web;

pub use config::{DaemonConfig, FlowsConfig, HttpConfig, IpfixConfig, parse_state};
pub use daemon::{RunOptions, run};
pub use data_plane::DataPlane;
pub use error::DaemonError;
pub use trees::{InterfaceTree, InterfaceTrees};
