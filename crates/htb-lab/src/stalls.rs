//! A noisy host on demand: SCHED_FIFO spinners that take each CPU for `stall` every `period`,
//! as a VM's host takes a vCPU, so that anyone can reproduce on a quiet machine what a noisy CI
//! machine does to the lab (and to htbd). And a probe that measures how much a machine takes
//! away now.
//!
//! `HTB_LAB_STALLS=4/50` (ms: 4 ms every 50 ms) makes every lab ([`crate::Lab`]) run with the
//! spinners for its lifetime; `htb-lab stalls inject 4/50` runs them on their own. The
//! spinners are threads of this process made real-time and pinned with `chrt` and `taskset`
//! (so no `unsafe` here).
//!
//! Every CPU is taken at the same moments. A host's stall freezes whatever its vCPU was
//! running, which cannot move elsewhere meanwhile; a spinner only preempts it, and the kernel
//! pushes a preempted real-time thread (htbd's workers) to a CPU that is free. With the CPUs
//! taken one after another, the workers would slip away from every stall; taken together,
//! nothing escapes, as nothing escapes a frozen vCPU. The spinners take processes off their
//! CPUs (htbd's workers, the generators, iperf3), not the kernel's softirqs, so the kernel's
//! own shaping is left alone where a real host's stall would stop it too.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The environment variable that makes every lab run with imitated stalls: `STALL/PERIOD` in
/// ms, e.g. `4/50`.
pub const ENV: &str = "HTB_LAB_STALLS";

/// How a host takes the CPUs: for `stall` every `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// How long each stall lasts.
    pub stall: Duration,
    /// How often one comes, per CPU.
    pub period: Duration,
}

/// Why a stall pattern or the spinners cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum StallsError {
    /// The pattern does not read as `STALL/PERIOD` in ms with `0 < STALL < PERIOD`.
    #[error("{ENV}={0:?}: expected STALL/PERIOD in ms with 0 < STALL < PERIOD, e.g. 4/50")]
    Pattern(String),
    /// `chrt` or `taskset` refused (not root, or not installed).
    #[error("cannot make a spinner real-time on CPU {cpu}: {why}")]
    Realtime {
        /// The CPU.
        cpu: usize,
        /// What the tool said.
        why: String,
    },
}

impl std::str::FromStr for Pattern {
    type Err = StallsError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || StallsError::Pattern(text.to_owned());
        let (stall, period) = text.split_once('/').ok_or_else(bad)?;
        let ms = |v: &str| {
            v.trim()
                .trim_end_matches("ms")
                .parse::<f64>()
                .ok()
                .filter(|m| m.is_finite() && *m > 0.0)
                .map(|m| Duration::from_secs_f64(m / 1e3))
        };
        let (stall, period) = (ms(stall).ok_or_else(bad)?, ms(period).ok_or_else(bad)?);
        if stall >= period {
            return Err(bad());
        }
        Ok(Self { stall, period })
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ms every {} ms",
            self.stall.as_secs_f64() * 1e3,
            self.period.as_secs_f64() * 1e3
        )
    }
}

/// The pattern `HTB_LAB_STALLS` asks for, if it is set.
///
/// # Errors
/// When it is set to something that is not a pattern.
pub fn from_env() -> Result<Option<Pattern>, StallsError> {
    match std::env::var(ENV) {
        Ok(v) if !v.trim().is_empty() => v.parse().map(Some),
        _ => Ok(None),
    }
}

/// The CPUs this process may run on.
#[must_use]
pub fn cpus() -> Vec<usize> {
    let n = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    (0..n).collect()
}

/// This thread's id, from `/proc/thread-self` (`PID/task/TID`).
pub(crate) fn tid() -> Option<u32> {
    std::fs::read_link("/proc/thread-self")
        .ok()?
        .file_name()?
        .to_str()?
        .parse()
        .ok()
}

/// Starts a thread that runs `body` pinned to `cpu` at SCHED_FIFO 99: the thread reports its
/// id, is placed, and runs `body` only once placed (else it returns `refused`). Returns the
/// thread and whether it was placed.
pub(crate) fn spawn_realtime<T: Send + 'static>(
    cpu: usize,
    body: impl FnOnce() -> T + Send + 'static,
    refused: T,
) -> (JoinHandle<T>, Result<(), StallsError>) {
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (go_tx, go) = std::sync::mpsc::channel::<bool>();
    let thread = std::thread::spawn(move || {
        let _ = ready_tx.send(tid());
        if go.recv() == Ok(true) {
            body()
        } else {
            refused
        }
    });
    let placed = match ready.recv().ok().flatten() {
        Some(tid) => place(tid, cpu, Some(99)),
        None => Err(StallsError::Realtime {
            cpu,
            why: "no thread id in /proc/thread-self".into(),
        }),
    };
    let _ = go_tx.send(placed.is_ok());
    (thread, placed)
}

