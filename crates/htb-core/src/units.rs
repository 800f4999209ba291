//! tc's units: parsers and formatters for rates, sizes and times, shared by the CLI, the
//! daemon's config and the simulator's scenarios.
//!
//! The rules are iproute2's (`get_rate64`, `get_size64`, `get_time` in `lib/utils*.c`):
//! suffixes are matched case-insensitively, so `mbps` means **megabytes** per second, exactly
//! as with tc. Numbers may have a fraction and a decimal exponent (`1.5mbit`, `1e9`); they are
//! evaluated exactly in integer arithmetic, never through floating point.
//!
//! | kind | bare number | suffixes |
//! |---|---|---|
//! | rate | bit/s | `bit kbit mbit gbit tbit kibit mibit gibit tibit`, `bps kbps mbps gbps tbps kibps mibps gibps tibps` (bytes/s) |
//! | size | bytes | `b`, `k`/`kb` ×1024, `m`/`mb` ×1024², `g`/`gb` ×1024³, `kbit` ×128, `mbit` ×131072, `gbit` ×134217728 |
//! | time | µs | `s sec secs`, `ms msec msecs`, `us usec usecs`, `ns nsec nsecs` |

use core::fmt;

// The formatters of a rate and a time live with their types (their `Display`); named here too
// so that every unit's parser and formatter is found in one place.
use crate::rate::Rate;
pub use crate::rate::fmt_rate;
use crate::time::Duration;
pub use crate::time::fmt_time;

/// Why a unit string was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnitError {
    /// The string was empty.
    Empty,
    /// The numeric part is not a non-negative decimal number.
    InvalidNumber,
    /// The suffix is not a unit of this kind.
    UnknownUnit,
    /// A size must be a whole number of bytes (tc's rule).
    NotWholeBytes,
    /// The value does not fit.
    TooLarge,
    /// `N%` needs the link speed, which is not known here.
    PercentWithoutLinkSpeed,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "empty value",
            Self::InvalidNumber => "not a non-negative number",
            Self::UnknownUnit => "unknown unit",
            Self::NotWholeBytes => "not a whole number of bytes",
            Self::TooLarge => "value too large",
            Self::PercentWithoutLinkSpeed => "a percentage needs the link speed",
        })
    }
}

impl core::error::Error for UnitError {}

const KI: u128 = 1024;

/// Rate suffixes in bits per second (iproute2 `__rates`).
const RATE_UNITS: &[(&str, u128)] = &[
    ("bit", 1),
    ("kibit", KI),
    ("kbit", 1_000),
    ("mibit", KI * KI),
    ("mbit", 1_000_000),
    ("gibit", KI * KI * KI),
    ("gbit", 1_000_000_000),
    ("tibit", KI * KI * KI * KI),
    ("tbit", 1_000_000_000_000),
    ("bps", 8),
    ("kibps", 8 * KI),
    ("kbps", 8_000),
    ("mibps", 8 * KI * KI),
    ("mbps", 8_000_000),
    ("gibps", 8 * KI * KI * KI),
    ("gbps", 8_000_000_000),
    ("tibps", 8 * KI * KI * KI * KI),
    ("tbps", 8_000_000_000_000),
];

/// Size suffixes in bytes (iproute2 `get_size64`).
const SIZE_UNITS: &[(&str, u128)] = &[
    ("b", 1),
    ("k", KI),
    ("kb", KI),
    ("m", KI * KI),
    ("mb", KI * KI),
    ("g", KI * KI * KI),
    ("gb", KI * KI * KI),
    ("kbit", KI / 8),
    ("mbit", KI * KI / 8),
    ("gbit", KI * KI * KI / 8),
];

/// Time suffixes in nanoseconds (iproute2 `get_time`, plus `ns`).
const TIME_UNITS: &[(&str, u128)] = &[
    ("s", 1_000_000_000),
    ("sec", 1_000_000_000),
    ("secs", 1_000_000_000),
    ("ms", 1_000_000),
    ("msec", 1_000_000),
    ("msecs", 1_000_000),
    ("us", 1_000),
    ("usec", 1_000),
    ("usecs", 1_000),
    ("ns", 1),
    ("nsec", 1),
    ("nsecs", 1),
];

