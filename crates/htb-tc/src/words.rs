//! What the writers of each object share (`write` dispatches to them): the line being built,
//! its quoting (as [`split_line`](crate::parse::split_line) reads it back), tc's numbers written
//! exactly, and why a command has no words.

use core::fmt::{self, Write as _};

use htb_core::Rate;
use htb_ipc::PortRange;

/// Why a command cannot be written as tc's words (nothing in the grammar says it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// A text holding both kinds of quote, or a line break: a tc batch line cannot carry it.
    #[error("{0:?} holds both kinds of quote or a line break: a tc command line cannot carry it")]
    Unquotable(String),
    /// A port range u32 cannot match with one value and mask (not a power-of-two block).
    #[error("ports {0} are no value/mask block: u32 needs one filter per block")]
    PortRange(PortRange),
    /// A part of a filter its kind has no words for.
    #[error("a {kind} filter cannot say {what}")]
    NotInKind {
        /// `u32` or `flower`.
        kind: &'static str,
        /// What it cannot say.
        what: &'static str,
    },
    /// A qdisc handle with a minor (tc's `get_qdisc_handle` reads a major only).
    #[error("qdisc handle {0} has a minor: tc writes a qdisc's handle as MAJOR:")]
    QdiscHandle(htb_core::ClassId),
    /// Options a leaf kind's words cannot give (cake's target without its rtt or preset).
    #[error("{kind}: {what}")]
    LeafOptions {
        /// The kind.
        kind: &'static str,
        /// What cannot be said.
        what: &'static str,
    },
    /// A command of htbd's own that tc's grammar has no words for.
    #[error("tc has no words for {0}")]
    NotTc(&'static str),
}

/// A write result.
pub type Result<T> = core::result::Result<T, WriteError>;

/// A command line being written: words with a space between them.
#[derive(Debug, Default)]
pub(crate) struct Words {
    line: String,
}

impl Words {
    /// The line written.
    pub(crate) fn into_line(self) -> String {
        self.line
    }

    /// One word that needs no quoting (a keyword, a number, an id).
    pub(crate) fn word(&mut self, word: impl fmt::Display) {
        if !self.line.is_empty() {
            self.line.push(' ');
        }
        let _ = write!(self.line, "{word}");
    }

    /// `key value`, neither needing quotes.
    pub(crate) fn pair(&mut self, key: &str, value: impl fmt::Display) {
        self.word(key);
        self.word(value);
    }

    /// `key value` when `value` is given.
    pub(crate) fn option(&mut self, key: &str, value: Option<impl fmt::Display>) {
        if let Some(v) = value {
            self.pair(key, v);
        }
    }

    /// A text from outside the grammar (a name), quoted where `split_line` needs it.
    ///
    /// # Errors
    /// [`WriteError::Unquotable`].
    pub(crate) fn text(&mut self, text: &str) -> Result<()> {
        let plain = !text.is_empty()
            && !text.starts_with('\'')
            && !text.contains(|c: char| c.is_whitespace() || c == '"' || c == '#');
        if plain {
            self.word(text);
        } else if text.contains(['\n', '\r']) {
            return Err(WriteError::Unquotable(text.to_owned()));
        } else if !text.contains('"') {
            self.word(format_args!("\"{text}\""));
        } else if !text.contains('\'') {
            self.word(format_args!("'{text}'"));
        } else {
            return Err(WriteError::Unquotable(text.to_owned()));
        }
        Ok(())
    }

    /// Words already written and quoted by the one writer of their concept (a label's).
    pub(crate) fn words(&mut self, words: &str) {
        if !words.is_empty() {
            self.word(words);
        }
    }

    /// `dev NAME`: the one place an interface name is written.
    ///
    /// # Errors
    /// A name no tc line can carry.
    pub(crate) fn dev(&mut self, dev: &str) -> Result<()> {
        self.word("dev");
        self.text(dev)
    }
}

/// A rate as a command takes it, exactly (tc's `get_rate`): the largest decimal unit that
/// keeps it whole (`100mbit`, `1500kbit`, `1234567bit`); tc's printed form rounds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RateWord(pub(crate) Rate);

impl fmt::Display for RateWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = self.0.bits_per_sec();
        for (unit, name) in [
            (1_000_000_000, "gbit"),
            (1_000_000, "mbit"),
            (1_000, "kbit"),
        ] {
            if bits != 0 && bits.is_multiple_of(unit) {
                return write!(f, "{}{name}", bits / unit);
            }
        }
        write!(f, "{bits}bit")
    }
}

/// A command line cut at its blanks, as the parsers' tests hand it over (no quoting: tests of
/// quoting go through `args::split_line`).
#[cfg(test)]
pub(crate) fn split_words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}
