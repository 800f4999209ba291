//! Verdicts from accounting: a rate measured through a shaper is judged against what the
//! shaper owed in that window, not against a quiet window.
//!
//! This project's machines are VMs whose host takes a vCPU for milliseconds at a time; no
//! window is quiet there. A class that is full for a whole window owes:
//!
//! - at least its rate over the window, less what its data plane was kept from forwarding
//!   beyond what its burst and stall credit cover (each stall `L` costs it at most
//!   `L − burst − credit`; [`htb_core::StallLog::beyond`] bounds the sum), less the catch-up
//!   of a stall just before the window's end that may still be owed (at most one credit), less
//!   a packet;
//! - at most its rate over the window plus its burst, one credit it may have caught up at the
//!   window's start, and a packet.
//!
//! The tolerance applies to that bound: the check reports the raw error against the rate and
//! the accounted one (zero inside the bound). Stalls can therefore neither fail a shaper that
//! did what it owed nor hide one that did not: a class configured 2 % off fails a 1 % check
//! whatever the host does, since what stalls excuse is counted, not guessed. Only where the
//! data plane lost so much of a window that the bound means little (more than
//! [`MAX_LOST_SHARE`]) is the window a premise failure, saying how much.
//!
//! The window's own length is known only within the time it took to read the counters at its
//! two ends ([`Counted`]): the lower bound uses the shortest it can have been, the upper the
//! longest, so a measuring process stalled between a counter and the clock cannot fail a shaper
//! either.

use std::time::Duration;

use htb_core::StallLog;

use crate::premise::{note, unmeasured};

/// A window where the data plane lost more than this share to stalls beyond burst and credit
/// measures the host, not the shaper: a premise failure.
pub const MAX_LOST_SHARE: f64 = 0.10;

/// The largest frame the lab sends (a 9000-byte MTU's), a packet's worth of slack at each end.
const PACKET: f64 = 9018.0;

/// Bytes counted over a window whose length lies between `shortest` and `longest` seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counted {
    /// Bytes (L2) counted.
    pub bytes: f64,
    /// The shortest the window can have been, in seconds.
    pub shortest: f64,
    /// The longest, in seconds.
    pub longest: f64,
}

impl Counted {
    /// `bytes` over a window known to be `secs` long.
    #[must_use]
    pub fn exact(bytes: f64, secs: f64) -> Self {
        Self {
            bytes,
            shortest: secs,
            longest: secs,
        }
    }

    /// The rate over the window's middle length, in bit/s.
    #[must_use]
    pub fn bps(&self) -> f64 {
        let secs = f64::midpoint(self.shortest, self.longest);
        if secs > 0.0 {
            self.bytes * 8.0 / secs
        } else {
            0.0
        }
    }

    /// Both counts together (flows measured over one window).
    #[must_use]
    pub fn plus(&self, other: &Self) -> Self {
        Self {
            bytes: self.bytes + other.bytes,
            shortest: self.shortest.min(other.shortest),
            longest: self.longest.max(other.longest),
        }
    }
}

/// What a class promises: its rate and its burst.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Promise {
    /// Its rate, bit/s (L2, as the lab counts).
    pub rate_bps: f64,
    /// Its burst, bytes.
    pub burst_bytes: f64,
}

impl Promise {
    /// A class of `rate_bps` with htbd's default burst: 1 ms of its rate plus an MTU.
    #[must_use]
    pub fn class(rate_bps: f64) -> Self {
        Self {
            rate_bps,
            burst_bytes: rate_bps / 8.0 * 1e-3 + 1514.0,
        }
    }

    /// The same rate with a burst of `bytes`.
    #[must_use]
    pub fn with_burst(self, bytes: f64) -> Self {
        Self {
            burst_bytes: bytes,
            ..self
        }
    }

    /// Its burst as time at its rate.
    fn burst_time(&self) -> Duration {
        Duration::from_secs_f64(self.burst_bytes * 8.0 / self.rate_bps)
    }
}

/// What kept a shaper from forwarding during a window: each of htbd's workers' stalls and the
/// stall credit it gives back, or, for the kernel's shaping, the time the host stole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stalls {
    /// Each worker's stalls in the window.
    pub workers: Vec<StallLog>,
    /// Stall credit per stall.
    pub credit: Duration,
    /// Time lost as a whole, not stall by stall (the host's stolen time, per CPU): all of it
    /// counts against the shaper's lower bound.
    pub lump: Duration,
}

impl Stalls {
    /// What the stalls cost a class whose burst lasts `burst`: the most any worker's stalls
    /// took beyond burst and credit, and the whole lump.
    #[must_use]
    pub fn cost(&self, burst: Duration) -> Duration {
        let allowance = htb_core::Duration::from_nanos(
            u64::try_from((burst + self.credit).as_nanos()).unwrap_or(u64::MAX),
        );
        let beyond = self
            .workers
            .iter()
            .map(|log| log.beyond(allowance).as_nanos())
            .max()
            .unwrap_or(0);
        Duration::from_nanos(beyond) + self.lump
    }

