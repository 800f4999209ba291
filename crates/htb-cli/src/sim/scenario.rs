//! The scenario file: `duration`, `warmup`, `link`, `[qdisc]`, `[[class]]`, `[[flow]]`,
//! `[[change]]`.

use std::collections::HashMap;
use std::fmt;

use htb_config::values::{ClassIdValue, LinkLayerValue, RateValue, SizeValue, TimeValue};
use htb_config::{ClassSection, ConfigError, LeafSection, Located, QdiscSection, TreeSpec};
use htb_core::{ClassId, ClassSpec, Duration, Instant, LeafConfig, Rate, Target};
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    duration: Located<TimeValue>,
    warmup: Option<Located<TimeValue>>,
    link: Option<RateValue>,
    qdisc: Option<QdiscSection>,
    #[serde(default)]
    class: Vec<Located<ClassSection>>,
    #[serde(default)]
    flow: Vec<Located<FlowSection>>,
    #[serde(default)]
    change: Vec<Located<ChangeSection>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowSection {
    class: Located<String>,
    packet: Located<PacketSizes>,
    rate: Located<FlowRate>,
    start: Option<TimeValue>,
    stop: Option<TimeValue>,
    /// Packets are ECN-capable (ECT(0)): CoDel marks them instead of dropping.
    ecn: Option<bool>,
    /// The flow's source and destination hosts (any names): `cake` isolates hosts by them.
    src: Option<String>,
    dst: Option<String>,
    /// Its DSCP: a number (0 to 63) or a name (`ef`, `cs1`…`cs7`, `af11`…`af43`, `le`, `va`).
    dscp: Option<Located<DscpValue>>,
    /// Its packets are pure TCP ACKs of one connection, each acknowledging two more segments
    /// (what `cake`'s ACK filter thins).
    tcp_acks: Option<bool>,
}

/// A DSCP: a number or its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DscpValue(u8);

impl<'de> Deserialize<'de> for DscpValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = toml_value(d)?;
        dscp(&text).map(Self).ok_or_else(|| {
            de::Error::custom(format!(
                "invalid dscp {text:?}: 0 to 63, or ef, va, le, cs0 to cs7, af11 to af43"
            ))
        })
    }
}

/// A DSCP by number or by its RFC name.
fn dscp(text: &str) -> Option<u8> {
    let t = text.to_ascii_lowercase();
    let named = match t.as_str() {
        "ef" => Some(46),
        "va" => Some(44),
        "le" => Some(1),
        "be" | "df" => Some(0),
        _ => None,
    };
    if named.is_some() {
        return named;
    }
    if let Some(n) = t.strip_prefix("cs") {
        return n.parse::<u8>().ok().filter(|&n| n <= 7).map(|n| n << 3);
    }
    if let Some(xy) = t.strip_prefix("af") {
        let (x, y) = (
            xy.get(..1)?.parse::<u8>().ok()?,
            xy.get(1..)?.parse::<u8>().ok()?,
        );
        return ((1..=4).contains(&x) && (1..=3).contains(&y)).then_some((x << 3) | (y << 1));
    }
    t.parse::<u8>().ok().filter(|&n| n < 64)
}

/// `[[change]]`: `at`, the class `id`, and any class parameters to change. Parameters not
/// given keep their current values (a parameter that was defaulted, like `ceil` defaulting to
/// `rate`, is defaulted again from the new values). `leaf` gives the class a new leaf
/// discipline (its queue is purged, as `tc qdisc replace` does).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangeSection {
    at: Located<TimeValue>,
    id: Located<ClassIdValue>,
    rate: Option<RateValue>,
    ceil: Option<RateValue>,
    burst: Option<SizeValue>,
    cburst: Option<SizeValue>,
    prio: Option<u32>,
    quantum: Option<SizeValue>,
    mtu: Option<u32>,
    overhead: Option<u16>,
    mpu: Option<u16>,
    linklayer: Option<LinkLayerValue>,
    leaf: Option<Located<LeafSection>>,
}