/// A non-negative decimal `mantissa * 10^exponent`.
struct Decimal {
    mantissa: u128,
    exponent: i32,
}

/// Splits `s` into a decimal number and its (possibly empty) suffix.
fn parse_decimal(s: &str) -> Result<(Decimal, &str), UnitError> {
    if s.is_empty() {
        return Err(UnitError::Empty);
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut mantissa: u128 = 0;
    let mut exponent: i32 = 0;
    let mut digits = 0;
    let mut push = |d: u8, exponent: &mut i32, after_point: bool| {
        // Digits beyond 30 significant ones cannot change a u64 result: drop them.
        if mantissa < 10u128.pow(30) {
            mantissa = mantissa * 10 + u128::from(d - b'0');
            if after_point {
                *exponent -= 1;
            }
        } else if !after_point {
            *exponent += 1;
        }
    };
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        push(bytes[i], &mut exponent, false);
        digits += 1;
        i += 1;
    }
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            push(bytes[i], &mut exponent, true);
            digits += 1;
            i += 1;
        }
    }
    if digits == 0 {
        return Err(UnitError::InvalidNumber);
    }
    // An exponent only if digits follow it, so that a suffix starting with `e` stays a suffix.
    if i + 1 < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        let mut j = i + 1;
        let negative = bytes[j] == b'-';
        if bytes[j] == b'-' || bytes[j] == b'+' {
            j += 1;
        }
        let start = j;
        let mut exp: i32 = 0;
        while j < bytes.len() && bytes[j].is_ascii_digit() {
            exp = exp
                .saturating_mul(10)
                .saturating_add(i32::from(bytes[j] - b'0'));
            j += 1;
        }
        if j > start {
            exponent = exponent.saturating_add(if negative { -exp } else { exp });
            i = j;
        }
    }
    Ok((Decimal { mantissa, exponent }, &s[i..]))
}

fn lookup(table: &[(&str, u128)], suffix: &str) -> Option<u128> {
    table
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(suffix))
        .map(|&(_, m)| m)
}

/// `value * multiplier` as an integer, rounded to nearest, or `exact` refusing any remainder.
fn scale(value: &Decimal, multiplier: u128, exact: bool) -> Result<u64, UnitError> {
    let product = value
        .mantissa
        .checked_mul(multiplier)
        .ok_or(UnitError::TooLarge)?;
    let result = if value.exponent >= 0 {
        let pow = 10u128
            .checked_pow(value.exponent.unsigned_abs())
            .ok_or(UnitError::TooLarge)?;
        product.checked_mul(pow).ok_or(UnitError::TooLarge)?
    } else {
        let Some(pow) = 10u128.checked_pow(value.exponent.unsigned_abs()) else {
            // Divided by more than 10^38: the value rounds to zero.
            return if exact && product != 0 {
                Err(UnitError::NotWholeBytes)
            } else {
                Ok(0)
            };
        };
        if exact && product % pow != 0 {
            return Err(UnitError::NotWholeBytes);
        }
        (product + pow / 2) / pow
    };
    u64::try_from(result).map_err(|_| UnitError::TooLarge)
}

/// Parses a tc rate (`100mbit`, `1.5Gbit`, `10MBps`, `8000`).
///
/// # Errors
/// [`UnitError`] for an empty string, a malformed number, an unknown suffix, an overflow, or
/// a percentage (use [`parse_rate_or_percent`]).
pub fn parse_rate(s: &str) -> Result<Rate, UnitError> {
    parse_rate_or_percent(s, None)
}

/// Parses a tc rate, also accepting `N%` of `link_speed` (tc takes it from
/// `/sys/class/net/DEV/speed`).
///
/// # Errors
/// As [`parse_rate`], plus [`UnitError::PercentWithoutLinkSpeed`].
pub fn parse_rate_or_percent(s: &str, link_speed: Option<Rate>) -> Result<Rate, UnitError> {
    let (value, suffix) = parse_decimal(s)?;
    if suffix == "%" {
        let speed = link_speed.ok_or(UnitError::PercentWithoutLinkSpeed)?;
        let hundredths = scale(&value, 100, false)?;
        let bits = u128::from(speed.bits_per_sec()) * u128::from(hundredths) / 10_000;
        return u64::try_from(bits)
            .map(Rate::from_bits_per_sec)
            .map_err(|_| UnitError::TooLarge);
    }
    let multiplier = if suffix.is_empty() {
        1
    } else {
        lookup(RATE_UNITS, suffix).ok_or(UnitError::UnknownUnit)?
    };
    scale(&value, multiplier, false).map(Rate::from_bits_per_sec)
}

