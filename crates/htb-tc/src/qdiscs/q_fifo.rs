//! `pfifo` and `bfifo` (iproute2 `tc/q_fifo.c`): their option (`fifo_parse_opt`) and its
//! printer (`fifo_print_opt`).

use htb_core::units::DisplaySize;
use htb_core::{LeafKind, LeafSpec};
use serde_json::{Value, json};

use crate::args::{Args, Result, size_arg, usage};
use crate::words::Words;

/// Usage of `pfifo`/`bfifo`.
pub(super) const USAGE: &str = "Usage: ... <[p|b]fifo | pfifo_head_drop> [ limit NUMBER ]";

/// `pfifo`'s `fifo_parse_opt`.
pub(super) fn pfifo(a: &mut Args<'_>) -> Result<LeafSpec> {
    options(a, LeafKind::Pfifo)
}

/// `bfifo`'s `fifo_parse_opt`.
pub(super) fn bfifo(a: &mut Args<'_>) -> Result<LeafSpec> {
    options(a, LeafKind::Bfifo)
}

/// `fifo_parse_opt`: `limit` in packets (`pfifo`) or bytes (`bfifo`); without it the
/// qdisc gets the device's default (`txqueuelen`, times the MTU for `bfifo`).
///
/// # Errors
/// tc's usage errors.
fn options(a: &mut Args<'_>, kind: LeafKind) -> Result<LeafSpec> {
    let mut limit = None;
    while let Some(w) = a.next() {
        if w == "limit" {
            let v = a.value()?;
            limit = Some(size_arg(v, "limit").or_else(|_| {
                usage(format!(
                    "{}: Illegal value for \"limit\": \"{v}\"",
                    kind.name()
                ))
            })?);
        } else if w == "help" {
            return usage(USAGE);
        } else {
            return usage(format!(
                "{}: unknown parameter \"{w}\"\n{USAGE}",
                kind.name()
            ));
        }
    }
    Ok(if kind == LeafKind::Bfifo {
        LeafSpec::Bfifo { limit }
    } else {
        LeafSpec::Pfifo { limit }
    })
}

/// `fifo_print_opt`: `limit 1000p` (`pfifo`) or `limit 30Kb` (`bfifo`).
pub(super) fn options_text(limit: u32, bytes: bool) -> String {
    if bytes {
        format!("limit {}", DisplaySize(u64::from(limit)))
    } else {
        format!("limit {limit}p")
    }
}

/// The same under `-j`.
pub(super) fn options_json(limit: u32) -> Value {
    json!({ "limit": limit })
}

/// `fifo_parse_opt`'s words: `limit N` when given.
pub(super) fn write(limit: Option<u32>, w: &mut Words) {
    w.option("limit", limit);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_print_as_tc_6_1() {
        assert_eq!(options_text(1000, false), "limit 1000p");
        assert_eq!(options_text(30 * 1024, true), "limit 30Kb");
        assert_eq!(options_json(5)["limit"], 5);
    }
}
