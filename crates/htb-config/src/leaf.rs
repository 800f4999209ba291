//! `leaf = …`: the queue discipline of a leaf class (tc's `qdisc add dev D parent 1:10 [handle
//! 10:] KIND OPTIONS`), in a `[[class]]` or, in `[qdisc]`, as the default for every leaf:
//!
//! ```toml
//! [qdisc]
//! leaf = "pfifo"                                    # every leaf without its own
//! [[class]]
//! id = "1:10"
//! rate = "10mbit"
//! leaf = { kind = "fq_codel", target = "10ms", ecn = false, handle = "10:" }
//! ```
//!
//! Options are tc's, per kind: `pfifo` `limit` (packets); `bfifo` `limit` (bytes); `sfq`
//! `limit quantum perturb divisor flows depth headdrop`; `fq_codel` `limit flows target interval
//! quantum ecn ce_threshold memory_limit drop_batch`.

use std::fmt;
use std::fmt::Write as _;

use htb_core::{FqCodelSpec, LeafConfig, LeafKind, LeafSpec, SfqSpec};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::values::{ClassIdValue, SizeValue, TimeValue};

/// A leaf discipline in a table: `{ kind = "sfq", perturb = 10 }`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LeafTable {
    /// `pfifo`, `bfifo`, `sfq` or `fq_codel`.
    pub kind: String,
    /// The qdisc handle tc shows (`"10:"`); assigned when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<ClassIdValue>,
    /// Packets (`bfifo`: bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<SizeValue>,
    /// `sfq`, `fq_codel`: flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<u32>,
    /// `fq_codel`: CoDel target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<TimeValue>,
    /// `fq_codel`: CoDel interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<TimeValue>,
    /// `sfq`, `fq_codel`: DRR quantum in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantum: Option<SizeValue>,
    /// `fq_codel`: ECN marking (default on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn: Option<bool>,
    /// `fq_codel`: CE-marking threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ce_threshold: Option<TimeValue>,
    /// `fq_codel`: byte limit of the buffers held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<SizeValue>,
    /// `fq_codel`: packets dropped at once over the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_batch: Option<u32>,
    /// `sfq`: seconds between hash re-keyings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perturb: Option<u32>,
    /// `sfq`: hash buckets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divisor: Option<u32>,
    /// `sfq`: packets per flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// `sfq`: drop from the head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headdrop: Option<bool>,
}

/// `leaf = "fq_codel"` (the kind with its defaults) or `leaf = { kind = …, … }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct LeafSection(pub LeafTable);

impl<'de> Deserialize<'de> for LeafSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LeafSection;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a leaf qdisc: \"fq_codel\", or a table like { kind = \"sfq\" }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LeafSection, E> {
                Ok(LeafSection(LeafTable {
                    kind: v.to_owned(),
                    ..LeafTable::default()
                }))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LeafSection, A::Error> {
                LeafTable::deserialize(de::value::MapAccessDeserializer::new(map)).map(LeafSection)
            }
        }
        d.deserialize_any(V)
    }
}

/// A leaf discipline of a class, resolved: its tc handle (if given) and parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafDef {
    /// The qdisc handle's major (`10:` → 0x10), when given.
    pub handle: Option<u16>,
    /// Parameters with the kernel's defaults filled in.
    pub config: LeafConfig,
}

/// Which options each kind takes.
fn allowed(kind: LeafKind) -> &'static [&'static str] {
    match kind {
        LeafKind::Pfifo | LeafKind::Bfifo => &["limit"],
        LeafKind::Sfq => &[
            "limit", "quantum", "perturb", "divisor", "flows", "depth", "headdrop",
        ],
        LeafKind::FqCodel => &[
            "limit",
            "flows",
            "target",
            "interval",
            "quantum",
            "ecn",
            "ce_threshold",
            "memory_limit",
            "drop_batch",
        ],
    }
}

