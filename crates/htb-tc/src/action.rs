//! What a command line asks (`Action`), and the verbs of tc's objects.

use htb_ipc::{Command, Show};

use crate::args::{Result, matches, usage};

/// What one command line asks.
// A `Change` is the wire's `Command`, larger than the other variants; an action is made once
// per command line and sent, so boxing it would cost every match on `Change(Command::…)` (the
// importers use many) for no measurable gain.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read state.
    Show(Show),
    /// Change state.
    Change(Command),
    /// Live per-class rates.
    Monitor(Monitor),
    /// The data plane's counters.
    Status,
    /// Which filter and class packets to and from an address take.
    Explain(htb_ipc::Explain),
    /// The flow records htbd keeps now.
    Flows(htb_ipc::FlowsQuery),
    /// Print usage.
    Help(&'static str),
    /// Print the version.
    Version,
}

/// `monitor [dev D] [interval SECS] [count N]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Monitor {
    /// Only this interface.
    pub dev: Option<htb_ipc::InterfaceName>,
    /// Seconds between refreshes.
    pub interval: f64,
    /// Stop after this many refreshes (0: until interrupted).
    pub count: u64,
}

impl Eq for Monitor {}

/// A command's verb.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    Add,
    Change,
    Replace,
    Delete,
    Show,
}

/// The verb of `object`'s command (none: `show`).
pub(super) fn verb(word: Option<&String>, object: &str) -> Result<Verb> {
    let Some(w) = word else {
        return Ok(Verb::Show);
    };
    let w = w.as_str();
    Ok(if matches(w, "add") {
        Verb::Add
    } else if matches(w, "change") {
        Verb::Change
    } else if matches(w, "replace") {
        Verb::Replace
    } else if matches(w, "delete") {
        Verb::Delete
    } else if matches(w, "show") || matches(w, "list") || matches(w, "lst") {
        Verb::Show
    } else {
        return usage(format!(
            "Command \"{w}\" is unknown, try \"htb-cli {object} help\"."
        ));
    })
}
