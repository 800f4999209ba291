//! `tbf` (iproute2 `tc/q_tbf.c`): its options (`tbf_parse_opt`) and their printer
//! (`tbf_print_opt`), text and JSON.

use std::fmt::Write as _;

use htb_core::units::{DisplaySize, parse_rate, parse_size, parse_time};
use htb_core::{LeafSpec, Rate, TbfConfig, TbfSpec};
use serde_json::{Map, Value, json};

use crate::args::{Args, Result, matches, usage};
use crate::units::{rate_text, time_text};
use crate::words::{RateWord, Words};

/// Usage of `tbf` (tc's `explain`, without the `overhead` and `linklayer` htbd does not take).
pub(super) const USAGE: &str = "\
Usage: ... tbf limit BYTES burst BYTES[/BYTES] rate KBPS [ mtu BYTES[/BYTES] ]
               [ peakrate KBPS ] [ latency TIME ]";

/// tc's `explain1`.
fn illegal<T>(what: &str, value: &str) -> Result<T> {
    usage(format!("tbf: illegal value for \"{what}\": \"{value}\""))
}

/// tc's check of an option given twice.
fn once<T>(slot: &Option<T>, what: &str) -> Result<()> {
    match slot {
        Some(_) => usage(format!("tbf: duplicate \"{what}\" specification")),
        None => Ok(()),
    }
}

/// A size, with tc's `/CELL` (legacy rate tables) accepted and ignored (`get_size_and_cell`).
fn size(v: &str, what: &str) -> Result<u32> {
    let bytes = v.split('/').next().unwrap_or(v);
    parse_size(bytes)
        .ok()
        .and_then(|b| u32::try_from(b).ok())
        .map_or_else(|| illegal(what, v), Ok)
}

fn rate(v: &str, what: &str) -> Result<Rate> {
    parse_rate(v).or_else(|_| illegal(what, v))
}

/// `tbf_parse_opt`: tc's checks and its messages, every missing option reported at once
/// before the usage; the core turns a latency into the limit as tc does.
///
/// # Errors
/// tc's usage errors; `overhead`, `linklayer` and `mpu` are refused (not implemented).
pub(super) fn options(a: &mut Args<'_>) -> Result<LeafSpec> {
    let mut s = TbfSpec::default();
    while let Some(w) = a.next() {
        if matches(w, "limit") {
            let v = a.value()?;
            once(&s.limit, "limit")?;
            if s.latency.is_some() {
                return usage("tbf: specifying both \"latency\" and \"limit\" is not allowed");
            }
            s.limit = Some(size(v, "limit")?);
        } else if matches(w, "latency") {
            let v = a.value()?;
            once(&s.latency, "latency")?;
            if s.limit.is_some() {
                // tc's own words, slash and all.
                return usage("tbf: specifying both \"limit\" and \"/latency\" is not allowed");
            }
            s.latency = Some(parse_time(v).or_else(|_| illegal("latency", v))?);
        } else if matches(w, "burst") || w == "buffer" || w == "maxburst" {
            let v = a.value()?;
            once(&s.burst, "buffer/burst/maxburst")?;
            s.burst = Some(size(v, w)?);
        } else if w == "mtu" || w == "minburst" {
            let v = a.value()?;
            once(&s.mtu, "mtu/minburst")?;
            s.mtu = Some(size(v, w)?);
        } else if w == "rate" {
            let v = a.value()?;
            once(&s.rate, "rate")?;
            s.rate = Some(rate(v, "rate")?);
        } else if matches(w, "peakrate") {
            let v = a.value()?;
            once(&s.peakrate, "peakrate")?;
            s.peakrate = Some(rate(v, "peakrate")?);
        } else if w == "mpu" || matches(w, "overhead") || matches(w, "linklayer") {
            return usage(format!(
                "tbf: \"{w}\" is not supported: htbd's tbf charges a packet's own length"
            ));
        } else if w == "help" {
            return usage(USAGE);
        } else {
            return usage(format!("tbf: unknown parameter \"{w}\"\n{USAGE}"));
        }
    }
    let mut missing = Vec::new();
    if s.rate.is_none() {
        missing.push("tbf: the \"rate\" parameter is mandatory.");
    }
    if s.burst.is_none() {
        missing.push("tbf: the \"burst\" parameter is mandatory.");
    }
    if s.peakrate.is_some() && s.mtu.is_none() {
        missing.push("tbf: when \"peakrate\" is specified, \"mtu\" must also be specified.");
    }
    if s.limit.is_none() && s.latency.is_none() {
        missing.push("tbf: either \"limit\" or \"latency\" is required.");
    }
    if !missing.is_empty() {
        return usage(format!("{}\n{USAGE}", missing.join("\n")));
    }
    Ok(LeafSpec::Tbf(s))
}

