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
//! quantum ecn ce_threshold memory_limit drop_batch`; `cake` `bandwidth autorate_ingress
//! diffserv flow_mode nat wash split_gso ingress ack_filter memlimit atm overhead raw mpu rtt
//! target fwmark`, its keywords as values (`diffserv = "diffserv4"`, `flow_mode =
//! "dual-dsthost"`, `ack_filter = "aggressive"`, `atm = "ptm"`):
//!
//! ```toml
//! leaf = { kind = "cake", diffserv = "diffserv4", overhead = 18, mpu = 64 }
//! ```

use std::fmt;
use std::fmt::Write as _;

use htb_core::{
    AckFilter, AtmMode, CakeSpec, DiffservMode, FlowMode, FqCodelSpec, LeafKind, LeafSpec, Rate,
    SfqSpec,
};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::values::{ClassIdValue, RateValue, SizeValue, TimeValue};

/// The options of `leaf = { kind = …, … }` as written, before they become the core's
/// [`LeafSpec`]: only [`LeafSection`]'s reader sees it (TOML gives a table's keys in any order,
/// so the kind cannot pick the options' meaning as they are read).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeafOptions {
    /// `pfifo`, `bfifo`, `sfq`, `fq_codel` or `cake`.
    #[serde(default, deserialize_with = "kind_of")]
    kind: Option<LeafKind>,
    /// The qdisc handle tc shows (`"10:"`); assigned when omitted.
    #[serde(default)]
    handle: Option<ClassIdValue>,
    /// Packets (`bfifo`: bytes).
    #[serde(default)]
    limit: Option<SizeValue>,
    /// `sfq`, `fq_codel`: flows.
    #[serde(default)]
    flows: Option<u32>,
    /// `fq_codel`, `cake`: CoDel's (COBALT's) target.
    #[serde(default)]
    target: Option<TimeValue>,
    /// `fq_codel`: CoDel interval.
    #[serde(default)]
    interval: Option<TimeValue>,
    /// `sfq`, `fq_codel`: DRR quantum in bytes.
    #[serde(default)]
    quantum: Option<SizeValue>,
    /// `fq_codel`: ECN marking (default on).
    #[serde(default)]
    ecn: Option<bool>,
    /// `fq_codel`: CE-marking threshold.
    #[serde(default)]
    ce_threshold: Option<TimeValue>,
    /// `fq_codel`: byte limit of the buffers held.
    #[serde(default)]
    memory_limit: Option<SizeValue>,
    /// `fq_codel`: packets dropped at once over the limit.
    #[serde(default)]
    drop_batch: Option<u32>,
    /// `sfq`: seconds between hash re-keyings.
    #[serde(default)]
    perturb: Option<u32>,
    /// `sfq`: hash buckets.
    #[serde(default)]
    divisor: Option<u32>,
    /// `sfq`: packets per flow.
    #[serde(default)]
    depth: Option<u32>,
    /// `sfq`: drop from the head.
    #[serde(default)]
    headdrop: Option<bool>,
    /// `cake`: its shaper's rate (unlimited when left out).
    #[serde(default)]
    bandwidth: Option<RateValue>,
    /// `cake`: `autorate-ingress`.
    #[serde(default)]
    autorate_ingress: Option<bool>,
    /// `cake`: the tins (`"diffserv3"`, `"diffserv4"`, `"diffserv8"`, `"besteffort"`,
    /// `"precedence"`).
    #[serde(default)]
    diffserv: Option<DiffservMode>,
    /// `cake`: the flow isolation (`"triple-isolate"`, `"dual-dsthost"`, `"flows"` …).
    #[serde(default)]
    flow_mode: Option<FlowMode>,
    /// `cake`: `nat`.
    #[serde(default)]
    nat: Option<bool>,
    /// `cake`: `wash`.
    #[serde(default)]
    wash: Option<bool>,
    /// `cake`: `split-gso`.
    #[serde(default)]
    split_gso: Option<bool>,
    /// `cake`: `ingress`.
    #[serde(default)]
    ingress: Option<bool>,
    /// `cake`: `"off"`, `"filter"` or `"aggressive"`.
    #[serde(default)]
    ack_filter: Option<AckFilter>,
    /// `cake`: the buffer's byte limit.
    #[serde(default)]
    memlimit: Option<SizeValue>,
    /// `cake`: `"none"`, `"atm"` or `"ptm"`.
    #[serde(default)]
    atm: Option<AtmMode>,
    /// `cake`: bytes per packet in place of the L2 header (-64 to 256).
    #[serde(default)]
    overhead: Option<i32>,
    /// `cake`: `raw` (no compensation).
    #[serde(default)]
    raw: Option<bool>,
    /// `cake`: the smallest length charged (0 to 256).
    #[serde(default)]
    mpu: Option<u32>,
    /// `cake`: the round-trip time (CoDel's interval).
    #[serde(default)]
    rtt: Option<TimeValue>,
    /// `cake`: the mark mask that picks tins.
    #[serde(default)]
    fwmark: Option<u32>,
}

