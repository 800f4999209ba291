//! tc's units as tc prints them (iproute2 `tc/tc_util.c`: `sprint_rate`, `sprint_time`):
//! what `show` output and the writer's command words share.

use core::fmt;

use htb_core::Rate;
use htb_core::units::fmt_rate;

/// A rate in bit/s as tc prints it, `-iec` or not (`Display`, without a `String`).
#[derive(Clone, Copy, Debug)]
pub struct RateText(pub u64, pub bool);

impl fmt::Display for RateText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_rate(f, Rate::from_bits_per_sec(self.0), self.1)
    }
}

/// A rate in bit/s as tc prints it (`100Mbit`, `1500Kbit`).
#[must_use]
pub fn rate_text(bits: u64, iec: bool) -> String {
    RateText(bits, iec).to_string()
}

/// A time in µs as tc 6.1's `sprint_time` prints it: `%.3g` of seconds or milliseconds
/// (`5ms`, `100ms`, `1.5s`, `2.5ms`), plain microseconds below one millisecond (`500us`).
#[must_use]
pub fn time_text(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{}s", g3(us as f64 / 1e6))
    } else if us >= 1_000 {
        format!("{}ms", g3(us as f64 / 1e3))
    } else {
        format!("{us}us")
    }
}

/// C's `%.3g`: three significant digits, trailing zeros dropped, exponent form outside
/// [1e-4, 1e3).
fn g3(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let exp = x.abs().log10().floor() as i32;
    // Rounding to three digits may carry into the next power of ten (999.5 → 1e+03).
    let rounded: f64 = format!("{x:.2e}").parse().unwrap_or(x);
    let exp = if rounded.abs() >= 10f64.powi(exp + 1) {
        exp + 1
    } else {
        exp
    };
    if !(-4..3).contains(&exp) {
        let mantissa = rounded / 10f64.powi(exp);
        let m = trim(format!("{mantissa:.2}"));
        return format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    let decimals = (2 - exp).max(0) as usize;
    trim(format!("{rounded:.decimals$}"))
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_like_tc_6_1() {
        assert_eq!(time_text(5000), "5ms");
        assert_eq!(time_text(4999), "5ms", "%.3g of 4.999");
        assert_eq!(time_text(99_999), "100ms");
        assert_eq!(time_text(2500), "2.5ms");
        assert_eq!(time_text(1_500_000), "1.5s");
        assert_eq!(time_text(500), "500us");
        assert_eq!(time_text(123_456), "123ms");
        assert_eq!(g3(1234.0), "1.23e+03");
        assert_eq!(g3(999.6), "1e+03");
        assert_eq!(g3(0.5), "0.5");
    }
}