/// Parses a tc size in bytes (`1600`, `15k`, `1.5kb`, `64kbit`).
///
/// # Errors
/// [`UnitError`]; a size must come out as a whole number of bytes.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let (value, suffix) = parse_decimal(s)?;
    let multiplier = if suffix.is_empty() {
        1
    } else {
        lookup(SIZE_UNITS, suffix).ok_or(UnitError::UnknownUnit)?
    };
    scale(&value, multiplier, true)
}

/// Parses a tc time (`10s`, `250ms`, `64us`, `5ns`); a bare number is microseconds, as in tc.
///
/// # Errors
/// [`UnitError`].
pub fn parse_time(s: &str) -> Result<Duration, UnitError> {
    let (value, suffix) = parse_decimal(s)?;
    let multiplier = if suffix.is_empty() {
        1_000
    } else {
        lookup(TIME_UNITS, suffix).ok_or(UnitError::UnknownUnit)?
    };
    scale(&value, multiplier, false).map(Duration::from_nanos)
}

/// Writes a size the way tc does (`sprint_size`): `1600b`, `15Kb`, `2Mb`, `1Gb`.
///
/// # Errors
/// Only those of the formatter.
pub fn fmt_size(f: &mut fmt::Formatter<'_>, bytes: u64) -> fmt::Result {
    const KB: u64 = 1024;
    const MB: u64 = 1024 * 1024;
    const GB: u64 = 1024 * 1024 * 1024;
    // rint(bytes / unit): round half to even is irrelevant at these tolerances.
    let near = |unit: u64| (bytes + unit / 2) / unit;
    if bytes >= GB && near(GB).saturating_mul(GB).abs_diff(bytes) < 1024 {
        write!(f, "{}Gb", near(GB))
    } else if bytes >= MB && near(MB).saturating_mul(MB).abs_diff(bytes) < 1024 {
        write!(f, "{}Mb", near(MB))
    } else if bytes >= KB && near(KB).saturating_mul(KB).abs_diff(bytes) < 16 {
        write!(f, "{}Kb", near(KB))
    } else {
        write!(f, "{bytes}b")
    }
}

/// [`fmt::Display`] for a size in bytes, in tc's style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DisplaySize(pub u64);

impl fmt::Display for DisplaySize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_size(f, self.0)
    }
}

/// [`fmt::Display`] for a rate in tc's IEC style (`-iec`: `97656Kibit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DisplayRateIec(pub Rate);