impl ChangeSection {
    /// `class` with this change's parameters applied.
    fn merged(&self, class: &ClassSection) -> ClassSection {
        let mut out = class.clone();
        macro_rules! set {
            ($($field:ident),*) => { $( if self.$field.is_some() { out.$field = self.$field; } )* };
        }
        set!(
            rate, ceil, burst, cburst, prio, quantum, mtu, overhead, mpu, linklayer
        );
        out
    }
}

/// Packet sizes of a flow: one size, or a list cycled through.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PacketSizes(Vec<u32>);

impl<'de> Deserialize<'de> for PacketSizes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        fn size<E: de::Error>(v: i64) -> Result<u32, E> {
            match u32::try_from(v) {
                Ok(n) if (1..=65_535).contains(&n) => Ok(n),
                _ => Err(E::custom(format!(
                    "packet size {v} is not between 1 and 65535 bytes"
                ))),
            }
        }
        impl<'de> Visitor<'de> for V {
            type Value = PacketSizes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a packet size in bytes, or a list of sizes like [64, 1500]")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PacketSizes, E> {
                Ok(PacketSizes(vec![size(v)?]))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PacketSizes, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PacketSizes, A::Error> {
                let mut sizes = Vec::new();
                while let Some(v) = seq.next_element::<i64>()? {
                    sizes.push(size(v)?);
                }
                if sizes.is_empty() {
                    return Err(de::Error::custom("the list of packet sizes is empty"));
                }
                Ok(PacketSizes(sizes))
            }
        }
        d.deserialize_any(V)
    }
}

/// Offered load of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowRate {
    /// Keep the class backlogged at all times.
    Max,
    /// A constant bit rate.
    Constant(Rate),
}

impl<'de> Deserialize<'de> for FlowRate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = toml_value(d)?;
        if value == "max" {
            return Ok(Self::Max);
        }
        match htb_core::units::parse_rate(&value) {
            Ok(rate) if !rate.is_zero() => Ok(Self::Constant(rate)),
            Ok(_) => Err(de::Error::custom("a flow's rate must be above zero")),
            Err(e) => Err(de::Error::custom(format!(
                "invalid rate {value:?}: {e} (or \"max\")"
            ))),
        }
    }
}

/// A string or integer TOML value as text.
fn toml_value<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("\"max\" or a rate such as \"50mbit\"")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_owned())
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    d.deserialize_any(V)
}

/// A source of packets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    /// Where its packets are enqueued.
    pub target: Target,
    /// The class its packets should land in, for the report ("unclassified": the default).
    pub label: String,
    /// Packet sizes, cycled through.
    pub sizes: Vec<u32>,
    /// Offered load.
    pub rate: FlowRate,
    /// First packet.
    pub start: Instant,
    /// No packets from this time on.
    pub stop: Instant,
    /// ECN-capable packets.
    pub ecn: bool,
    /// Hashes of its source and destination hosts (0: not given).
    pub hosts: (u32, u32),
    /// DSCP of its packets.
    pub dscp: u8,
    /// Pure TCP ACKs of one connection.
    pub tcp_acks: bool,
}

/// A host name as a host hash (FNV-1a).
fn host_hash(name: Option<&String>) -> u32 {
    name.map_or(0, |n| {
        n.bytes().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        })
    })
}

/// A live change at a point in time, with the class's full parameters after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledChange {
    /// When.
    pub at: Instant,
    /// Which class.
    pub id: ClassId,
    /// Its parameters from then on.
    pub spec: ClassSpec,
    /// A new leaf discipline, if the change gives one.
    pub leaf: Option<LeafConfig>,
}

