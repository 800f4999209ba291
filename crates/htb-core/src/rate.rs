//! Rates and the exact bytes → time conversion that replaces the kernel's `psched_l2t_ns`.
//!
//! Tokens are *time credit*, as in `sch_htb.c`, but kept in units of 1/256 ns ([`TOKEN_SHIFT`])
//! rather than whole nanoseconds: a 64-byte frame at 40 Gbit/s lasts 12.8 ns, and rounding that
//! to 12 ns (what `psched_l2t_ns` does) lets a class send 6.7 % over its rate. With 1/256 ns the
//! rounding error is below 0.04 % at 40 Gbit/s and 64 B, and an `i64` still spans 416 days.

use core::fmt;

use crate::time::Duration;

/// Fractional bits of a token unit: tokens count 1/256 ns.
pub(crate) const TOKEN_SHIFT: u32 = 8;
/// Token units per nanosecond.
pub(crate) const TOKENS_PER_NS: i64 = 1 << TOKEN_SHIFT;
/// Token units per kernel psched tick (64 ns), the unit `tc -s` prints tokens in.
pub(crate) const TOKENS_PER_TICK_SHIFT: u32 = TOKEN_SHIFT + 6;
/// The largest cost one packet may be charged, in token units (2 minutes). The kernel floors
/// a bucket at `-mbuffer` (60 s) anyway; the cap only keeps arithmetic far from overflow.
pub(crate) const MAX_PACKET_COST: i64 = 120 * 1_000_000_000 * TOKENS_PER_NS;

/// Converts nanoseconds to token units (saturating far beyond any bucket size).
pub(crate) const fn ns_to_tokens(ns: u64) -> i64 {
    if ns >= (i64::MAX as u64) >> TOKEN_SHIFT {
        i64::MAX
    } else {
        (ns as i64) << TOKEN_SHIFT
    }
}

/// Converts a non-negative token amount to nanoseconds, rounding up (never early).
pub(crate) const fn tokens_to_ns_ceil(tokens: i64) -> u64 {
    if tokens <= 0 {
        0
    } else {
        (tokens as u64).div_ceil(TOKENS_PER_NS as u64)
    }
}

u64_newtype! {
    /// A data rate in bits per second.
    ///
    /// Any value from 1 bit/s to `u64::MAX` bit/s is accepted by the conversions; a class
    /// refuses a rate of zero.
    pub struct Rate { bits_per_sec }
    /// Zero bits per second (not a valid class rate).
    ZERO;
    /// The highest representable rate.
    MAX;
    /// A rate of `bits_per_sec` bit/s.
    fn from_bits_per_sec;
    /// The rate in bit/s.
    fn bits_per_sec;
}

impl Rate {
    /// A rate of `bytes_per_sec` byte/s (saturating).
    #[must_use]
    pub const fn from_bytes_per_sec(bytes_per_sec: u64) -> Self {
        Self {
            bits_per_sec: bytes_per_sec.saturating_mul(8),
        }
    }

    /// `kbit` kilobits (1000 bit) per second.
    #[must_use]
    pub const fn from_kbit(kbit: u64) -> Self {
        Self {
            bits_per_sec: kbit.saturating_mul(1_000),
        }
    }

    /// `mbit` megabits (10^6 bit) per second.
    #[must_use]
    pub const fn from_mbit(mbit: u64) -> Self {
        Self {
            bits_per_sec: mbit.saturating_mul(1_000_000),
        }
    }

    /// `gbit` gigabits (10^9 bit) per second.
    #[must_use]
    pub const fn from_gbit(gbit: u64) -> Self {
        Self {
            bits_per_sec: gbit.saturating_mul(1_000_000_000),
        }
    }

    /// The rate in whole bytes per second (rounded down), the unit tc and the kernel use.
    #[must_use]
    pub const fn bytes_per_sec(self) -> u64 {
        self.bits_per_sec / 8
    }

    /// Whether this is zero.
    #[must_use]
    pub const fn is_zero(self) -> bool {
        self.bits_per_sec == 0
    }