    /// A catch-up still owed at the window's end: the credit, or the longest stall if shorter.
    #[must_use]
    pub fn tail(&self) -> Duration {
        let longest = self
            .workers
            .iter()
            .map(|log| log.longest().as_nanos())
            .max()
            .unwrap_or(0);
        self.credit.min(Duration::from_nanos(longest))
    }

    /// Time the data plane was kept from forwarding in all (the most of any worker, and the
    /// lump), for the report.
    #[must_use]
    pub fn kept(&self) -> Duration {
        let most = self
            .workers
            .iter()
            .map(|log| log.total().as_nanos())
            .max()
            .unwrap_or(0);
        Duration::from_nanos(most) + self.lump
    }
}

/// The bounds a class's delivery must fall within, and how they were reached.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Owed {
    /// The least it owed, bytes.
    pub low: f64,
    /// The most it may have sent, bytes.
    pub high: f64,
    /// What stalls beyond burst and credit took, and the catch-up still owed at the end.
    pub lost: Duration,
}

impl Owed {
    /// What `promise` owed over the window of `counted` with `stalls`.
    #[must_use]
    pub fn of(promise: &Promise, counted: &Counted, stalls: &Stalls) -> Self {
        let lost = stalls.cost(promise.burst_time()) + stalls.tail();
        let bytes_per_sec = promise.rate_bps / 8.0;
        let low = bytes_per_sec * (counted.shortest - lost.as_secs_f64()).max(0.0) - PACKET;
        let high = bytes_per_sec * (counted.longest + stalls.credit.as_secs_f64())
            + promise.burst_bytes
            + PACKET;
        Self { low, high, lost }
    }
}

/// Why a window failed its check.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Misjudged {
    /// The delivery was outside what the class owed by more than the tolerance: the shaper's
    /// fault, whatever the host did.
    #[error("{0}")]
    Off(String),
    /// The host took so much of the window that the bound means little: a premise failure,
    /// measured again ([`crate::premise`]).
    #[error("{0}")]
    Unmeasured(String),
}

impl Misjudged {
    /// The report, whichever failure it is.
    #[must_use]
    pub fn report(&self) -> &str {
        match self {
            Self::Off(report) | Self::Unmeasured(report) => report,
        }
    }
}

/// Judges `counted` (a class, or classes summed, that were full for the whole window) against
/// what `promise` owed with `stalls`, within `tolerance` of the bound. `Ok` and `Err` both
/// carry the report: the raw error against the rate, the bound, and the accounted error.
///
/// # Errors
/// [`Misjudged::Off`] with the report when the delivery is outside the bound by more than
/// `tolerance`; [`Misjudged::Unmeasured`] when the stalls took so much of the window that the
/// bound means little (a premise failure).
pub fn judge(
    what: &str,
    counted: &Counted,
    promise: &Promise,
    stalls: &Stalls,
    tolerance: f64,
) -> Result<String, Misjudged> {
    let owed = Owed::of(promise, counted, stalls);
    let rate = promise.rate_bps;
    let raw = (counted.bps() - rate) / rate;
    let nominal = rate / 8.0 * f64::midpoint(counted.shortest, counted.longest);
    let accounted = if counted.bytes < owed.low {
        (counted.bytes - owed.low) / nominal
    } else if counted.bytes > owed.high {
        (counted.bytes - owed.high) / nominal
    } else {
        0.0
    };
    let share = owed.lost.as_secs_f64() / counted.shortest.max(1e-9);
    let report = format!(
        "{what}: {:.3} Mbit/s for {:.3} Mbit/s ({:+.2} % raw); owed {:.3}–{:.3} Mbit/s over \
         {:.3}–{:.3} s, the data plane kept from forwarding {:.1} ms, {:.1} ms of it beyond \
         burst and credit or still owed ({:+.2} % accounted, {:.1} % allowed)",
        counted.bps() / 1e6,
        rate / 1e6,
        raw * 100.0,
        owed.low * 8.0 / counted.longest.max(1e-9) / 1e6,
        owed.high * 8.0 / counted.shortest.max(1e-9) / 1e6,
        counted.shortest,
        counted.longest,
        stalls.kept().as_secs_f64() * 1e3,
        owed.lost.as_secs_f64() * 1e3,
        accounted * 100.0,
        tolerance * 100.0
    );
    if share > MAX_LOST_SHARE {
        return Err(Misjudged::Unmeasured(format!(
            "{report}\n{what}: premise failed: the data plane was kept from forwarding beyond \
             burst and credit for {:.1} % of the window (more than {:.0} %), so the window \
             measures the host, not the shaper",
            share * 100.0,
            MAX_LOST_SHARE * 100.0
        )));
    }
    if accounted.abs() <= tolerance {
        Ok(report)
    } else {
        Err(Misjudged::Off(report))
    }
}

/// [`judge`], printing the report, panicking with it when the delivery is off, or abandoning
/// the attempt ([`unmeasured`]) when the host took the window.
///
/// # Panics
/// When [`judge`] fails.
pub fn assert_owed(
    what: &str,
    counted: &Counted,
    promise: &Promise,
    stalls: &Stalls,
    tolerance: f64,
) {
    match judge(what, counted, promise, stalls, tolerance) {
        Ok(report) => {
            note("ok", &report);
            eprintln!("{report}");
        }
        Err(Misjudged::Off(report)) => {
            note("FAILED", &report);
            panic!("{report}");
        }
        Err(Misjudged::Unmeasured(report)) => {
            eprintln!("{report}");
            unmeasured(report)
        }
    }
}