/// A validated scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// Simulated time.
    pub duration: Duration,
    /// Excluded from reported rates.
    pub warmup: Duration,
    /// Egress line rate; `None` = infinitely fast.
    pub link: Option<Rate>,
    /// The HTB tree.
    pub tree: TreeSpec,
    /// Traffic.
    pub flows: Vec<Flow>,
    /// Live changes, in time order.
    pub changes: Vec<ScheduledChange>,
}

impl Scenario {
    /// Parses and validates a scenario file.
    ///
    /// # Errors
    /// The first problem, with line, column and key.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let file: ScenarioFile = htb_config::from_toml(text)?;
        let err =
            |span: std::ops::Range<usize>, msg: String| ConfigError::spanned(text, &span, msg);
        let duration = file.duration.get_ref().0;
        if duration == Duration::ZERO {
            return Err(err(
                file.duration.span(),
                "duration must be above zero".into(),
            ));
        }
        let warmup = file
            .warmup
            .as_ref()
            .map_or(Duration::ZERO, |w| w.get_ref().0);
        if warmup >= duration {
            let span = file.warmup.as_ref().map(Located::span).unwrap_or_default();
            return Err(err(
                span,
                format!("warmup {warmup} is not shorter than duration {duration}"),
            ));
        }
        let tree = htb_config::tree_from_sections(text, file.qdisc.as_ref(), &file.class)?;
        let sections: HashMap<ClassId, &ClassSection> = file
            .class
            .iter()
            .map(|c| (c.get_ref().id.get_ref().0, c.get_ref()))
            .collect();

        let mut flows = Vec::with_capacity(file.flow.len());
        for flow in &file.flow {
            let f = flow.get_ref();
            let name = f.class.get_ref();
            let target = if name == "unclassified" {
                Target::Unclassified
            } else {
                let id: ClassId = name.parse().map_err(|e| {
                    err(
                        f.class.span(),
                        format!("invalid class {name:?}: {e} (or \"unclassified\")"),
                    )
                })?;
                if !id.is_qdisc() && !sections.contains_key(&id) {
                    return Err(err(f.class.span(), format!("class {id} is not defined")));
                }
                Target::Class(id)
            };
            let start = f.start.map_or(Duration::ZERO, |s| s.0);
            let stop = f.stop.map_or(duration, |s| s.0);
            if start >= stop {
                return Err(err(
                    flow.span(),
                    format!("flow starts at {start} but stops at {stop}"),
                ));
            }
            flows.push(Flow {
                target,
                label: name.clone(),
                sizes: f.packet.get_ref().0.clone(),
                rate: *f.rate.get_ref(),
                start: Instant::ZERO + start,
                stop: Instant::ZERO + stop,
                ecn: f.ecn.unwrap_or(false),
                hosts: (host_hash(f.src.as_ref()), host_hash(f.dst.as_ref())),
                dscp: f.dscp.as_ref().map_or(0, |d| d.get_ref().0),
                tcp_acks: f.tcp_acks.unwrap_or(false),
            });
        }

        // Apply changes in time order to each class's current section.
        let mut current: HashMap<ClassId, ClassSection> =
            sections.iter().map(|(&id, &s)| (id, s.clone())).collect();
        let mut order: Vec<&Located<ChangeSection>> = file.change.iter().collect();
        order.sort_by_key(|c| c.get_ref().at.get_ref().0);
        let mut changes = Vec::with_capacity(order.len());
        for change in order {
            let c = change.get_ref();
            let id = c.id.get_ref().0;
            let Some(section) = current.get_mut(&id) else {
                return Err(err(c.id.span(), format!("class {id} is not defined")));
            };
            let at = c.at.get_ref().0;
            if at >= duration {
                return Err(err(
                    c.at.span(),
                    format!("change at {at} is not before the end ({duration})"),
                ));
            }
            *section = c.merged(section);
            let spec = section
                .spec()
                .expect("classes were validated to have a rate");
            // Validate the parameters now, so a bad change is reported with its location.
            let mut probe: htb_core::Scheduler<u32> = htb_core::Scheduler::new(tree.config);
            if let Err(e) = probe.add_class(Instant::ZERO, id, None, &spec) {
                return Err(err(change.span(), e.to_string()));
            }
            let leaf = match &c.leaf {
                None => None,
                Some(leaf) => {
                    if tree.classes.iter().any(|d| d.parent == Some(id)) {
                        let msg = format!(
                            "class {id} has children: only a leaf class takes a leaf qdisc"
                        );
                        return Err(err(leaf.span(), msg));
                    }
                    let def = leaf.get_ref().0;
                    Some(def.config)
                }
            };
            changes.push(ScheduledChange {
                at: Instant::ZERO + at,
                id,
                spec,
                leaf,
            });
        }

