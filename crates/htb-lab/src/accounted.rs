//! Measurements together with what kept the shaper from forwarding while they ran: htbd's
//! workers' stalls (from `htb-cli -j status`, read just before and just after), or for the
//! kernel's shaping the time the host stole from this VM's CPUs (`/proc/stat`). A rate check
//! then judges the shaper by what it owed in that window ([`crate::owed`]) instead of
//! retrying until a window is quiet, which on a noisy host none is.

use std::cell::RefCell;
use std::path::PathBuf;
use std::time::Duration;

use htb_core::StallLog;

use crate::htbd::Htbd;
use crate::owed::Stalls;

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

/// What a measurement's window edges note, for the accounting around it.
enum Mark {
    /// htbd's status (its workers' stall logs).
    Htbd(Box<htb_ipc::Status>),
    /// The host's stolen time, summed over the CPUs.
    Host(Duration),
}

/// Whose stalls the measurement running on this thread accounts for, and the marks its
/// window's edges took.
struct Window {
    source: Source,
    edges: Vec<Mark>,
}

enum Source {
    Htbd(PathBuf),
    Host,
}

thread_local! {
    static WINDOW: RefCell<Option<Window>> = const { RefCell::new(None) };
}

impl Source {
    fn mark(&self) -> Mark {
        match self {
            Self::Htbd(socket) => Mark::Htbd(Box::new(crate::htbd::status_at(socket))),
            Self::Host => Mark::Host(stolen()),
        }
    }
}

/// Called by a measurement at its window's opening and closing edges (outside its counter
/// reads): inside [`Htbd::accounted`] or [`host_accounted`], the stalls are then those
/// between the edges rather than over the whole measurement (which includes its warm-up and
/// wind-down). Elsewhere it does nothing.
pub fn window_edge() {
    let source = WINDOW.with(|w| {
        w.borrow().as_ref().map(|w| match &w.source {
            Source::Htbd(socket) => Source::Htbd(socket.clone()),
            Source::Host => Source::Host,
        })
    });
    if let Some(source) = source {
        let mark = source.mark();
        WINDOW.with(|w| {
            if let Some(w) = w.borrow_mut().as_mut() {
                w.edges.push(mark);
            }
        });
    }
}

/// Runs `measure` with the window open for `source`; returns its result and the marks at its
/// first and last window edges (or around the whole measurement when it noted none).
fn around<T>(source: Source, measure: impl FnOnce() -> T) -> (T, Mark, Mark) {
    let before = source.mark();
    WINDOW.with(|w| {
        *w.borrow_mut() = Some(Window {
            source,
            edges: Vec::new(),
        });
    });
    let result = measure();
    let window = WINDOW.with(|w| w.borrow_mut().take());
    let (source, mut edges) = window
        .map(|w| (w.source, w.edges))
        .unwrap_or((Source::Host, Vec::new()));
    if edges.len() >= 2 {
        let last = edges.pop().unwrap_or_else(|| source.mark());
        let first = edges.swap_remove(0);
        (result, first, last)
    } else {
        let after = source.mark();
        (result, before, after)
    }
}

/// Runs `measure` (a rate measurement of the kernel's shaping) and returns its result with
/// the time the host stole meanwhile from each of this VM's CPUs, on average (the kernel
/// forwards on whichever CPU runs the softirq): a lump that counts whole against the
/// shaper's lower bound. An imitated stall ([`crate::stalls`]) is not stolen time: it takes
/// processes off a CPU, not the kernel's softirqs.
pub fn host_accounted<T>(measure: impl FnOnce() -> T) -> (T, Stalls) {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let (result, first, last) = around(Source::Host, measure);
    let lump = match (first, last) {
        (Mark::Host(a), Mark::Host(b)) => b.saturating_sub(a) / u32::try_from(cpus).unwrap_or(1),
        _ => Duration::ZERO,
    };
    (
        result,
        Stalls {
            lump,
            ..Stalls::default()
        },
    )
}

impl Htbd {
    /// Runs `measure` (a rate measurement through this htbd) and returns its result with each
    /// worker's stalls in its window (between its window's edges, or over all of it) and the
    /// stall credit htbd gives back.
    ///
    /// # Panics
    /// When htb-cli cannot read htbd's status.
    pub fn accounted<T>(&self, measure: impl FnOnce() -> T) -> (T, Stalls) {
        let (result, first, last) = around(Source::Htbd(self.socket()), measure);
        let (Mark::Htbd(before), Mark::Htbd(after)) = (first, last) else {
            unreachable!("htbd's window marks htbd's status");
        };
        let workers = after
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let earlier = before
                    .workers
                    .get(i)
                    .map_or(StallLog::default(), |b| b.stalls);
                w.stalls.since(&earlier)
            })
            .collect();
        (
            result,
            Stalls {
                workers,
                credit: Duration::from_micros(after.stall_credit_us),
                lump: Duration::ZERO,
            },
        )
    }
}

impl Htbd {
    /// Runs `load` (traffic through class `id` on `dev`, which promises `promise`) and checks
    /// what it delivered against what the class owed within `tolerance`: after proving that
    /// the generator offered at least 1.1× the rate and that the class was full (it dropped or
    /// hit its limit), and accounting for the data plane's stalls meanwhile. Returns the load.
    ///
    /// # Panics
    /// When a premise fails or the delivery is outside what the class owed.
    pub fn assert_shapes(
        &self,
        what: &str,
        (dev, id): (&str, &str),
        promise: &crate::owed::Promise,
        tolerance: f64,
        load: impl FnOnce() -> crate::Load,
    ) -> crate::Load {
        let before = self.class_stats(dev, id);
        let (load, stalls) = self.accounted(load);
        load.assert_saturates(what, promise.rate_bps);
        self.assert_class_saturated(dev, id, &before);
        crate::owed::assert_owed(what, &load.delivered, promise, &stalls, tolerance);
        load
    }
}

impl Htbd {
    /// Class `id` of `dev`'s byte counter over `window` (two `class show -s` snapshots): the
    /// window's length is known within the time each snapshot took to answer, since the
    /// counters are read at some instant inside it.
    ///
    /// # Panics
    /// When the class does not exist or htb-cli fails.
    pub fn class_bytes_over(&self, dev: &str, id: &str, window: Duration) -> crate::Counted {
        let read = || {
            let before = std::time::Instant::now();
            let bytes = self.class_stats(dev, id)["bytes"].as_u64().unwrap_or(0);
            (before, bytes, std::time::Instant::now())
        };
        window_edge();
        let (a0, b0, c0) = read();
        std::thread::sleep(window);
        let (a1, b1, c1) = read();
        window_edge();
        crate::Counted {
            bytes: b1.saturating_sub(b0) as f64,
            shortest: (a1 - c0).as_secs_f64(),
            longest: (c1 - a0).as_secs_f64(),
        }
    }
}
