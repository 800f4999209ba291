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
//! Options are tc's, per kind, and each kind's are its core spec's fields
//! ([`LeafKind::options`](htb_core::LeafKind::options)): sizes, times and rates in tc's units
//! (`"30k"`, `"5ms"`, `"20mbit"`), keywords as values (`diffserv = "diffserv4"`, `flow_mode =
//! "dual-dsthost"`, `ack_filter = "aggressive"`, `atm = "ptm"`):
//!
//! ```toml
//! leaf = { kind = "cake", diffserv = "diffserv4", overhead = 18, mpu = 64 }
//! ```

use std::fmt;
use std::fmt::Write as _;

use htb_core::{LeafKind, LeafSpec, OptionValue, Rate};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::values::{ClassIdValue, RateValue, SizeValue, TimeValue};

/// `leaf = "fq_codel"` (the kind with its defaults) or `leaf = { kind = …, … }`, read straight
/// into the core's resolved [`LeafDef`]: an unknown kind, an option of another kind or a value
/// out of range is an error of the TOML reader, at the value's line and column.
///
/// The options are not a list of this crate's: each kind's are its spec's fields
/// ([`LeafKind::options`]), their values read in tc's units and handed to the spec's own serde
/// form, so a kind or an option added to the core is read here unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafSection(pub LeafDef);

impl<'de> Deserialize<'de> for LeafSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Map<String, Value>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a leaf qdisc: \"fq_codel\", or a table like { kind = \"sfq\" }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Map::from_iter([("kind".to_owned(), Value::from(v))]))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                Map::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        let table = d.deserialize_any(V)?;
        resolve(table).map(LeafSection).map_err(de::Error::custom)
    }
}

pub use htb_core::LeafDef;

/// The names of `kind`'s options.
fn allowed(kind: LeafKind) -> Vec<&'static str> {
    kind.options().iter().map(|o| o.name).collect()
}

