//! The premise every rate measurement through htbd rests on besides a saturated class: the
//! data plane had the CPU.
//!
//! This project's VMs lose their CPUs to the host for milliseconds at a time (tens of ms of
//! stolen time every few seconds in `/proc/stat`). A class loses what it could have sent during
//! such a stall beyond its burst (HTB's default burst is 1 ms of its rate plus an MTU), so a
//! window with one measures the host, not the shaper: on a 50 Mbit/s class with the default
//! burst, −0.1 % to −1.8 %, with the class's own counters agreeing with node-2's. htbd's workers
//! count how late their passes end (`htb-cli status`: "kept from forwarding"); a measurement
//! whose workers were kept from forwarding for more than its tolerance is taken again: a stall
//! costs a class at most its own length (less the burst), so within that share the stalls
//! cannot explain a rate off by more than the tolerance, and beyond it they could. (Half the
//! tolerance would be stricter, but the lateness counted includes what the burst covers, and on
//! a VM whose host steals a percent of the time most windows would be measured again.)
//! The kernel's own shaping, measured for comparison, gets the same premise from the host's
//! side: the time the host stole from this VM's CPUs (`/proc/stat`).

use std::time::{Duration, Instant};

use crate::lab::Htbd;

/// Measurements taken before a test gives up on a clean window.
const ATTEMPTS: u32 = 4;

/// `/proc/stat`'s unit: Linux's `USER_HZ`, 100 on every architecture it reports to userspace.
const TICK: Duration = Duration::from_millis(10);

/// Time the host stole from this VM, summed over its CPUs (`/proc/stat`'s `cpu` line, 8th
/// value); zero where the kernel does not count it.
fn stolen() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .and_then(|l| l.split_whitespace().nth(8))
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(0);
    TICK * ticks
}

/// Runs `measure` (a rate measurement of the kernel's shaping, to be checked within
/// `tolerance`) until the host stole at most that share of the time it took from this VM's
/// CPUs, on average over them (the kernel forwards on whichever CPU runs the softirq), and
/// returns that run's result.
///
/// # Panics
/// When none of four runs was clean.
pub fn with_the_host<T>(what: &str, tolerance: f64, mut measure: impl FnMut() -> T) -> T {
    let share = tolerance;
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut seen = Vec::new();
    for attempt in 1..=ATTEMPTS {
        let before = stolen();
        let started = Instant::now();
        let result = measure();
        let took = started.elapsed();
        let stole = stolen().saturating_sub(before);
        let kept = stole.as_secs_f64() / cpus as f64 / took.as_secs_f64();
        eprintln!(
            "{what}: the host stole {:.0} ms of {:.1} s from {cpus} CPUs ({:.3} % of each, {:.3} % \
             allowed)",
            stole.as_secs_f64() * 1e3,
            took.as_secs_f64(),
            kept * 100.0,
            share * 100.0
        );
        if kept <= share {
            return result;
        }
        eprintln!("{what}: premise failed on attempt {attempt}: measuring again");
        seen.push(format!("{:.0} ms", stole.as_secs_f64() * 1e3));
    }
    panic!(
        "{what}: premise failed: in each of {ATTEMPTS} measurements the host stole more than \
         {:.3} % of the time from this VM's CPUs on average ({} in all), so none measures the \
         shaper",
        share * 100.0,
        seen.join(", ")
    );
}

impl Htbd {
    /// Runs `measure` (a rate measurement through this htbd, with its own premises, to be
    /// checked within `tolerance`) until the data plane was kept from forwarding for at most
    /// that share of the time it took, and returns that run's result.
    ///
    /// # Panics
    /// When none of four runs was clean: the test fails saying so, since its rates would
    /// measure the host.
    pub fn with_the_cpu<T>(&self, what: &str, tolerance: f64, mut measure: impl FnMut() -> T) -> T {
        let share = tolerance;
        let mut seen = Vec::new();
        for attempt in 1..=ATTEMPTS {
            let before = self.status().late_us();
            let started = Instant::now();
            let result = measure();
            let took = started.elapsed();
            let late = Duration::from_micros(self.status().late_us().saturating_sub(before));
            let kept = late.as_secs_f64() / took.as_secs_f64();
            eprintln!(
                "{what}: the data plane was kept from forwarding {:.1} ms of {:.1} s ({:.3} %, \
                 {:.3} % allowed)",
                late.as_secs_f64() * 1e3,
                took.as_secs_f64(),
                kept * 100.0,
                share * 100.0
            );
            if kept <= share {
                return result;
            }
            eprintln!("{what}: premise failed on attempt {attempt}: measuring again");
            seen.push(format!("{:.1} ms", late.as_secs_f64() * 1e3));
        }
        panic!(
            "{what}: premise failed: in each of {ATTEMPTS} measurements the data plane was kept \
             from forwarding (by the host, the kernel or other threads) for more than {:.3} % of \
             the time ({}), so none measures the shaper",
            share * 100.0,
            seen.join(", ")
        );
    }
}