        Ok(Self {
            duration,
            warmup,
            link: file.link.map(|l| l.0),
            tree,
            flows,
            changes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
duration = "10s"
warmup = "1s"
link = "100mbit"

[qdisc]
default = "20"

[[class]]
id = "1:1"
rate = "100mbit"

[[class]]
id = "1:20"
parent = "1:1"
rate = "30mbit"
ceil = "100mbit"
"#;

    #[test]
    fn parses_the_contract_example() {
        let text = format!(
            "{BASE}\n[[flow]]\nclass = \"1:20\"\npacket = [64, 1500]\nrate = \"max\"\nstart = \"2s\"\n\n\
             [[flow]]\nclass = \"unclassified\"\npacket = 1500\nrate = \"50mbit\"\n\n\
             [[change]]\nat = \"5s\"\nid = \"1:20\"\nrate = \"20mbit\"\n"
        );
        let s = Scenario::parse(&text).unwrap();
        assert_eq!(s.duration, Duration::from_secs(10));
        assert_eq!(s.link, Some(Rate::from_mbit(100)));
        assert_eq!(s.flows.len(), 2);
        assert_eq!(s.flows[0].sizes, [64, 1500]);
        assert_eq!(s.flows[0].rate, FlowRate::Max);
        assert_eq!(s.flows[0].start, Instant::from_nanos(2_000_000_000));
        assert_eq!(s.flows[1].target, Target::Unclassified);
        assert_eq!(s.changes[0].spec.rate, Rate::from_mbit(20));
        assert_eq!(
            s.changes[0].spec.ceil,
            Some(Rate::from_mbit(100)),
            "ceil kept"
        );
    }

    fn error(extra: &str) -> String {
        Scenario::parse(&format!("{BASE}{extra}"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn bad_scenarios_name_the_place() {
        let e = error("\n[[flow]]\nclass = \"1:30\"\npacket = 1500\nrate = \"max\"\n");
        assert!(
            e.contains("flow[0].class") && e.contains("class 1:30 is not defined"),
            "{e}"
        );
        let e = error("\n[[flow]]\nclass = \"1:20\"\npacket = 0\nrate = \"max\"\n");
        assert!(
            e.contains("flow[0].packet") && e.contains("between 1 and 65535"),
            "{e}"
        );
        let e = error("\n[[flow]]\nclass = \"1:20\"\npacket = 100\nrate = \"fast\"\n");
        assert!(
            e.contains("flow[0].rate") && e.contains("invalid rate \"fast\""),
            "{e}"
        );
        let e = error("\n[[change]]\nat = \"11s\"\nid = \"1:20\"\nrate = \"1mbit\"\n");
        assert!(
            e.contains("change[0].at") && e.contains("not before the end"),
            "{e}"
        );
        let e = error("\n[[change]]\nat = \"1s\"\nid = \"1:20\"\nrate = \"0bit\"\n");
        assert!(e.contains("rate must be above zero"), "{e}");
        let e = error("\nbogus = 1\n");
        assert!(e.contains("unknown field `bogus`"), "{e}");
        let e = Scenario::parse("duration = \"1s\"\nwarmup = \"2s\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("line 2, column 10: warmup:"), "{e}");
    }
}
