//! `pfifo` and `bfifo` options (iproute2 `tc/q_fifo.c`, `fifo_parse_opt`).

use htb_core::{LeafKind, LeafSpec};

use super::args::{Args, Result, size_arg, usage};

/// Usage of `pfifo`/`bfifo`.
pub(super) const USAGE: &str = "Usage: ... <[p|b]fifo | pfifo_head_drop> [ limit NUMBER ]";

/// `fifo_parse_opt`: `limit` in packets (`pfifo`) or bytes (`bfifo`); without it the
/// qdisc gets the device's default (`txqueuelen`, times the MTU for `bfifo`).
///
/// # Errors
/// tc's usage errors.
pub(super) fn options(a: &mut Args<'_>, kind: LeafKind) -> Result<LeafSpec> {
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
