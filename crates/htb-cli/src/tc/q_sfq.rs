//! `sfq` options (iproute2 `tc/q_sfq.c`, `sfq_parse_opt`).

use htb_core::{LeafSpec, SfqSpec};

use super::args::{Args, Result, number, size_arg, usage};

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
