//! Nanosecond time for the scheduler's virtual clock.
//!
//! The core never reads a clock: every call that needs the time takes an [`Instant`]. The origin
//! is whatever the caller chooses (`CLOCK_MONOTONIC` in the daemon, zero in the simulator); only
//! differences matter. Arithmetic saturates instead of wrapping or panicking, so a caller that
//! passes a `now` slightly in the past is treated as "no time elapsed", like the kernel's
//! `min_t(s64, now - t_c, mbuffer)` clamps a large gap.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

u64_newtype! {
    /// A point on the scheduler's clock, in nanoseconds since an origin chosen by the caller.
    pub struct Instant { nanos }
    /// The clock's origin.
    ZERO;
    /// The latest representable instant.
    MAX;
    /// An instant `nanos` nanoseconds after the origin.
    fn from_nanos;
    /// Nanoseconds since the origin.
    fn as_nanos;
}

u64_newtype! {
    /// A span of time in nanoseconds (on the wire: an integer of nanoseconds).
    pub struct Duration { nanos }
    /// No time.
    ZERO;
    /// The longest representable span.
    MAX;
    /// A span of `nanos` nanoseconds.
    fn from_nanos;
    /// The span in nanoseconds.
    fn as_nanos;
}

impl Instant {
    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    #[must_use]
    pub const fn saturating_since(self, earlier: Self) -> Duration {
        Duration {
            nanos: self.nanos.saturating_sub(earlier.nanos),
        }
    }
}

impl Duration {
    /// A span of `micros` microseconds (saturating).
    #[must_use]
    pub const fn from_micros(micros: u64) -> Self {
        Self {
            nanos: micros.saturating_mul(1_000),
        }
    }

    /// A span of `millis` milliseconds (saturating).
    #[must_use]
    pub const fn from_millis(millis: u64) -> Self {
        Self {
            nanos: millis.saturating_mul(1_000_000),
        }
    }

    /// A span of `secs` seconds (saturating).
    #[must_use]
    pub const fn from_secs(secs: u64) -> Self {
        Self {
            nanos: secs.saturating_mul(1_000_000_000),
        }
    }

    /// The smaller of two spans.
    #[must_use]
    pub const fn min(self, other: Self) -> Self {
        if self.nanos < other.nanos {
            self
        } else {
            other
        }
    }
}

/// `impl $op<Duration> for $lhs`, saturating instead of wrapping or panicking.
macro_rules! saturating_op {
    ($op:ident, $method:ident, $lhs:ident, $saturating:ident) => {
        impl $op<Duration> for $lhs {
            type Output = Self;
            fn $method(self, rhs: Duration) -> Self {
                Self {
                    nanos: self.nanos.$saturating(rhs.nanos),
                }
            }
        }
    };
}

saturating_op!(Add, add, Instant, saturating_add);
saturating_op!(Sub, sub, Instant, saturating_sub);
saturating_op!(Add, add, Duration, saturating_add);
saturating_op!(Sub, sub, Duration, saturating_sub);

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub for Instant {
    type Output = Duration;
    /// Saturating: an earlier `self` gives [`Duration::ZERO`].
    fn sub(self, rhs: Self) -> Duration {
        self.saturating_since(rhs)
    }
}

impl fmt::Display for Instant {
    /// `seconds.nanoseconds`, e.g. `1.000000250s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.nanos / 1_000_000_000,
            self.nanos % 1_000_000_000
        )
    }
}

/// Writes a time in the largest unit that keeps it exact: `10s`, `250ms`, `64us`, `5ns`.
///
/// # Errors
/// Only those of the formatter.
pub fn fmt_time(f: &mut fmt::Formatter<'_>, time: Duration) -> fmt::Result {
    let ns = time.as_nanos();
    if ns == 0 {
        return f.write_str("0s");
    }
    for (div, unit) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")] {
        if ns.is_multiple_of(div) {
            return write!(f, "{}{unit}", ns / div);
        }
    }
    write!(f, "{ns}ns")
}

impl fmt::Display for Duration {
    /// tc's time style: the largest unit that keeps the value exact (`1s`, `250ms`, `64us`, `5ns`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_time(f, *self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_nanos(10);
        assert_eq!(t - Instant::from_nanos(20), Duration::ZERO);
        assert_eq!(Instant::MAX + Duration::from_nanos(1), Instant::MAX);
        assert_eq!(t - Duration::from_nanos(11), Instant::ZERO);
        assert_eq!(Duration::from_secs(u64::MAX), Duration::MAX);
    }

    #[test]
    fn display() {
        extern crate std;
        use std::string::ToString;
        assert_eq!(
            Instant::from_nanos(1_000_000_250).to_string(),
            "1.000000250s"
        );
        assert_eq!(Duration::from_millis(250).to_string(), "250ms");
    }
}
