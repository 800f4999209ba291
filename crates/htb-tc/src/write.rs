//! The writer beside the parser: a [`Command`] as the words of tc's grammar that parse back to
//! it ([`command_line`]: `qdisc add dev eth0 root handle 1: htb default 20`, no leading `tc`).
//! Each object writes its own words beside its parser (`tc_qdisc`, `tc_class`, `tc_filter`,
//! `q_htb`, the leaf kinds in `qdiscs`, `f_u32`, `f_flower`, `m_police`, `m_mirred`,
//! `tc_stab`, `class_label`), with what they share in `words`; this module picks the object's
//! writer for each command.

use htb_ipc::Command;

use crate::words::Words;
pub use crate::words::{Result, WriteError};
use crate::{tc_class, tc_filter, tc_qdisc};

/// The words of `c`, joined by spaces and quoted where a word needs it, so that
/// [`split_line`](crate::parse::split_line) and [`parse_command`](crate::parse::parse_command)
/// read back `c` itself.
///
/// # Errors
/// What the grammar has no words for ([`WriteError`]).
pub fn command_line(c: &Command) -> Result<String> {
    let mut words = Words::default();
    let w = &mut words;
    match c {
        Command::QdiscAdd(q) => tc_qdisc::write_htb("add", q, w)?,
        Command::QdiscChange(q) => tc_qdisc::write_htb("change", q, w)?,
        Command::QdiscReplace(q) => tc_qdisc::write_htb("replace", q, w)?,
        Command::MqAdd(m) => tc_qdisc::write_mq("add", m, w)?,
        Command::MqReplace(m) => tc_qdisc::write_mq("replace", m, w)?,
        Command::QdiscDelete { dev } => tc_qdisc::write_root_delete(dev, w)?,
        Command::IngressAdd { dev } => tc_qdisc::write_ingress("add", dev, w)?,
        Command::IngressDelete { dev } => tc_qdisc::write_ingress("del", dev, w)?,
        Command::LeafAdd(l) => tc_qdisc::write_leaf("add", l, w)?,
        Command::LeafChange(l) => tc_qdisc::write_leaf("change", l, w)?,
        Command::LeafReplace(l) => tc_qdisc::write_leaf("replace", l, w)?,
        Command::LeafDelete {
            dev,
            parent,
            handle,
            kind,
        } => tc_qdisc::write_leaf_delete(dev, *parent, *handle, *kind, w)?,
        Command::ClassAdd(s) => tc_class::write_class("add", s, w)?,
        Command::ClassChange(s) => tc_class::write_class("change", s, w)?,
        Command::ClassReplace(s) => tc_class::write_class("replace", s, w)?,
        Command::ClassDelete(d) => tc_class::write_delete(d, w)?,
        Command::ClassLabel(l) => tc_class::write_label(l, w)?,
        Command::FilterAdd(f) => tc_filter::write_filter("add", f, w)?,
        Command::FilterChange(f) => tc_filter::write_filter("change", f, w)?,
        Command::FilterReplace(f) => tc_filter::write_filter("replace", f, w)?,
        Command::FilterDelete(d) => tc_filter::write_delete(d, w)?,
        // The config file's `split = …`: no tc word is invented for it.
        Command::ClassSplit(_) => {
            return Err(WriteError::NotTc(
                "a subtree split over htbd's workers (the config file's split = …)",
            ));
        }
    }
    Ok(words.into_line())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// htbd's split choice has no words in tc's grammar, and none are invented for it.
    #[test]
    fn a_split_choice_has_no_tc_words() {
        let c = Command::ClassSplit(htb_ipc::SplitSpec {
            dev: "eth0".parse().unwrap(),
            id: htb_core::ClassId::new(1, 0x10),
            choice: Some(htb_core::SplitChoice::Split),
        });
        let e = command_line(&c).unwrap_err();
        assert!(matches!(e, WriteError::NotTc(_)), "{e}");
        assert!(
            e.to_string()
                .starts_with("tc has no words for a subtree split")
        );
    }
}
