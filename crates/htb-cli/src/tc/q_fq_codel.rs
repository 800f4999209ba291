//! `fq_codel` options (iproute2 `tc/q_fq_codel.c`, `fq_codel_parse_opt`).

use htb_core::{Duration, FqCodelSpec, LeafSpec};

use super::args::{Args, Result, number, size_arg, time_arg, usage};

/// Usage of `fq_codel`.
pub(super) const USAGE: &str = "\
Usage: ... fq_codel [ limit PACKETS ] [ flows NUMBER ]
                    [ memory_limit BYTES ]
                    [ target TIME ] [ interval TIME ]
                    [ quantum BYTES ] [ [no]ecn ]
                    [ ce_threshold TIME ]
                    [ drop_batch SIZE ]";

/// `fq_codel_parse_opt`. tc sends only the options given and non-zero (a zero `limit`,
/// `flows`, `quantum`, `target`, `interval` or `drop_batch` means "not given"), so `qdisc
/// change` touches nothing else.
///
/// # Errors
/// tc's usage errors.
pub(super) fn options(a: &mut Args<'_>) -> Result<LeafSpec> {
    let mut s = FqCodelSpec::default();
    let nonzero = |v: u32| (v != 0).then_some(v);
    let nonzero_time = |t: Duration| (t != Duration::ZERO).then_some(t);
    while let Some(w) = a.next() {
        match w {
            "limit" => s.limit = nonzero(number(a.value()?, "limit")?),
            "flows" => s.flows = nonzero(number(a.value()?, "flows")?),
            "quantum" => s.quantum = nonzero(number(a.value()?, "quantum")?),
            "drop_batch" => s.drop_batch = nonzero(number(a.value()?, "drop_batch")?),
            "target" => s.target = nonzero_time(time_arg(a.value()?, "target")?),
            "ce_threshold" => s.ce_threshold = Some(time_arg(a.value()?, "ce_threshold")?),
            "memory_limit" => s.memory_limit = Some(size_arg(a.value()?, "memory_limit")?),
            "interval" => s.interval = nonzero_time(time_arg(a.value()?, "interval")?),
            "ecn" => s.ecn = Some(true),
            "noecn" => s.ecn = Some(false),
            "ce_threshold_selector" => {
                return usage(
                    "ce_threshold_selector is not supported: ce_threshold marks every flow",
                );
            }
            "help" => return usage(USAGE),
            _ => return usage(format!("What is \"{w}\"?\n{USAGE}")),
        }
    }
    Ok(LeafSpec::FqCodel(s))
}
