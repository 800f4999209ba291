//! A leaf's options as tc's command line takes them (`limit 10240 flows 1024 …`), every one
//! given so that a kernel qdisc made from them runs as this one whatever the kernel's defaults:
//! what `htbd --print-tc` writes after the kind's name. Each kind writes its own words, next
//! to its spec ([`LeafConfig::write_tc_args`]).

use core::fmt;

use super::spec::LeafConfig;

/// [`LeafConfig::tc_args`]: each option as ` KEYWORD VALUE` (a space before each).
#[derive(Clone, Copy, Debug)]
pub struct TcArgs<'a>(pub(super) &'a LeafConfig);

impl fmt::Display for TcArgs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.write_tc_args(f)
    }
}

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
