//! The deterministic simulator behind `htb-cli sim SCENARIO.toml`: an HTB tree, traffic
//! flows and live changes on a virtual nanosecond clock, like devik's "ethloop" (seed 000).
//!
//! The scenario format is a contract that other tools generate; see the book
//! (`docs/simulator.md`, "Scenario format"). Runs are bit-for-bit reproducible: there is no
//! randomness and no wall clock.

mod engine;
mod histogram;
mod report;
mod scenario;

pub use engine::run;
pub use histogram::Histogram;
pub use report::{ClassReport, DirectReport, FlowReport, Report, Sample};
pub use scenario::{Flow, FlowRate, Scenario, ScheduledChange};