/// Proves that traffic kept a class full in a window: it delivered at least `share` of the
/// least the class owed. A premise for measurements whose figure is not the rate itself (a
/// share between hosts, a ping's delay) but needs the class full: TCP flows fill a class, yet
/// not every instant of it.
///
/// # Panics
/// When the class delivered less: the measurement would not show what a full class does.
pub fn assert_filled(
    what: &str,
    counted: &Counted,
    promise: &Promise,
    stalls: &Stalls,
    share: f64,
) {
    let owed = Owed::of(promise, counted, stalls);
    let filled = counted.bytes / owed.low.max(1.0);
    eprintln!(
        "{what}: {:.3} Mbit/s, {:.1} % of the least the class owed ({:.3} Mbit/s over \
         {:.3} s, the data plane kept from forwarding {:.1} ms)",
        counted.bps() / 1e6,
        filled * 100.0,
        owed.low * 8.0 / counted.longest.max(1e-9) / 1e6,
        counted.shortest,
        stalls.kept().as_secs_f64() * 1e3
    );
    assert!(
        filled >= share,
        "{what}: premise failed: the traffic filled {:.1} % of what the class owed (needs \
         {:.0} %), so the window does not show a full class",
        filled * 100.0,
        share * 100.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> htb_core::Duration {
        htb_core::Duration::from_millis(n)
    }

    /// 100 Mbit/s for 5 s, with `stalls` ms on one worker and `credit` ms of stall credit.
    fn stalled(stalls: &[u64], credit: u64) -> Stalls {
        let mut log = StallLog::default();
        for &s in stalls {
            log.note(ms(s));
        }
        Stalls {
            workers: vec![log, StallLog::default()],
            credit: Duration::from_millis(credit),
            lump: Duration::ZERO,
        }
    }

    const RATE: f64 = 100e6;

    fn counted(fraction: f64) -> Counted {
        Counted::exact(RATE / 8.0 * 5.0 * fraction, 5.0)
    }

    #[test]
    fn a_quiet_window_holds_the_class_to_its_rate() {
        let quiet = stalled(&[], 10);
        let promise = Promise::class(RATE);
        assert!(judge("exact", &counted(1.0), &promise, &quiet, 0.01).is_ok());
        assert!(judge("-0.9 %", &counted(0.991), &promise, &quiet, 0.01).is_ok());
        assert!(judge("-2 %", &counted(0.98), &promise, &quiet, 0.01).is_err());
        assert!(judge("+2 %", &counted(1.02), &promise, &quiet, 0.01).is_err());
    }

    #[test]
    fn stalls_excuse_only_what_burst_and_credit_do_not_cover() {
        let promise = Promise::class(RATE);
        // A hundred 4 ms stalls (8 % of 5 s) without credit: each costs 4 − 1.12 ms, 5.8 %.
        let no_credit = stalled(&[4; 100], 0);
        assert!(judge("-5 %", &counted(0.95), &promise, &no_credit, 0.01).is_ok());
        // A class 2 % off loses its stalls on top: 0.98 × 0.942 is beyond 1 %.
        assert!(
            judge(
                "2 % off",
                &counted(0.98 * 0.942),
                &promise,
                &no_credit,
                0.01
            )
            .is_err()
        );
        // With 10 ms of credit the same stalls excuse nothing but a last catch-up (4 ms).
        let credit = stalled(&[4; 100], 10);
        assert!(judge("-5 %", &counted(0.95), &promise, &credit, 0.01).is_err());
        assert!(judge("-0.5 %", &counted(0.995), &promise, &credit, 0.01).is_ok());
        assert!(judge("2 % off", &counted(0.98), &promise, &credit, 0.01).is_err());
    }

    #[test]
    fn a_window_mostly_lost_to_stalls_is_a_premise_failure() {
        let promise = Promise::class(RATE);
        let lost = stalled(&[40; 20], 0);
        let err = judge("lost", &counted(0.85), &promise, &lost, 0.01).unwrap_err();
        assert!(matches!(err, Misjudged::Unmeasured(_)), "{err}");
        assert!(err.report().contains("premise failed"), "{err}");
    }

    #[test]
    fn an_uncertain_window_is_judged_at_its_ends() {
        let promise = Promise::class(RATE);
        let quiet = stalled(&[], 0);
        // Read at the ends within 30 ms: 4.97–5.03 s.
        let loose = Counted {
            bytes: RATE / 8.0 * 4.97,
            shortest: 4.97,
            longest: 5.03,
        };
        assert!(judge("shortest", &loose, &promise, &quiet, 0.0).is_ok());
        let high = Counted {
            bytes: RATE / 8.0 * 5.04,
            ..loose
        };
        assert!(judge("beyond the longest", &high, &promise, &quiet, 0.0).is_err());
    }
}