/// What is wrong with a `leaf = …` section.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeafSectionError {
    /// `cake`: refused by name, with the reason.
    #[error(
        "cake is not supported yet (its shaper, diffserv tins and host isolation are a project \
         of their own): use fq_codel"
    )]
    Cake,
    /// A kind that does not exist here.
    #[error("unknown leaf qdisc {0:?}: pfifo, bfifo, sfq or fq_codel")]
    UnknownKind(String),
    /// An option of another kind.
    #[error("{kind} has no option {option:?} (it takes: {})", allowed(*.kind).join(", "))]
    NoSuchOption {
        /// The kind given.
        kind: LeafKind,
        /// The option it does not take.
        option: &'static str,
    },
    /// A number past 32 bits.
    #[error("{option} {value} is too large")]
    TooLarge {
        /// The option.
        option: &'static str,
        /// Its value.
        value: u64,
    },
    /// A value the discipline refuses (the core's check, with tc's ranges).
    #[error(transparent)]
    Refused(#[from] htb_core::LeafError),
    /// `handle` that is a class id, not a qdisc's `10:`.
    #[error("handle {0} is not a qdisc handle like \"10:\"")]
    NotAQdiscHandle(htb_core::ClassId),
}

/// The kind named `name`, or why not.
///
/// # Errors
/// An unknown name, with what is supported (and why `cake` is not).
pub fn leaf_kind(name: &str) -> Result<LeafKind, LeafSectionError> {
    match LeafKind::from_name(name) {
        Some(kind) => Ok(kind),
        None if name == "cake" => Err(LeafSectionError::Cake),
        None => Err(LeafSectionError::UnknownKind(name.to_owned())),
    }
}

fn u32_of(v: Option<SizeValue>, option: &'static str) -> Result<Option<u32>, LeafSectionError> {
    v.map(|s| u32::try_from(s.0).map_err(|_| LeafSectionError::TooLarge { option, value: s.0 }))
        .transpose()
}

impl LeafTable {
    fn given(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut add = |present: bool, name| {
            if present {
                v.push(name);
            }
        };
        add(self.limit.is_some(), "limit");
        add(self.flows.is_some(), "flows");
        add(self.target.is_some(), "target");
        add(self.interval.is_some(), "interval");
        add(self.quantum.is_some(), "quantum");
        add(self.ecn.is_some(), "ecn");
        add(self.ce_threshold.is_some(), "ce_threshold");
        add(self.memory_limit.is_some(), "memory_limit");
        add(self.drop_batch.is_some(), "drop_batch");
        add(self.perturb.is_some(), "perturb");
        add(self.divisor.is_some(), "divisor");
        add(self.depth.is_some(), "depth");
        add(self.headdrop.is_some(), "headdrop");
        v
    }

    /// The options as the core's spec.
    ///
    /// # Errors
    /// An unknown kind, an option the kind does not take, a value out of range.
    pub fn spec(&self) -> Result<LeafSpec, LeafSectionError> {
        let kind = leaf_kind(&self.kind)?;
        if let Some(option) = self
            .given()
            .into_iter()
            .find(|o| !allowed(kind).contains(o))
        {
            return Err(LeafSectionError::NoSuchOption { kind, option });
        }
        let limit = u32_of(self.limit, "limit")?;
        Ok(match kind {
            LeafKind::Pfifo => LeafSpec::Pfifo { limit },
            LeafKind::Bfifo => LeafSpec::Bfifo { limit },
            LeafKind::Sfq => LeafSpec::Sfq(SfqSpec {
                limit,
                quantum: u32_of(self.quantum, "quantum")?,
                perturb: self.perturb,
                divisor: self.divisor,
                flows: self.flows,
                depth: self.depth,
                headdrop: self.headdrop.unwrap_or(false),
            }),
            LeafKind::FqCodel => LeafSpec::FqCodel(FqCodelSpec {
                limit,
                flows: self.flows,
                target: self.target.map(|t| t.0),
                interval: self.interval.map(|t| t.0),
                quantum: u32_of(self.quantum, "quantum")?,
                ecn: self.ecn,
                ce_threshold: self.ce_threshold.map(|t| t.0),
                memory_limit: u32_of(self.memory_limit, "memory_limit")?,
                drop_batch: self.drop_batch,
            }),
        })
    }

    /// Resolved with the kernel's defaults, and the handle checked.
    ///
    /// # Errors
    /// As [`spec`](Self::spec), a refused value, or a handle that is not a qdisc handle.
    pub fn resolve(&self) -> Result<LeafDef, LeafSectionError> {
        let config = self.spec()?.resolve()?;
        let handle = match self.handle {
            None => None,
            Some(ClassIdValue(id)) if id.is_qdisc() && id.major() != 0 => Some(id.major()),
            Some(ClassIdValue(id)) => return Err(LeafSectionError::NotAQdiscHandle(id)),
        };
        Ok(LeafDef { handle, config })
    }
}

