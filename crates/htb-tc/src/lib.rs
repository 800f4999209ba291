//! `htb-tc`: tc's vocabulary, as htb-cli and htbd speak it. The grammar of a command line
//! ([`parse`]: `qdisc|class|filter add|change|replace|del …` to an [`htb_ipc::Command`], and
//! the `show`, `monitor`, `status`, `explain` and `flows` words of htb-cli), the writer that
//! turns a command back into those words ([`write`](mod@write)), and the leaf qdiscs' option printers
//! ([`qdiscs`]) with tc's units ([`units`]) that `show` output uses.
//!
//! Nothing here reads a file, a socket or the clock: tc's one read while parsing, a link's
//! speed for `rate N%`, is asked of the caller ([`parse::LinkSpeed`]).
//!
//! One module per iproute2 file, as iproute2 has them: `tc.c` ([`parse`]), `tc_qdisc.c`,
//! `tc_class.c`, `tc_filter.c`, `q_htb.c`, the leaf kinds' `q_*.c` (in [`qdiscs`]), `f_u32.c`,
//! `f_flower.c`, `m_action.c`, `m_gact.c`, `m_mirred.c`, `m_police.c`, `tc_stab.c`.

mod action;
pub mod args;
mod class_label;
mod explain;
mod f_flower;
mod f_u32;
mod flows;
mod link_speed;
mod m_action;
mod m_gact;
mod m_mirred;
mod m_police;
mod match_values;
mod options;
pub mod parse;
mod q_htb;
pub mod qdiscs;
mod tc_class;
mod tc_filter;
mod tc_qdisc;
mod tc_stab;
mod u32_keys;
pub mod units;
mod usage;
mod words;
pub mod write;