/// `leaf = "fq_codel"` (the kind with its defaults) or `leaf = { kind = …, … }`, read straight
/// into the core's resolved [`LeafDef`]: an unknown kind, an option of another kind or a value
/// out of range is an error of the TOML reader, at the value's line and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafSection(pub LeafDef);

impl<'de> Deserialize<'de> for LeafSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LeafOptions;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a leaf qdisc: \"fq_codel\", or a table like { kind = \"sfq\" }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LeafOptions, E> {
                Ok(LeafOptions {
                    kind: Some(leaf_kind(v).map_err(E::custom)?),
                    ..LeafOptions::default()
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LeafOptions, A::Error> {
                LeafOptions::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        let options = d.deserialize_any(V)?;
        options
            .resolve()
            .map(LeafSection)
            .map_err(de::Error::custom)
    }
}

/// `kind = "…"`, one of the kinds htb runs.
fn kind_of<'de, D: Deserializer<'de>>(d: D) -> Result<Option<LeafKind>, D::Error> {
    let name = String::deserialize(d)?;
    leaf_kind(&name).map(Some).map_err(de::Error::custom)
}

pub use htb_core::LeafDef;

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
        LeafKind::Cake => &[
            "bandwidth",
            "autorate_ingress",
            "diffserv",
            "flow_mode",
            "nat",
            "wash",
            "split_gso",
            "ingress",
            "ack_filter",
            "memlimit",
            "atm",
            "overhead",
            "raw",
            "mpu",
            "rtt",
            "target",
            "fwmark",
        ],
    }
}

/// What is wrong with a `leaf = …` section.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeafSectionError {
    /// A kind that does not exist here.
    #[error("unknown leaf qdisc {0:?}: pfifo, bfifo, sfq, fq_codel or cake")]
    UnknownKind(String),
    /// A table without `kind`.
    #[error("a leaf table needs its kind: {{ kind = \"fq_codel\", … }}")]
    NoKind,
    /// A value outside the range tc takes.
    #[error("{option} {value} is not within {range}")]
    OutOfRange {
        /// The option.
        option: &'static str,
        /// Its value.
        value: i64,
        /// What tc takes.
        range: &'static str,
    },
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
/// An unknown name, with what is supported.
pub fn leaf_kind(name: &str) -> Result<LeafKind, LeafSectionError> {
    LeafKind::from_name(name).ok_or_else(|| LeafSectionError::UnknownKind(name.to_owned()))
}

/// `value` if within `range` (tc's checks of `overhead` and `mpu`).
fn ranged<T: Copy + Into<i64>>(
    value: Option<T>,
    option: &'static str,
    range: std::ops::RangeInclusive<i64>,
    text: &'static str,
) -> Result<Option<T>, LeafSectionError> {
    match value {
        Some(v) if !range.contains(&v.into()) => Err(LeafSectionError::OutOfRange {
            option,
            value: v.into(),
            range: text,
        }),
        v => Ok(v),
    }
}

fn u32_of(v: Option<SizeValue>, option: &'static str) -> Result<Option<u32>, LeafSectionError> {
    v.map(|s| u32::try_from(s.0).map_err(|_| LeafSectionError::TooLarge { option, value: s.0 }))
        .transpose()
}

