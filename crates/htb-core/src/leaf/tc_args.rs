//! A leaf's options as tc's command line takes them (`limit 10240 flows 1024 …`), every one
//! given so that a kernel qdisc made from them runs as this one whatever the kernel's defaults:
//! what `htbd --print-tc` writes after the kind's name. Each kind writes its own words, next
//! to its spec (`LeafConfig::write_tc_args`), with [`option`].

use core::fmt;

/// ` KEY VALUE` when `value` is given.
pub(super) fn option(
    f: &mut fmt::Formatter<'_>,
    key: &str,
    value: Option<impl fmt::Display>,
) -> fmt::Result {
    match value {
        Some(v) => write!(f, " {key} {v}"),
        None => Ok(()),
    }
}