/// `tbf_print_opt`, as tc 6.1 prints it: the latency a full queue means (`lat`), or the
/// limit when that is negative.
pub(super) fn options_text(c: &TbfConfig) -> String {
    let mut out = format!(
        "rate {} burst {} ",
        rate_text(c.rate.bits_per_sec(), false),
        DisplaySize(u64::from(c.burst))
    );
    if let Some(peak) = c.peakrate {
        let _ = write!(
            out,
            "peakrate {} minburst {} ",
            rate_text(peak.bits_per_sec(), false),
            DisplaySize(u64::from(c.mtu))
        );
    }
    match c.latency() {
        Some(lat) => {
            let _ = write!(out, "lat {} ", time_text(lat.as_nanos() / 1000));
        }
        None => {
            let _ = write!(out, "limit {} ", DisplaySize(u64::from(c.limit)));
        }
    }
    out
}

/// The same under `-j` (rates in bytes per second, the latency in µs, as tc's JSON).
pub(super) fn options_json(c: &TbfConfig) -> Value {
    let mut o = Map::new();
    o.insert("rate".into(), json!(c.rate.bytes_per_sec()));
    o.insert("burst".into(), json!(c.burst));
    if let Some(peak) = c.peakrate {
        o.insert("peakrate".into(), json!(peak.bytes_per_sec()));
        o.insert("minburst".into(), json!(c.mtu));
    }
    match c.latency() {
        Some(lat) => o.insert("lat".into(), json!(lat.as_nanos() / 1000)),
        None => o.insert("limit".into(), json!(c.limit)),
    };
    Value::Object(o)
}

/// `tbf_parse_opt`'s words for the options given (rates exact, sizes in bytes).
pub(super) fn write(s: &TbfSpec, w: &mut Words) {
    w.option("rate", s.rate.map(RateWord));
    w.option("burst", s.burst);
    w.option("limit", s.limit);
    w.option("latency", s.latency);
    w.option("peakrate", s.peakrate.map(RateWord));
    w.option("mtu", s.mtu);
}

#[cfg(test)]
mod tests {
    //! The kernel's tc-testing cases for tbf (`tc-tests/qdiscs/tbf.json`), each under an HTB
    //! class instead of at the root, their match patterns against what htb-cli prints.

    use super::*;
    use htb_core::{Duration, LeafConfig};

    fn parse(line: &str) -> Result<TbfSpec> {
        let words = crate::words::split_words(line);
        match options(&mut Args::new(&words))? {
            LeafSpec::Tbf(s) => Ok(s),
            _ => unreachable!(),
        }
    }

    fn shown(line: &str) -> String {
        match LeafSpec::Tbf(parse(line).unwrap()).resolve().unwrap() {
            LeafConfig::Tbf(c) => options_text(&c),
            _ => unreachable!(),
        }
    }