/// What is wrong with a `leaf = …` section.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeafSectionError {
    /// A kind that does not exist here.
    #[error("unknown leaf qdisc {:?}: {}", .0, LeafKind::list(", ", " or "))]
    UnknownKind(String),
    /// A table without `kind`.
    #[error("a leaf table needs its kind: {{ kind = \"fq_codel\", … }}")]
    NoKind,
    /// A value outside the range tc takes.
    #[error("{option} {value} is not within {min}..{max}")]
    OutOfRange {
        /// The option.
        option: &'static str,
        /// Its value.
        value: i64,
        /// The smallest tc takes.
        min: i32,
        /// The largest tc takes.
        max: i32,
    },
    /// An option of another kind.
    #[error("{kind} has no option {option:?} (it takes: {})", allowed(*.kind).join(", "))]
    NoSuchOption {
        /// The kind given.
        kind: LeafKind,
        /// The option it does not take.
        option: String,
    },
    /// A number past 32 bits.
    #[error("{option} {value} is too large")]
    TooLarge {
        /// The option.
        option: &'static str,
        /// Its value.
        value: u64,
    },
    /// A value that is not what its option takes (a word for a number, an unknown keyword).
    #[error("{option}: {message}")]
    Value {
        /// The option.
        option: &'static str,
        /// What is wrong with it.
        message: String,
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

/// `value` of `option` as the core's serde form has it: sizes, times and rates from tc's
/// units to the numbers the spec holds (bytes, ns, bit/s), numbers and ranges checked.
fn core_value(
    option: &'static str,
    kind: OptionValue,
    value: Value,
) -> Result<Value, LeafSectionError> {
    let bad = |message: String| LeafSectionError::Value { option, message };
    let u32_of =
        |n: u64| u32::try_from(n).map_err(|_| LeafSectionError::TooLarge { option, value: n });
    Ok(match kind {
        OptionValue::Count | OptionValue::Packets => {
            let n = value
                .as_u64()
                .ok_or_else(|| bad(format!("{value} is not a count")))?;
            Value::from(u32_of(n)?)
        }
        OptionValue::Size => {
            let size = SizeValue::deserialize(value).map_err(|e| bad(e.to_string()))?;
            Value::from(u32_of(size.0)?)
        }
        OptionValue::Time => {
            let time = TimeValue::deserialize(value).map_err(|e| bad(e.to_string()))?;
            Value::from(time.0.as_nanos())
        }
        OptionValue::Rate => {
            let rate = RateValue::deserialize(value).map_err(|e| bad(e.to_string()))?;
            Value::from(rate.0.bits_per_sec())
        }
        OptionValue::Int { min, max } => {
            let n = value
                .as_i64()
                .ok_or_else(|| bad(format!("{value} is not a number")))?;
            if n < i64::from(min) || n > i64::from(max) {
                return Err(LeafSectionError::OutOfRange {
                    option,
                    value: n,
                    min,
                    max,
                });
            }
            Value::from(n)
        }
        // Flags and keywords are the spec's own serde values: its reader says what is wrong.
        OptionValue::Flag | OptionValue::Keyword => value,
    })
}

/// The table as the core's spec: `kind`, then each option by the kind's own list.
fn spec(mut table: Map<String, Value>) -> Result<LeafSpec, LeafSectionError> {
    let kind = match table.remove("kind") {
        None => return Err(LeafSectionError::NoKind),
        Some(Value::String(name)) => leaf_kind(&name)?,
        Some(other) => return Err(LeafSectionError::UnknownKind(other.to_string())),
    };
    let mut fields = Map::new();
    fields.insert("kind".into(), Value::from(kind.name()));
    for (name, value) in table {
        let Some(option) = kind.options().iter().find(|o| o.name == name) else {
            return Err(LeafSectionError::NoSuchOption { kind, option: name });
        };
        fields.insert(name, core_value(option.name, option.value, value)?);
    }
    LeafSpec::deserialize(Value::Object(fields)).map_err(|e| LeafSectionError::Value {
        option: kind.name(),
        message: e.to_string(),
    })
}

/// The table resolved with the kernel's defaults, and the handle checked.
fn resolve(mut table: Map<String, Value>) -> Result<LeafDef, LeafSectionError> {
    let handle = table
        .remove("handle")
        .map(|h| {
            ClassIdValue::deserialize(h).map_err(|e| LeafSectionError::Value {
                option: "handle",
                message: e.to_string(),
            })
        })
        .transpose()?;
    let config = spec(table)?.resolve()?;
    let handle = match handle {
        None => None,
        Some(ClassIdValue(id)) if id.is_qdisc() && id.major() != 0 => Some(id.major()),
        Some(ClassIdValue(id)) => return Err(LeafSectionError::NotAQdiscHandle(id)),
    };
    Ok(LeafDef { handle, config })
}

/// `config`'s spec with its packet `limit` set to `packets` (a class's `limit = N` on the
/// default leaf), or `None` for a kind whose queue is limited in bytes.
#[must_use]
pub fn with_packet_limit(config: &htb_core::LeafConfig, packets: u32) -> Option<LeafSpec> {
    let kind = config.kind();
    kind.options()
        .iter()
        .find(|o| o.name == "limit" && o.value == OptionValue::Packets)?;
    let Ok(Value::Object(mut fields)) = serde_json::to_value(config.to_spec()) else {
        return None;
    };
    fields.insert("limit".into(), Value::from(packets));
    LeafSpec::deserialize(Value::Object(fields)).ok()
}

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
        Ok(Value::Object(options)) => options,
        _ => Map::new(),
    };
    for (key, value) in options {
        match value {
            Value::Null => {}
            Value::String(_) if key == "kind" => {}
            // The core's serde form gives times in nanoseconds; the config file takes them as
            // times (`"5ms"`; a bare integer there is tc's microseconds).
            Value::Number(n) if is_time(def.config.kind(), &key) => {
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

/// Whether option `key` of `kind` is a time.
fn is_time(kind: LeafKind, key: &str) -> bool {
    kind.options()
        .iter()
        .any(|o| o.name == key && o.value == OptionValue::Time)
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

    /// Each kind's options, which this reader takes, are exactly its spec's fields.
    #[test]
    fn every_kinds_options_are_its_specs_fields() {
        for kind in LeafKind::ALL {
            let Some(config) = kind_default(kind) else {
                continue;
            };
            let Value::Object(fields) = serde_json::to_value(config.to_spec()).unwrap() else {
                panic!("{kind}: a spec is an object");
            };
            let mut fields: Vec<&str> = fields.keys().map(String::as_str).collect();
            fields.retain(|&f| f != "kind");
            let mut options = allowed(kind);
            fields.sort_unstable();
            options.sort_unstable();
            assert_eq!(fields, options, "{kind}");
        }
    }

    /// A kind with its defaults, from the config file's `leaf = "KIND"` (`None` for a kind that
    /// has options without defaults).
    fn kind_default(kind: LeafKind) -> Option<LeafConfig> {
        parse(&format!("leaf = \"{kind}\"")).ok().map(|d| d.config)
    }

    /// tbf's options come from its core spec: nothing here names them.
    #[test]
    fn a_tbf_leaf_is_read_from_the_cores_spec() {
        let def = parse(
            "leaf = { kind = \"tbf\", rate = \"1mbit\", burst = \"10k\", latency = \"50ms\" }",
        )
        .unwrap();
        let LeafConfig::Tbf(c) = def.config else {
            panic!("{def:?}");
        };
        let burst = htb_core::units::parse_size("10k").unwrap();
        assert_eq!(
            (c.rate, u64::from(c.burst), u64::from(c.limit)),
            (Rate::from_mbit(1), burst, 6250 + burst),
            "tc's limit: rate × latency + burst"
        );
        assert_eq!(c.latency(), Some(Duration::from_millis(50)));
        let again = parse(&format!("leaf = {}", leaf_toml(&def))).unwrap();
        assert_eq!(again, def, "{}", leaf_toml(&def));
        let Value::Object(fields) = serde_json::to_value(def.config.to_spec()).unwrap() else {
            panic!("a spec is an object");
        };
        let mut fields: Vec<&str> = fields.keys().map(String::as_str).collect();
        fields.retain(|&f| f != "kind");
        fields.sort_unstable();
        let mut options = allowed(LeafKind::Tbf);
        options.sort_unstable();
        assert_eq!(fields, options);
        let err = |text: &str| parse(text).unwrap_err().to_string();
        assert!(
            err("leaf = \"tbf\"").contains("\"rate\" is required"),
            "{}",
            err("leaf = \"tbf\"")
        );
        assert!(err(
            "leaf = { kind = \"tbf\", rate = \"1mbit\", burst = \"10k\", limit = \"20k\", latency = \"5ms\" }"
        )
        .contains("both"));
        assert!(err(
            "leaf = { kind = \"tbf\", rate = \"1mbit\", burst = \"10k\", latency = \"5ms\", ecn = true }"
        )
        .contains("tbf has no option \"ecn\""));
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
                .contains(&format!("\"red\": {}", LeafKind::list(", ", " or ")))
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