/// A leaf as an inline TOML table that [`LeafSection`] reads back to the same [`LeafDef`]
/// (what saved states write): every option given.
#[must_use]
pub fn leaf_toml(def: &LeafDef) -> String {
    let mut out = format!("{{ kind = \"{}\"", def.config.kind().name());
    if let Some(h) = def.handle {
        let _ = write!(out, ", handle = \"{h:x}:\"");
    }
    let mut num = |key: &str, v: Option<u32>| {
        if let Some(v) = v {
            let _ = write!(out, ", {key} = {v}");
        }
    };
    match def.config.to_spec() {
        LeafSpec::Pfifo { limit } | LeafSpec::Bfifo { limit } => num("limit", limit),
        LeafSpec::Sfq(s) => {
            num("limit", s.limit);
            num("quantum", s.quantum);
            num("perturb", s.perturb);
            num("divisor", s.divisor);
            num("flows", s.flows);
            num("depth", s.depth);
            if s.headdrop {
                out.push_str(", headdrop = true");
            }
        }
        LeafSpec::FqCodel(s) => {
            num("limit", s.limit);
            num("flows", s.flows);
            num("quantum", s.quantum);
            num("memory_limit", s.memory_limit);
            num("drop_batch", s.drop_batch);
            let mut time = |key: &str, v: Option<htb_core::Duration>| {
                if let Some(v) = v {
                    let _ = write!(out, ", {key} = \"{v}\"");
                }
            };
            time("target", s.target);
            time("interval", s.interval);
            time("ce_threshold", s.ce_threshold);
            if let Some(ecn) = s.ecn {
                let _ = write!(out, ", ecn = {ecn}");
            }
        }
    }
    out.push_str(" }");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::{Duration, FqCodelConfig, SfqConfig};

    #[derive(Deserialize)]
    struct Doc {
        leaf: LeafSection,
    }

    fn parse(text: &str) -> Result<LeafDef, String> {
        let doc: Doc = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        doc.leaf.0.resolve().map_err(|e| e.to_string())
    }

    #[test]
    fn a_kind_alone_or_a_table() {
        assert_eq!(
            parse("leaf = \"pfifo\"").unwrap().config,
            LeafConfig::Pfifo { limit: 1000 }
        );
        let def = parse(
            "leaf = { kind = \"fq_codel\", target = \"10ms\", ecn = false, handle = \"10:\" }",
        )
        .unwrap();
        assert_eq!(def.handle, Some(0x10));
        assert_eq!(
            def.config,
            LeafConfig::FqCodel(FqCodelConfig {
                target: Duration::from_millis(10),
                ecn: false,
                ..FqCodelConfig::default()
            })
        );
        let def = parse("leaf = { kind = \"sfq\", perturb = 10, headdrop = true }").unwrap();
        assert_eq!(
            def.config,
            LeafConfig::Sfq(SfqConfig {
                perturb: 10,
                headdrop: true,
                ..SfqConfig::default()
            })
        );
    }

    #[test]
    fn bad_leaves_say_why() {
        assert!(
            parse("leaf = \"cake\"")
                .unwrap_err()
                .contains("cake is not supported")
        );
        assert!(
            parse("leaf = \"red\"")
                .unwrap_err()
                .contains("pfifo, bfifo, sfq or fq_codel")
        );
        assert!(
            parse("leaf = { kind = \"sfq\", target = \"5ms\" }")
                .unwrap_err()
                .contains("sfq has no option \"target\"")
        );
        assert!(
            parse("leaf = { kind = \"sfq\", divisor = 1000 }")
                .unwrap_err()
                .contains("power of two")
        );
        assert!(
            parse("leaf = { kind = \"pfifo\", handle = \"1:10\" }")
                .unwrap_err()
                .contains("not a qdisc handle")
        );
        assert!(
            parse("leaf = { kind = \"pfifo\", limt = 5 }")
                .unwrap_err()
                .contains("limt")
        );
    }

    #[test]
    fn written_leaves_read_back_the_same() {
        for text in [
            "leaf = \"pfifo\"",
            "leaf = { kind = \"bfifo\", limit = \"30k\", handle = \"a:\" }",
            "leaf = { kind = \"sfq\", limit = 50, perturb = 10, depth = 20, headdrop = true }",
            "leaf = { kind = \"fq_codel\", flows = 64, ce_threshold = \"1ms\", target = \"2500us\" }",
        ] {
            let def = parse(text).unwrap();
            let again = parse(&format!("leaf = {}", leaf_toml(&def))).unwrap();
            assert_eq!(again, def, "{text} → {}", leaf_toml(&def));
        }
    }
}
