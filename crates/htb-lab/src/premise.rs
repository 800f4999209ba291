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

/// Runs `measure` until the time lost to the shaper during it (`lost`, a running count, over
/// `cpus` CPUs) was at most `tolerance` of the time it took, and returns that run's result;
/// `lost_how` says what the count is, for the report.
fn until_clean<T>(
    what: &str,
    tolerance: f64,
    (lost, cpus, lost_how): (impl Fn() -> Duration, f64, &str),
    mut measure: impl FnMut() -> T,
) -> T {
    let mut seen = Vec::new();
    for attempt in 1..=ATTEMPTS {
        let before = lost();
        let started = Instant::now();
        let result = measure();
        let took = started.elapsed().as_secs_f64();
        let ms = lost().saturating_sub(before).as_secs_f64() * 1e3 / cpus;
        let share = ms / 1e3 / took;
        eprintln!(
            "{what}: {lost_how} {ms:.1} ms of {took:.1} s ({:.3} %, {:.3} % allowed)",
            share * 100.0,
            tolerance * 100.0
        );
        if share <= tolerance {
            return result;
        }
        eprintln!("{what}: premise failed on attempt {attempt}: measuring again");
        seen.push(format!("{ms:.1} ms"));
    }
    panic!(
        "{what}: premise failed: in each of {ATTEMPTS} measurements {lost_how} more than {:.3} % \
         of the time ({}), so none measures the shaper",
        tolerance * 100.0,
        seen.join(", ")
    );
}

/// Runs `measure` (a rate measurement of the kernel's shaping, to be checked within
/// `tolerance`) until the host stole at most that share of the time it took from this VM's
/// CPUs, on average over them (the kernel forwards on whichever CPU runs the softirq), and
/// returns that run's result.
///
/// # Panics
/// When none of four runs was clean.
pub fn with_the_host<T>(what: &str, tolerance: f64, measure: impl FnMut() -> T) -> T {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let how = format!("the host stole from each of this VM's {cpus} CPUs");
    until_clean(what, tolerance, (stolen, cpus as f64, &how), measure)
}

impl Htbd {
    /// Runs `measure` (a rate measurement through this htbd, with its own premises, to be
    /// checked within `tolerance`) until the data plane was kept from forwarding for at most
    /// that share of the time it took, and returns that run's result.
    ///
    /// # Panics
    /// When none of four runs was clean: the test fails saying so, since its rates would
    /// measure the host.
    pub fn with_the_cpu<T>(&self, what: &str, tolerance: f64, measure: impl FnMut() -> T) -> T {
        let late = || Duration::from_micros(self.status().late_us());
        let how = "the data plane was kept from forwarding";
        until_clean(what, tolerance, (late, 1.0, how), measure)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use super::until_clean;

    /// A measurement of 20 ms that loses `lost_ms[attempt]` to stalls; returns its attempt.
    fn measured(lost_ms: &[u64]) -> u32 {
        let (lost, attempt) = (Cell::new(Duration::ZERO), Cell::new(0));
        let count = || lost.get();
        until_clean("test", 0.01, (count, 1.0, "lost"), || {
            std::thread::sleep(Duration::from_millis(20));
            let n = attempt.get();
            lost.set(lost.get() + Duration::from_millis(lost_ms[n as usize]));
            attempt.set(n + 1);
            n
        })
    }

    #[test]
    fn a_stalled_measurement_is_taken_again_and_a_clean_one_kept() {
        // 10 of 20 ms lost (50 %), then 5 (25 %), then none: the third is the result.
        assert_eq!(measured(&[10, 5, 0, 0]), 2);
        assert_eq!(measured(&[0, 10, 10, 10]), 0);
    }

    #[test]
    #[should_panic(expected = "premise failed: in each of 4 measurements lost more than")]
    fn four_stalled_measurements_fail_the_test() {
        measured(&[10, 10, 10, 10]);
    }
}