impl fmt::Display for DisplayRateIec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_rate(f, self.0, true)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::*;

    fn bits(s: &str) -> u64 {
        parse_rate(s).unwrap().bits_per_sec()
    }

    #[test]
    fn rates_follow_tc_table_case_insensitively() {
        assert_eq!(bits("8000"), 8000);
        assert_eq!(bits("100mbit"), 100_000_000);
        assert_eq!(bits("100Mbit"), 100_000_000);
        assert_eq!(bits("1.5gbit"), 1_500_000_000);
        assert_eq!(bits("180kbit"), 180_000);
        assert_eq!(bits("1Kibit"), 1024);
        assert_eq!(bits("10mbps"), 80_000_000, "mbps is megabytes, as in tc");
        assert_eq!(bits("1kbps"), 8000);
        assert_eq!(bits("2TiBps"), 2 * 8 * 1024u64.pow(4));
        assert_eq!(bits("1tbit"), 1_000_000_000_000);
        assert_eq!(bits("1e9"), 1_000_000_000);
        assert_eq!(bits("40gbit"), 40_000_000_000);
        assert_eq!(bits("1bit"), 1);
    }

    #[test]
    fn rate_errors() {
        assert_eq!(parse_rate(""), Err(UnitError::Empty));
        assert_eq!(parse_rate("mbit"), Err(UnitError::InvalidNumber));
        assert_eq!(parse_rate("-1mbit"), Err(UnitError::InvalidNumber));
        assert_eq!(parse_rate("10mbitx"), Err(UnitError::UnknownUnit));
        assert_eq!(parse_rate("10 mbit"), Err(UnitError::UnknownUnit));
        assert_eq!(parse_rate("50%"), Err(UnitError::PercentWithoutLinkSpeed));
        assert_eq!(parse_rate("99999999999tbps"), Err(UnitError::TooLarge));
    }

    #[test]
    fn percent_of_link_speed() {
        let link = Rate::from_gbit(10);
        assert_eq!(
            parse_rate_or_percent("25%", Some(link)),
            Ok(Rate::from_mbit(2500))
        );
        assert_eq!(
            parse_rate_or_percent("0.5%", Some(link)),
            Ok(Rate::from_mbit(50))
        );
    }

    #[test]
    fn sizes_follow_tc() {
        assert_eq!(parse_size("1600"), Ok(1600));
        assert_eq!(parse_size("1600b"), Ok(1600));
        assert_eq!(parse_size("15k"), Ok(15 * 1024));
        assert_eq!(parse_size("15KB"), Ok(15 * 1024));
        assert_eq!(parse_size("1.5k"), Ok(1536));
        assert_eq!(parse_size("2m"), Ok(2 * 1024 * 1024));
        assert_eq!(parse_size("1g"), Ok(1024 * 1024 * 1024));
        assert_eq!(parse_size("64kbit"), Ok(8192));
        assert_eq!(parse_size("1mbit"), Ok(131_072));
        assert_eq!(parse_size("1.1k"), Err(UnitError::NotWholeBytes));
        assert_eq!(parse_size("10x"), Err(UnitError::UnknownUnit));
        assert_eq!(parse_size("159900000"), Ok(159_900_000));
    }

    #[test]
    fn times_follow_tc_with_ns() {
        assert_eq!(parse_time("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_time("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_time("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_time("250msec"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_time("64us"), Ok(Duration::from_micros(64)));
        assert_eq!(parse_time("5ns"), Ok(Duration::from_nanos(5)));
        assert_eq!(
            parse_time("100"),
            Ok(Duration::from_micros(100)),
            "bare is µs as in tc"
        );
        assert_eq!(parse_time("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_time("1h"), Err(UnitError::UnknownUnit));
    }

    struct R(Rate);
    impl fmt::Display for R {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            fmt_rate(f, self.0, false)
        }
    }

    #[test]
    fn rate_formatting_matches_tc_examples() {
        let show = |b: u64| R(Rate::from_bits_per_sec(b)).to_string();
        assert_eq!(show(1_500_000), "1500Kbit");
        assert_eq!(show(100_000_000), "100Mbit");
        assert_eq!(show(50_000_000_000), "50Gbit");
        assert_eq!(show(500_000), "500Kbit");
        assert_eq!(show(1000), "1Kbit");
        assert_eq!(show(180_000), "180Kbit");
        assert_eq!(show(3_237_123), "3237Kbit");
        assert_eq!(show(8), "8bit");
        assert_eq!(
            DisplayRateIec(Rate::from_mbit(100)).to_string(),
            "97656Kibit"
        );
        assert_eq!(
            DisplayRateIec(Rate::from_gbit(50)).to_string(),
            "47683Mibit"
        );
    }

    #[test]
    fn size_formatting_matches_tc_examples() {
        assert_eq!(DisplaySize(1600).to_string(), "1600b");
        assert_eq!(DisplaySize(15 * 1024).to_string(), "15Kb");
        assert_eq!(DisplaySize(3000).to_string(), "3000b");
        assert_eq!(DisplaySize(2 * 1024 * 1024).to_string(), "2Mb");
        assert_eq!(DisplaySize(1375).to_string(), "1375b");
    }

    #[test]
    fn round_trip_rates() {
        for b in [
            1u64,
            999,
            1000,
            1_234_000,
            100_000_000,
            40_000_000_000,
            1_000_000_000_000,
        ] {
            let text = R(Rate::from_bits_per_sec(b)).to_string();
            assert_eq!(parse_rate(&text).unwrap().bits_per_sec(), b, "{text}");
        }
    }
}
