//! `sfq` (iproute2 `tc/q_sfq.c`): its options (`sfq_parse_opt`) and their printer
//! (`sfq_print_opt`).

use std::fmt::Write as _;

use htb_core::units::DisplaySize;
use htb_core::{LeafSpec, SfqConfig, SfqSpec};
use serde_json::{Map, Value, json};

use crate::args::{Args, Result, number, size_arg, usage};
use crate::words::Words;

/// Usage of `sfq`.
pub(super) const USAGE: &str = "\
Usage: ... sfq [ limit NUMBER ] [ perturb SECS ] [ quantum BYTES ]
               [ divisor NUMBER ] [ flows NUMBER] [ depth NUMBER ]
               [ headdrop ]";

/// `sfq_parse_opt`. tc sends the whole option block: an option not given is 0 (the kernel's
/// default, or "off" for `perturb`).
///
/// # Errors
/// tc's usage errors; SFQ's RED options are refused (not implemented).
pub(super) fn options(a: &mut Args<'_>) -> Result<LeafSpec> {
    let mut s = SfqSpec::default();
    let nonzero = |v: u32| (v != 0).then_some(v);
    while let Some(w) = a.next() {
        match w {
            // tc's own message says "limit" here.
            "quantum" => s.quantum = nonzero(size_arg(a.value()?, "limit")?),
            "perturb" => {
                let v = a.value()?;
                let secs: i64 = v.parse().or_else(|_| usage("Illegal \"perturb\""))?;
                s.perturb = Some(u32::try_from(secs).or_else(|_| usage("Illegal \"perturb\""))?);
            }
            "limit" => {
                let v = number(a.value()?, "limit")?;
                if v < 2 {
                    return usage("Illegal \"limit\", must be > 1");
                }
                s.limit = Some(v);
            }
            "divisor" => s.divisor = nonzero(number(a.value()?, "divisor")?),
            "flows" => s.flows = nonzero(number(a.value()?, "flows")?),
            // tc's own message says "flows" here.
            "depth" => s.depth = nonzero(number(a.value()?, "flows")?),
            "headdrop" => s.headdrop = true,
            "redflowlimit" | "min" | "max" | "burst" | "avpkt" | "probability" | "ecn"
            | "harddrop" => {
                return usage(format!(
                    "sfq's RED mode (\"{w}\") is not supported: use fq_codel for AQM"
                ));
            }
            "help" => return usage(USAGE),
            _ => return usage(format!("What is \"{w}\"?\n{USAGE}")),
        }
    }
    Ok(LeafSpec::Sfq(s))
}

/// `sfq_print_opt`, as tc 6.1 prints it (a space after each option).
pub(super) fn options_text(c: &SfqConfig, details: bool) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "limit {}p quantum {} depth {} ",
        c.limit,
        DisplaySize(u64::from(c.quantum)),
        c.depth
    );
    if c.headdrop {
        out.push_str("headdrop ");
    }
    if details {
        let _ = write!(out, "flows {} ", c.flows);
    }
    let _ = write!(out, "divisor {} ", c.divisor);
    if c.perturb != 0 {
        let _ = write!(out, "perturb {}sec ", c.perturb);
    }
    out
}

/// The same under `-j`.
pub(super) fn options_json(c: &SfqConfig, details: bool) -> Value {
    let mut o = Map::new();
    o.insert("limit".into(), json!(c.limit));
    o.insert("quantum".into(), json!(c.quantum));
    o.insert("depth".into(), json!(c.depth));
    if c.headdrop {
        o.insert("headdrop".into(), json!(true));
    }
    if details {
        o.insert("flows".into(), json!(c.flows));
    }
    o.insert("divisor".into(), json!(c.divisor));
    if c.perturb != 0 {
        o.insert("perturb".into(), json!(c.perturb));
    }
    Value::Object(o)
}

/// `sfq_parse_opt`'s words for the options given.
pub(super) fn write(s: &SfqSpec, w: &mut Words) {
    w.option("limit", s.limit);
    w.option("quantum", s.quantum);
    w.option("perturb", s.perturb);
    w.option("divisor", s.divisor);
    w.option("flows", s.flows);
    w.option("depth", s.depth);
    if s.headdrop {
        w.word("headdrop");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::LeafConfig;

    #[test]
    fn options_print_as_tc_6_1() {
        let LeafConfig::Sfq(sfq) = LeafSpec::Sfq(SfqSpec {
            perturb: Some(10),
            ..SfqSpec::default()
        })
        .resolve()
        .unwrap() else {
            panic!("sfq resolves to sfq")
        };
        assert_eq!(
            options_text(&sfq, false),
            "limit 127p quantum 1514b depth 127 divisor 1024 perturb 10sec "
        );
        assert_eq!(
            options_text(&sfq, true),
            "limit 127p quantum 1514b depth 127 flows 128 divisor 1024 perturb 10sec "
        );
        assert_eq!(options_json(&sfq, false)["perturb"], 10);
    }
}
