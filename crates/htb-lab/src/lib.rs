//! The netns lab (seed 003's node-1 ↔ router ↔ node-2) as a library: the integration tests of
//! htbd use it, and so do `htb-lab demo` (htbd against the kernel's HTB, side by side) and
//! `htb-lab bench`.

mod accounted;
pub mod bench;
pub mod collector;
pub mod cores;
pub mod demo;
pub mod filter_bench;
pub mod fleet;
pub mod ipc_bench;
pub use accounted::{host_accounted, window_edge};
mod host;
mod htbd;
mod lab;
pub mod latency;
mod load;
pub mod owed;
pub use owed::{Counted, Promise, Stalls, assert_filled, assert_owed};
pub mod premise;
pub mod proc_status;
pub use premise::{remeasured, unmeasured};
pub mod prometheus_server;
mod rtts;
pub mod scale;
pub mod shaper;
pub mod soak;
pub mod stall_bench;
pub mod stall_witness;
pub mod stalls;
pub mod sweep;
pub mod traffic;
pub mod webdriver;
pub mod workers_bench;

pub use host::{cli_bin, gen_bin, htbd_bin, unavailable};
pub use htbd::{Htbd, htbd_fails};
pub use lab::{Lab, LabError, MANAGEMENT_IP, N1, N2, R, Reaped, wait_line};
pub use load::Load;

/// The machine a benchmark ran on, for its report: CPUs, CPU model and kernel.
#[must_use]
pub fn machine() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    serde_json::json!({
        "cpus": std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        "cpu_model": model,
        "kernel": kernel.trim(),
    })
}
