//! Errors that point into the TOML text.

use std::fmt;
use std::ops::Range;

/// A problem in a config or scenario file, located by line, column and key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// The key at that place, as a path like `class[2].rate`, when one can be named.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}: ", self.line, self.column)?;
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl ConfigError {
    /// An error at byte `offset` of `text`.
    #[must_use]
    pub fn at(text: &str, offset: usize, message: String) -> Self {
        let offset = offset.min(text.len());
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = text[line_start..offset].chars().count() + 1;
        Self {
            line,
            column,
            key: key_path(text, offset),
            message,
        }
    }

    /// An error about the value spanned by `span` in `text`.
    #[must_use]
    pub fn spanned(text: &str, span: &Range<usize>, message: impl Into<String>) -> Self {
        Self::at(text, span.start, message.into())
    }
}

/// A value with the byte range it came from, so later checks can point at it.
pub type Located<T> = toml::Spanned<T>;

/// Names the key at `offset`: the enclosing table header, with the index of each array of tables
/// on its path, and the key of the `key = value` line, e.g. `interface[1].class[2].rate`. Best
/// effort: inline tables and multi-line values name the nearest key.
fn key_path(text: &str, offset: usize) -> Option<String> {
    // Current index of every array of tables; a new element resets its children's counters.
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut table: Option<String> = None;
    let mut line_key = None;
    let mut pos = 0;
    let path_of = |name: &str, index: &std::collections::HashMap<String, usize>| {
        let mut path = String::new();
        let mut prefix = String::new();
        for part in name.split('.') {
            if !prefix.is_empty() {
                prefix.push('.');
                path.push('.');
            }
            prefix.push_str(part.trim());
            path.push_str(part.trim());
            if let Some(i) = index.get(&prefix) {
                path.push_str(&format!("[{i}]"));
            }
        }
        path
    };
    for line in text.split_inclusive('\n') {
        let start = pos;
        pos += line.len();
        if start > offset {
            break;
        }
        let trimmed = line.trim();
        if let Some(name) = trimmed
            .strip_prefix("[[")
            .and_then(|t| t.split("]]").next())
        {
            let name = name.trim().to_owned();
            let next = index.get(&name).map_or(0, |i| i + 1);
            index.retain(|k, _| !k.starts_with(&format!("{name}.")));
            index.insert(name.clone(), next);
            table = Some(path_of(&name, &index));
            line_key = None;
        } else if let Some(name) = trimmed.strip_prefix('[').and_then(|t| t.split(']').next()) {
            table = Some(path_of(name.trim(), &index));
            line_key = None;
        } else if let Some((key, _)) = trimmed.split_once('=') {
            let key = key.trim();
            if !key.is_empty() && !key.starts_with('#') {
                line_key = Some(key.trim_matches('"').to_owned());
            }
        }
        if offset < pos {
            break;
        }
        if !trimmed.contains('=') {
            line_key = None;
        }
    }
    match (table, line_key) {
        (Some(t), Some(k)) => Some(format!("{t}.{k}")),
        (None, Some(k)) => Some(k),
        (Some(t), None) => Some(t),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_line_column_and_key() {
        let text =
            "duration = \"1s\"\n[[class]]\nid = \"1:1\"\n[[class]]\nid = \"1:2\"\nrate = \"bad\"\n";
        let offset = text.find("\"bad\"").unwrap();
        let e = ConfigError::at(text, offset, "invalid rate".into());
        assert_eq!((e.line, e.column), (6, 8));
        assert_eq!(e.key.as_deref(), Some("class[1].rate"));
        assert_eq!(
            e.to_string(),
            "line 6, column 8: class[1].rate: invalid rate"
        );
        let e = ConfigError::at(text, 0, "x".into());
        assert_eq!(e.key.as_deref(), Some("duration"));
        let nested = "[[interface]]\nname = \"a\"\n[[interface]]\nname = \"b\"\n[[interface.class]]\nid = 1\n\
                      [[interface.class]]\nrate = \"x\"\n[interface.qdisc]\nr2q = 1\n";
        let at =
            |needle: &str| ConfigError::at(nested, nested.find(needle).unwrap(), String::new()).key;
        assert_eq!(at("\"x\"").as_deref(), Some("interface[1].class[1].rate"));
        assert_eq!(at("r2q").as_deref(), Some("interface[1].qdisc.r2q"));
    }
}

/// A value that does not parse: which kind of value it should have been, the text, and why
/// (the parser's own error as its source).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// A rate (`"100mbit"`).
    #[error("invalid rate {text:?}: {source} (e.g. \"100mbit\", \"1.5gbit\", \"800kbit\")")]
    Rate {
        /// As given.
        text: String,
        /// Why.
        source: htb_core::units::UnitError,
    },
    /// A size (`"15k"`).
    #[error("invalid size {text:?}: {source} (e.g. \"1600\", \"15k\", \"64kb\")")]
    Size {
        /// As given.
        text: String,
        /// Why.
        source: htb_core::units::UnitError,
    },
    /// A time (`"250ms"`).
    #[error("invalid time {text:?}: {source} (e.g. \"10s\", \"250ms\", \"64us\")")]
    Time {
        /// As given.
        text: String,
        /// Why.
        source: htb_core::units::UnitError,
    },
    /// A class id (`"1:20"`).
    #[error("invalid class id {text:?}: {source}")]
    ClassId {
        /// As given.
        text: String,
        /// Why.
        source: htb_core::ClassIdError,
    },
    /// An IP protocol.
    #[error("invalid protocol {0:?}: a name like tcp/udp/icmp or 0-255")]
    Protocol(String),
    /// A DSCP.
    #[error("invalid dscp {0:?}: 0-63 or a name like ef, cs1, af21")]
    Dscp(String),
    /// A VLAN id.
    #[error("invalid vlan {0:?}: 0-4094")]
    Vlan(String),
    /// A policer's verdict.
    #[error("invalid police verdict {0:?}: reclassify, drop, continue, pipe or ok")]
    PoliceVerdict(String),
    /// A policer's burst or mtu over what tc keeps.
    #[error("police {0}: at most 4 GiB")]
    PoliceTooLarge(&'static str),
    /// A policer tc refuses.
    #[error("police: {0}")]
    Police(#[source] htb_classify::PoliceError),
}