    /// Exact time to send `bytes` at this rate, rounded up to the next nanosecond.
    /// A zero rate gives [`Duration::MAX`].
    #[must_use]
    pub fn time_for_bytes(self, bytes: u64) -> Duration {
        if self.bits_per_sec == 0 {
            return Duration::MAX;
        }
        let ns = (u128::from(bytes) * 8_000_000_000).div_ceil(u128::from(self.bits_per_sec));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Bytes this rate delivers in `time`, rounded down (saturating).
    #[must_use]
    pub fn bytes_in(self, time: Duration) -> u64 {
        let bytes = u128::from(self.bits_per_sec) * u128::from(time.as_nanos()) / 8_000_000_000;
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

/// Writes a rate the way tc does (`print_rate`): k = 1000 (1024 with `iec`), dividing while the
/// value is a round multiple or at least 1000 units, e.g. `1500Kbit`, `100Mbit`, `3237Kbit`.
///
/// # Errors
/// Only those of the formatter.
pub fn fmt_rate(f: &mut fmt::Formatter<'_>, rate: Rate, iec: bool) -> fmt::Result {
    const UNITS: [&str; 5] = ["", "K", "M", "G", "T"];
    let k: u64 = if iec { 1024 } else { 1000 };
    let mut bits = rate.bits_per_sec();
    let mut unit = 0;
    while unit + 1 < UNITS.len() {
        if bits < k || (!bits.is_multiple_of(k) && bits < 1000 * k) {
            break;
        }
        bits /= k;
        unit += 1;
    }
    let i = if iec && unit > 0 { "i" } else { "" };
    write!(f, "{bits}{}{i}bit", UNITS[unit])
}

impl fmt::Display for Rate {
    /// tc's rate style (`100Mbit`, `1500Kbit`, `8bit`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_rate(f, *self, false)
    }
}

keyword_enum! {
    /// How the wire length of a packet is computed from its length (kernel `psched_l2t_ns`).
    pub enum LinkLayer {
        /// Length as is.
        #[default]
        Ethernet => "ethernet",
        /// ATM cells: `ceil(len / 48) * 53` (tc `linklayer atm` / `adsl`).
        #[cfg_attr(feature = "serde", serde(alias = "adsl"))]
        Atm => "atm",
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Per-class length adjustment applied before any token arithmetic (tc `overhead`, `mpu`,
/// `linklayer`), shared by rate and ceil exactly as tc sends it to both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct LengthAdjust {
    /// Bytes added to every packet (tc `overhead`).
    pub overhead: u16,
    /// Minimum packet unit: shorter packets are charged as this many bytes (tc `mpu`).
    pub mpu: u16,
    /// Link layer framing.
    #[cfg_attr(feature = "serde", serde(rename = "linklayer"))]
    pub link_layer: LinkLayer,
}

impl LengthAdjust {
    /// The length the token buckets are charged for a packet of `len` bytes.
    #[inline]
    #[must_use]
    pub fn charged_len(self, len: u32) -> u32 {
        let mut len = len.saturating_add(u32::from(self.overhead));
        if len < u32::from(self.mpu) {
            len = u32::from(self.mpu);
        }
        match self.link_layer {
            LinkLayer::Ethernet => len,
            LinkLayer::Atm => len.div_ceil(48).saturating_mul(53),
        }
    }
}

/// Precomputed multiplier turning bytes into token units at one rate (the role of
/// `psched_ratecfg_precompute` + `psched_l2t_ns`, with 128-bit precision).
///
/// Token units per byte, `8e9 × 256 / rate`, is kept as 64.32 fixed point rounded *up*:
/// `whole + frac / 2^32`. A packet costs `len·whole + ⌈len·frac / 2^32⌉`: exact when the time is
/// a whole number of units, otherwise rounded up by less than one unit (1/256 ns) plus
/// `len / 2^32` units from the fraction's rounding — never less than the packet's exact time.
/// (Packed as `u64` + `u32` so that two of them and the class's other 32-bit fields share
/// cache lines.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(Rust, packed(4))]
pub(crate) struct TokenCost {
    whole: u64,
    frac: u32,
}

impl TokenCost {
    /// Bits per byte × ns per second × token units per ns.
    const NUMERATOR: u128 = 8 * 1_000_000_000 * (TOKENS_PER_NS as u128);

    pub(crate) fn new(rate: Rate) -> Self {
        let rate = u128::from(rate.bits_per_sec().max(1));
        let whole = Self::NUMERATOR / rate;
        let remainder = Self::NUMERATOR % rate;
        // (remainder / rate) · 2^32, rounded up; remainder < rate < 2^64, so no overflow.
        let frac = (remainder << 32).div_ceil(rate);
        match u32::try_from(frac) {
            Ok(frac) => Self {
                whole: whole as u64,
                frac,
            },
            // frac rounded up to exactly 2^32: carry into the whole part.
            Err(_) => Self {
                whole: whole as u64 + 1,
                frac: 0,
            },
        }
    }

    /// Token units that `len` (already adjusted) bytes cost, capped at [`MAX_PACKET_COST`].
    #[inline]
    pub(crate) fn cost(self, len: u32) -> i64 {
        let (whole, frac) = (self.whole, self.frac);
        let frac = (u64::from(len) * u64::from(frac) + u64::from(u32::MAX)) >> 32;
        let cost = u128::from(len) * u128::from(whole) + u128::from(frac);
        if cost > MAX_PACKET_COST as u128 {
            MAX_PACKET_COST
        } else {
            cost as i64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact_tokens(len: u64, rate: u64) -> f64 {
        len as f64 * 8e9 * TOKENS_PER_NS as f64 / rate as f64
    }

    #[test]
    fn cost_matches_exact_time_within_one_unit() {
        for &rate in &[
            1u64,
            8_000,
            180_000,
            10_000_000,
            1_000_000_000,
            40_000_000_000,
            1 << 40,
        ] {
            let cost = TokenCost::new(Rate::from_bits_per_sec(rate));
            for &len in &[1u32, 64, 1500, 9000, 65_535] {
                let exact = exact_tokens(u64::from(len), rate);
                let got = cost.cost(len) as f64;
                if exact >= MAX_PACKET_COST as f64 {
                    assert_eq!(got, MAX_PACKET_COST as f64);
                    continue;
                }
                assert!(got >= exact, "rate {rate} len {len}: {got} < {exact}");
                assert!(
                    got <= exact.ceil() + 1.0,
                    "rate {rate} len {len}: {got} > {exact}"
                );
            }
        }
    }

    #[test]
    fn cost_at_40gbit_64b_is_12_8ns() {
        let cost = TokenCost::new(Rate::from_gbit(40));
        // 64 B * 8 / 40e9 = 12.8 ns = 3276.8 units, rounded up.
        assert_eq!(cost.cost(64), 3277);
        // Rates below 477 bit/s need more than 32 bits of whole units per byte.
        assert_eq!(
            TokenCost::new(Rate::from_bits_per_sec(1)).cost(1),
            8_000_000_000 * 256
        );
        assert_eq!(
            TokenCost::new(Rate::from_mbit(8)).cost(1000),
            256_000_000,
            "exact: 1 ms"
        );
    }

    #[test]
    fn time_for_bytes_rounds_up() {
        assert_eq!(
            Rate::from_mbit(8).time_for_bytes(1000).as_nanos(),
            1_000_000
        );
        assert_eq!(
            Rate::from_bits_per_sec(3).time_for_bytes(1).as_nanos(),
            2_666_666_667
        );
        assert_eq!(Rate::ZERO.time_for_bytes(1), Duration::MAX);
        assert_eq!(Rate::from_mbit(8).bytes_in(Duration::from_millis(1)), 1000);
    }

    #[test]
    fn length_adjust_mirrors_psched_l2t_ns() {
        // (overhead, mpu, link layer, packet length, charged length)
        for (overhead, mpu, link_layer, len, charged) in [
            (24, 64, LinkLayer::Ethernet, 10, 64),
            (24, 64, LinkLayer::Ethernet, 100, 124),
            (0, 0, LinkLayer::Atm, 48, 53),
            (0, 0, LinkLayer::Atm, 49, 106),
        ] {
            let adjust = LengthAdjust {
                overhead,
                mpu,
                link_layer,
            };
            assert_eq!(adjust.charged_len(len), charged, "{adjust:?} {len}");
        }
    }

    #[test]
    fn token_conversions() {
        assert_eq!(ns_to_tokens(1), 256);
        assert_eq!(tokens_to_ns_ceil(257), 2);
        assert_eq!(tokens_to_ns_ceil(-5), 0);
        assert_eq!(ns_to_tokens(u64::MAX), i64::MAX);
    }
}
