//! The leaf qdisc kinds htb-tc speaks, in one table: iproute2's `struct qdisc_util` (a kind's
//! `parse_qopt` and `print_qopt`, one file per kind), looked up by name as `get_qdisc_kind`
//! does. What lists the kinds (dispatch, the usage text, the refusals) is made from
//! [`LeafKind::ALL`] through this table, and each match below is over every kind, so a kind
//! added to the core does not compile until its file is named here.

mod q_cake;
mod q_fifo;
mod q_fq_codel;
mod q_sfq;
mod q_tbf;

use htb_core::{LeafConfig, LeafKind, LeafSpec};
use htb_ipc::LeafQdiscStats;
use serde_json::{Map, Value};

use crate::args::{Args, Result};
use crate::words::{self, Words};

/// One kind's `qdisc_util`: what reads its options.
#[derive(Clone, Copy)]
pub(crate) struct QdiscUtil {
    /// `parse_qopt`: the words after the kind's name, to the core's spec.
    pub(crate) parse: fn(&mut Args<'_>) -> Result<LeafSpec>,
}

/// The `qdisc_util` of `kind`.
fn util(kind: LeafKind) -> QdiscUtil {
    let parse: fn(&mut Args<'_>) -> Result<LeafSpec> = match kind {
        LeafKind::Pfifo => q_fifo::pfifo,
        LeafKind::Bfifo => q_fifo::bfifo,
        LeafKind::Sfq => q_sfq::options,
        LeafKind::FqCodel => q_fq_codel::options,
        LeafKind::Cake => q_cake::options,
        LeafKind::Tbf => q_tbf::options,
    };
    QdiscUtil { parse }
}

/// The kind named `name` and its `qdisc_util` (`get_qdisc_kind`), or `None` for a name no
/// leaf kind has.
pub(crate) fn by_name(name: &str) -> Option<QdiscUtil> {
    LeafKind::from_name(name).map(util)
}

/// The leaf kinds' names as usage texts list them: `pfifo | bfifo | … | cake`.
pub(crate) fn usage_list() -> String {
    LeafKind::list(" | ", " | ")
}

/// The leaf kinds' names as refusals list them: `pfifo, bfifo, … and cake`.
pub(crate) fn refusal_list() -> String {
    LeafKind::list(", ", ", ")
}

/// `print_qopt`: the options after `parent 1:10 ` as tc prints them.
#[must_use]
pub fn options_text(config: &LeafConfig, details: bool) -> String {
    match config {
        LeafConfig::Pfifo { limit } => q_fifo::options_text(*limit, false),
        LeafConfig::Bfifo { limit } => q_fifo::options_text(*limit, true),
        LeafConfig::Sfq(c) => q_sfq::options_text(c, details),
        LeafConfig::FqCodel(c) => q_fq_codel::options_text(c),
        LeafConfig::Cake(c) => q_cake::options_text(c),
        LeafConfig::Tbf(c) => q_tbf::options_text(c),
    }
}

/// The options object under `-j`.
#[must_use]
pub fn options_json(config: &LeafConfig, details: bool) -> Value {
    match config {
        LeafConfig::Pfifo { limit } | LeafConfig::Bfifo { limit } => q_fifo::options_json(*limit),
        LeafConfig::Sfq(c) => q_sfq::options_json(c, details),
        LeafConfig::FqCodel(c) => q_fq_codel::options_json(c),
        LeafConfig::Cake(c) => q_cake::options_json(c),
        LeafConfig::Tbf(c) => q_tbf::options_json(c),
    }
}

/// `print_xstats`: the kind's own statistics lines (fq_codel's and cake's; none for the
/// others, whose statistics carry none).
#[must_use]
pub fn xstats_text(stats: &LeafQdiscStats) -> String {
    if let Some(c) = &stats.cake {
        return q_cake::xstats_text(c);
    }
    stats
        .fq_codel
        .as_ref()
        .map(q_fq_codel::xstats_text)
        .unwrap_or_default()
}

/// The same under `-j`: keys of the qdisc object.
pub fn xstats_json(stats: &LeafQdiscStats, o: &mut Map<String, Value>) {
    if let Some(c) = &stats.cake {
        q_cake::xstats_json(c, o);
    }
    if let Some(s) = &stats.fq_codel {
        q_fq_codel::xstats_json(s, o);
    }
}

/// A leaf spec's options as its kind's `parse_qopt` reads them back (the kind's name is
/// `tc_qdisc`'s): each kind writes its own, beside its parser.
///
/// # Errors
/// Options the kind's words cannot give.
pub(crate) fn write(spec: &LeafSpec, w: &mut Words) -> words::Result<()> {
    match spec {
        LeafSpec::Pfifo { limit } | LeafSpec::Bfifo { limit } => q_fifo::write(*limit, w),
        LeafSpec::Sfq(s) => q_sfq::write(s, w),
        LeafSpec::FqCodel(s) => q_fq_codel::write(s, w),
        LeafSpec::Cake(s) => return q_cake::write(s, w),
        LeafSpec::Tbf(s) => q_tbf::write(s, w),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_reached_by_its_name_and_parses_its_defaults() {
        for kind in LeafKind::ALL {
            let util = by_name(kind.name()).unwrap();
            // A kind whose options have no defaults (tbf's rate) says which it needs.
            match (util.parse)(&mut Args::new(&[])) {
                Ok(spec) => assert_eq!(spec.kind(), kind),
                Err(e) => assert!(e.0.contains(kind.name()), "{kind}: {}", e.0),
            }
        }
        assert!(by_name("red").is_none());
        assert!(usage_list().starts_with("pfifo | bfifo | sfq"));
    }
}
