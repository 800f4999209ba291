//! The netns lab (seed 003's node-1 ↔ router ↔ node-2) as a library: the integration tests of
//! htbd use it, and so do `htb-lab demo` (htbd against the kernel's HTB, side by side) and
//! `htb-lab bench`.

pub mod bench;
pub mod demo;
pub mod filter_bench;
pub mod ipc_bench;
mod lab;
pub mod latency;
pub mod scale;
pub mod shaper;
pub mod soak;
pub mod traffic;
pub mod workers_bench;

pub use lab::{
    Htbd, Lab, LabError, Load, N1, N2, R, Reaped, assert_within, cli_bin, gen_bin, htbd_bin,
    htbd_fails, unavailable, wait_line,
};