    #[test]
    fn tc_testing_cases_print_what_tc_prints() {
        // 6430: Create TBF with default setting.
        assert_eq!(
            shown("limit 1000 burst 1500 rate 10000"),
            "rate 10Kbit burst 1500b limit 1000b "
        );
        // 0518: with mtu setting (mtu without peakrate sends nothing).
        assert_eq!(
            shown("limit 1000 burst 1500 rate 20000 mtu 2048"),
            "rate 20Kbit burst 1500b limit 1000b "
        );
        // 320a: with peakrate setting.
        let text = shown("limit 1000 burst 1500 rate 20000 mtu 1510 peakrate 30000");
        assert!(
            text.starts_with("rate 20Kbit burst 1500b peakrate 30Kbit minburst 1510b "),
            "{text}"
        );
        assert!(text.ends_with("limit 1000b "), "{text}");
        // 239b: with latency setting.
        assert_eq!(
            shown("burst 1500 rate 20000 latency 100ms"),
            "rate 20Kbit burst 1500b lat 100ms "
        );
        // f948: change with latency time (tc sends the whole block: the same as a new one).
        assert_eq!(
            shown("burst 1500 rate 20000 latency 200ms"),
            "rate 20Kbit burst 1500b lat 200ms "
        );
        // 3549: replace, linklayer ethernet — the default htbd charges by; refused all the
        // same, as htbd takes no linklayer for tbf (c975's overhead and 948c's atm neither).
        assert!(
            parse("limit 1000 burst 1500 rate 20000 linklayer ethernet")
                .unwrap_err()
                .0
                .contains("not supported")
        );
    }

    #[test]
    fn the_issues_example_prints_as_tc_show_does() {
        assert_eq!(
            shown("rate 1mbit burst 10kb latency 50ms"),
            "rate 1Mbit burst 10Kb lat 50ms "
        );
        let s = parse("rate 1mbit buffer 10kb/8 limit 20kb").unwrap();
        assert_eq!((s.burst, s.limit), (Some(10 * 1024), Some(20 * 1024)));
        assert_eq!(
            parse("rate 1mbit burst 10k lat 50ms").unwrap().latency,
            Some(Duration::from_millis(50)),
            "latency by prefix, as tc matches it"
        );
    }

    #[test]
    fn bad_options_say_what_tc_says() {
        let err = |line: &str| parse(line).unwrap_err().0;
        assert_eq!(
            err("burst 1500 limit 1000").lines().next(),
            Some("tbf: the \"rate\" parameter is mandatory.")
        );
        let all = err("peakrate 2mbit");
        for line in [
            "tbf: the \"rate\" parameter is mandatory.",
            "tbf: the \"burst\" parameter is mandatory.",
            "tbf: when \"peakrate\" is specified, \"mtu\" must also be specified.",
            "tbf: either \"limit\" or \"latency\" is required.",
            "Usage: ... tbf limit BYTES",
        ] {
            assert!(all.contains(line), "{all}");
        }
        assert_eq!(
            err("rate 1mbit burst 10k limit 5k latency 5ms"),
            "tbf: specifying both \"limit\" and \"/latency\" is not allowed"
        );
        assert_eq!(
            err("rate 1mbit burst 10k latency 5ms limit 5k"),
            "tbf: specifying both \"latency\" and \"limit\" is not allowed"
        );
        assert_eq!(
            err("rate 1mbit rate 2mbit"),
            "tbf: duplicate \"rate\" specification"
        );
        assert_eq!(
            err("rate fast"),
            "tbf: illegal value for \"rate\": \"fast\""
        );
        assert_eq!(
            err("rate 1mbit maxburst x"),
            "tbf: illegal value for \"maxburst\": \"x\""
        );
        assert!(err("rate 1mbit bogus").starts_with("tbf: unknown parameter \"bogus\""));
        // The kernel's own refusal, from the core.
        let peak_low =
            LeafSpec::Tbf(parse("rate 2mbit burst 10k limit 20k peakrate 1mbit mtu 1500").unwrap())
                .resolve()
                .unwrap_err();
        assert!(peak_low.to_string().contains("peakrate"), "{peak_low}");
    }
}