/// Pins thread `tid` to `cpu` and, with `priority`, makes it SCHED_FIFO at it.
pub(crate) fn place(tid: u32, cpu: usize, priority: Option<u8>) -> Result<(), StallsError> {
    let run = |program: &str, args: &[String]| {
        let out = Command::new(program).args(args).output();
        match out {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_owned()),
            Err(e) => Err(format!("{program}: {e}")),
        }
    };
    let fail = |why| StallsError::Realtime { cpu, why };
    run(
        "taskset",
        &["-p".into(), "-c".into(), cpu.to_string(), tid.to_string()],
    )
    .map_err(fail)?;
    if let Some(p) = priority {
        run(
            "chrt",
            &["-f".into(), "-p".into(), p.to_string(), tid.to_string()],
        )
        .map_err(fail)?;
    }
    Ok(())
}

/// Spinners imitating a noisy host, one per CPU, until dropped.
#[derive(Debug)]
pub struct Injector {
    pattern: Pattern,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<u64>>,
}

impl Injector {
    /// Takes each of `cpus` for `pattern.stall` every `pattern.period`, all at once.
    ///
    /// # Errors
    /// When a spinner cannot be pinned or made real-time (root is needed).
    pub fn start(pattern: Pattern, cpus: &[usize]) -> Result<Self, StallsError> {
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now() + Duration::from_millis(20);
        let mut threads = Vec::new();
        let mut injector = Self {
            pattern,
            stop: Arc::clone(&stop),
            threads: Vec::new(),
        };
        for &cpu in cpus {
            let stop = Arc::clone(&stop);
            let (thread, placed) = spawn_realtime(cpu, move || spin(pattern, epoch, &stop), 0);
            threads.push(thread);
            if let Err(e) = placed {
                injector.threads = threads;
                return Err(e);
            }
        }
        injector.threads = threads;
        Ok(injector)
    }

    /// The pattern.
    #[must_use]
    pub fn pattern(&self) -> Pattern {
        self.pattern
    }

    /// Stops the spinners; returns the stalls they took, over all CPUs.
    pub fn stop(mut self) -> u64 {
        self.halt()
    }

    fn halt(&mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.threads.drain(..).map(|t| t.join().unwrap_or(0)).sum()
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        self.halt();
    }
}

/// One CPU's spinner: from `first` on, spins for `stall` at the start of every `period`, and
/// sleeps between; returns the stalls taken.
fn spin(pattern: Pattern, first: Instant, stop: &AtomicBool) -> u64 {
    let mut next = first;
    let mut taken = 0;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            // Short sleeps, so that a stop is seen within a few ms.
            std::thread::sleep((next - now).min(Duration::from_millis(5)));
            continue;
        }
        let until = next + pattern.stall;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        taken += 1;
        next += pattern.period;
        // Behind by a whole period (the spinner itself was held up): skip, do not bunch.
        while next + pattern.period < Instant::now() {
            next += pattern.period;
        }
    }
    taken
}

/// What a probe saw on one CPU: the time taken from a thread spinning there, in gaps longer
/// than 200 µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Taken {
    /// The CPU.
    pub cpu: usize,
    /// Gaps over 200 µs.
    pub gaps: u64,
    /// Their share of the time.
    pub share: f64,
    /// The longest gap.
    pub longest: Duration,
}

/// Spins a thread on each CPU for `secs` seconds (pinned, normal priority) and reports how
/// much of the time each lost in gaps over 200 µs: what the host, or an injector, takes away.
///
/// # Errors
/// When a thread cannot be pinned.
pub fn probe(secs: f64) -> Result<Vec<Taken>, StallsError> {
    let cpus = cpus();
    let handles: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            std::thread::spawn(move || {
                if let Some(tid) = tid() {
                    place(tid, cpu, None)?;
                }
                let (start, gap_floor) = (Instant::now(), Duration::from_micros(200));
                let end = start + Duration::from_secs_f64(secs);
                let (mut last, mut lost, mut gaps, mut longest) =
                    (start, Duration::ZERO, 0, Duration::ZERO);
                loop {
                    let now = Instant::now();
                    let gap = now - last;
                    last = now;
                    if gap > gap_floor {
                        lost += gap;
                        gaps += 1;
                    }
                    longest = longest.max(gap);
                    if now > end {
                        break;
                    }
                }
                Ok(Taken {
                    cpu,
                    gaps,
                    share: lost.as_secs_f64() / secs,
                    longest,
                })
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| {
            h.join().unwrap_or_else(|_| {
                Err(StallsError::Realtime {
                    cpu: 0,
                    why: "the probe thread panicked".into(),
                })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_read_as_stall_over_period_in_ms() {
        let p: Pattern = "4/50".parse().unwrap();
        assert_eq!(p.stall, Duration::from_millis(4));
        assert_eq!(p.period, Duration::from_millis(50));
        assert_eq!(
            "0.5ms/20ms".parse::<Pattern>().unwrap().stall,
            Duration::from_micros(500)
        );
        assert_eq!(p.to_string(), "4 ms every 50 ms");
        for bad in ["4", "50/4", "0/50", "x/50", "4/50/6", "-1/50"] {
            let e = bad.parse::<Pattern>().unwrap_err().to_string();
            assert!(e.contains("expected STALL/PERIOD"), "{bad}: {e}");
        }
    }
}