impl LeafOptions {
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
        add(self.bandwidth.is_some(), "bandwidth");
        add(self.autorate_ingress.is_some(), "autorate_ingress");
        add(self.diffserv.is_some(), "diffserv");
        add(self.flow_mode.is_some(), "flow_mode");
        add(self.nat.is_some(), "nat");
        add(self.wash.is_some(), "wash");
        add(self.split_gso.is_some(), "split_gso");
        add(self.ingress.is_some(), "ingress");
        add(self.ack_filter.is_some(), "ack_filter");
        add(self.memlimit.is_some(), "memlimit");
        add(self.atm.is_some(), "atm");
        add(self.overhead.is_some(), "overhead");
        add(self.raw.is_some(), "raw");
        add(self.mpu.is_some(), "mpu");
        add(self.rtt.is_some(), "rtt");
        add(self.fwmark.is_some(), "fwmark");
        v
    }

    /// The options as the core's spec.
    fn spec(&self) -> Result<LeafSpec, LeafSectionError> {
        let kind = self.kind.ok_or(LeafSectionError::NoKind)?;
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
            LeafKind::Cake => LeafSpec::Cake(CakeSpec {
                bandwidth: self.bandwidth.map(|r| r.0),
                autorate_ingress: self.autorate_ingress,
                diffserv: self.diffserv,
                flow_mode: self.flow_mode,
                nat: self.nat,
                wash: self.wash,
                split_gso: self.split_gso,
                ingress: self.ingress,
                ack_filter: self.ack_filter,
                memlimit: u32_of(self.memlimit, "memlimit")?,
                atm: self.atm,
                overhead: ranged(self.overhead, "overhead", -64..=256, "-64..256")?,
                raw: self.raw.unwrap_or(false),
                mpu: ranged(self.mpu, "mpu", 0..=256, "0..256")?,
                rtt: self.rtt.map(|t| t.0),
                target: self.target.map(|t| t.0),
                fwmark: self.fwmark,
            }),
        })
    }

    /// Resolved with the kernel's defaults, and the handle checked.
    fn resolve(&self) -> Result<LeafDef, LeafSectionError> {
        let config = self.spec()?.resolve()?;
        let handle = match self.handle {
            None => None,
            Some(ClassIdValue(id)) if id.is_qdisc() && id.major() != 0 => Some(id.major()),
            Some(ClassIdValue(id)) => return Err(LeafSectionError::NotAQdiscHandle(id)),
        };
        Ok(LeafDef { handle, config })
    }
}

/// The options the core's serde form gives in nanoseconds, and the config file takes as
/// times (`"5ms"`; a bare integer there is tc's microseconds).
const TIME_OPTIONS: [&str; 4] = ["target", "interval", "ce_threshold", "rtt"];

/// A leaf as an inline TOML table that [`LeafSection`] reads back to the same [`LeafDef`]
/// (what saved states write): every option given, but an unlimited cake's bandwidth.
///
/// The options are the core's [`LeafSpec`] in its own serde form, whose field names are the
/// config file's keys, so an option added to the core is written without a change here.
#[must_use]
pub fn leaf_toml(def: &LeafDef) -> String {
    let mut spec = def.config.to_spec();
    if let LeafSpec::Cake(c) = &mut spec
        && c.bandwidth == Some(Rate::ZERO)
    {
        c.bandwidth = None;
    }
    let mut out = format!("{{ kind = \"{}\"", def.config.kind().name());
    if let Some(h) = def.handle {
        let _ = write!(out, ", handle = \"{h:x}:\"");
    }
    let options = match serde_json::to_value(spec) {
        Ok(serde_json::Value::Object(options)) => options,
        _ => serde_json::Map::new(),
    };
    for (key, value) in options {
        match value {
            serde_json::Value::Null => {}
            serde_json::Value::String(_) if key == "kind" => {}
            serde_json::Value::Number(n) if TIME_OPTIONS.contains(&key.as_str()) => {
                let nanos = n.as_u64().unwrap_or(u64::MAX);
                let _ = write!(
                    out,
                    ", {key} = \"{}\"",
                    htb_core::Duration::from_nanos(nanos)
                );
            }
            // Numbers, booleans and keywords are written alike in JSON and TOML.
            value => {
                let _ = write!(out, ", {key} = {value}");
            }
        }
    }
    out.push_str(" }");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::{Duration, FqCodelConfig, LeafConfig, SfqConfig};

    #[derive(Debug, Deserialize)]
    struct Doc {
        leaf: LeafSection,
    }

    fn parse(text: &str) -> Result<LeafDef, Box<dyn std::error::Error>> {
        let doc: Doc = toml::from_str(text)?;
        Ok(doc.leaf.0)
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
    fn a_bad_leaf_is_reported_where_it_stands() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)] // read for its errors
        struct Class {
            class: Vec<Doc>,
        }
        let text =
            "[[class]]\nleaf = \"pfifo\"\n[[class]]\nleaf = { kind = \"cake\", mpu = 300 }\n";
        let err = crate::from_toml::<Class>(text).unwrap_err();
        assert_eq!((err.line, err.column), (4, 8), "{err}");
        assert_eq!(err.key.as_deref(), Some("class[1].leaf"), "{err}");
        assert!(
            err.message.contains("mpu 300 is not within 0..256"),
            "{err}"
        );
        let err = crate::from_toml::<Doc>("leaf = { limit = 5 }").unwrap_err();
        assert!(err.message.contains("needs its kind"), "{err}");
    }

    #[test]
    fn bad_leaves_say_why() {
        assert!(
            parse("leaf = \"red\"")
                .unwrap_err()
                .to_string()
                .contains("pfifo, bfifo, sfq, fq_codel or cake")
        );
        assert!(
            parse("leaf = { kind = \"cake\", overhead = 300 }")
                .unwrap_err()
                .to_string()
                .contains("overhead 300 is not within -64..256")
        );
        assert!(
            parse("leaf = { kind = \"cake\", diffserv = \"diffserv5\" }")
                .unwrap_err()
                .to_string()
                .contains("diffserv5")
        );
        assert!(
            parse("leaf = { kind = \"fq_codel\", wash = true }")
                .unwrap_err()
                .to_string()
                .contains("fq_codel has no option \"wash\"")
        );
        assert!(
            parse("leaf = { kind = \"sfq\", target = \"5ms\" }")
                .unwrap_err()
                .to_string()
                .contains("sfq has no option \"target\"")
        );
        assert!(
            parse("leaf = { kind = \"sfq\", divisor = 1000 }")
                .unwrap_err()
                .to_string()
                .contains("power of two")
        );
        assert!(
            parse("leaf = { kind = \"pfifo\", handle = \"1:10\" }")
                .unwrap_err()
                .to_string()
                .contains("not a qdisc handle")
        );
        assert!(
            parse("leaf = { kind = \"pfifo\", limt = 5 }")
                .unwrap_err()
                .to_string()
                .contains("limt")
        );
    }

    /// Saved states written before the writer took the core's serde form (its keys in another
    /// order, sfq's `headdrop` only when on) read as the same leaves the writer writes now.
    #[test]
    fn leaves_of_earlier_saved_states_read_the_same() {
        for (earlier, text) in [
            (
                "{ kind = \"sfq\", quantum = 1514, perturb = 0, divisor = 1024, flows = 128, depth = 127 }",
                "leaf = \"sfq\"",
            ),
            (
                "{ kind = \"fq_codel\", limit = 10240, flows = 1024, quantum = 1514, \
                 memory_limit = 33554432, drop_batch = 64, target = \"5ms\", interval = \"100ms\", \
                 ecn = true }",
                "leaf = \"fq_codel\"",
            ),
            (
                "{ kind = \"cake\", bandwidth = 20000000, diffserv = \"diffserv4\", \
                 flow_mode = \"dual-dsthost\", ack_filter = \"off\", atm = \"ptm\", rtt = \"50ms\", \
                 target = \"5ms\", autorate_ingress = false, nat = false, wash = false, \
                 split_gso = true, ingress = false, raw = false, memlimit = 0, overhead = -4, \
                 mpu = 0, fwmark = 0 }",
                "leaf = { kind = \"cake\", bandwidth = \"20mbit\", diffserv = \"diffserv4\", \
                 flow_mode = \"dual-dsthost\", atm = \"ptm\", overhead = -4, rtt = \"50ms\" }",
            ),
        ] {
            let def = parse(text).unwrap();
            assert_eq!(
                parse(&format!("leaf = {earlier}")).unwrap(),
                def,
                "{earlier}"
            );
            assert_eq!(
                parse(&format!("leaf = {}", leaf_toml(&def))).unwrap(),
                def,
                "{}",
                leaf_toml(&def)
            );
        }
    }

    #[test]
    fn written_leaves_read_back_the_same() {
        for text in [
            "leaf = \"pfifo\"",
            "leaf = { kind = \"bfifo\", limit = \"30k\", handle = \"a:\" }",
            "leaf = { kind = \"sfq\", limit = 50, perturb = 10, depth = 20, headdrop = true }",
            "leaf = { kind = \"fq_codel\", flows = 64, ce_threshold = \"1ms\", target = \"2500us\" }",
            "leaf = \"cake\"",
            "leaf = { kind = \"cake\", bandwidth = \"20mbit\", diffserv = \"diffserv4\", \
             flow_mode = \"dual-dsthost\", ack_filter = \"aggressive\", atm = \"ptm\", \
             overhead = -4, mpu = 64, rtt = \"50ms\", wash = true, fwmark = 255 }",
        ] {
            let def = parse(text).unwrap();
            let again = parse(&format!("leaf = {}", leaf_toml(&def))).unwrap();
            assert_eq!(again, def, "{text} → {}", leaf_toml(&def));
        }
    }
}
