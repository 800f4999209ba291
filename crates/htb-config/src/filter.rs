//! Filters: which class a packet goes to (`[[interface.filter]]`, and tc's `u32`/`flower`
//! matches in the CLI). A filter matches when every key it names matches; filters are tried
//! in `prio` order (lowest first, then in the order given), the first match wins.

use std::fmt;

pub use htb_classify::{
    Classifier, ControlAction, Family, Filter, Headers, IpPrefix, MAX_RAW_KEYS, Match, PacketInfo,
    ParseError, Police, PoliceConfig, PoliceError, PoliceStats, PortRange, RawKey, RawKeys,
    Verdict,
};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::InterfaceName;
use crate::error::{Located, ValueError};
use crate::values::{ClassIdValue, LinkLayerValue, RateValue, SizeValue};

/// IP protocol by name (`tcp`, `udp`, `icmp`, `icmpv6`, `sctp`, `gre`, `esp`) or number.
///
/// # Errors
/// [`ValueError::Protocol`]: neither a known name nor 0–255.
pub fn parse_protocol(s: &str) -> Result<u8, ValueError> {
    match s.to_ascii_lowercase().as_str() {
        "icmp" => Ok(1),
        "tcp" => Ok(6),
        "udp" => Ok(17),
        "gre" => Ok(47),
        "esp" => Ok(50),
        "ah" => Ok(51),
        "icmpv6" | "ipv6-icmp" => Ok(58),
        "sctp" => Ok(132),
        "udplite" => Ok(136),
        n => n
            .parse::<u8>()
            .map_err(|_| ValueError::Protocol(s.to_owned())),
    }
}

/// DSCP by number (0–63) or name (`be`, `ef`, `cs0`–`cs7`, `af11`–`af43`, `va`).
///
/// # Errors
/// [`ValueError::Dscp`]: neither a known name nor 0–63.
pub fn parse_dscp(s: &str) -> Result<u8, ValueError> {
    let lower = s.to_ascii_lowercase();
    let named = match lower.as_str() {
        "be" | "df" => Some(0),
        "ef" => Some(46),
        "va" => Some(44),
        _ => None,
    };
    if let Some(v) = named {
        return Ok(v);
    }
    if let Some(n) = lower
        .strip_prefix("cs")
        .and_then(|n| n.parse::<u8>().ok())
        .filter(|&n| n <= 7)
    {
        return Ok(n << 3);
    }
    if let Some(rest) = lower.strip_prefix("af") {
        let b = rest.as_bytes();
        if b.len() == 2 && (b'1'..=b'4').contains(&b[0]) && (b'1'..=b'3').contains(&b[1]) {
            return Ok(((b[0] - b'0') << 3) | ((b[1] - b'0') << 1));
        }
    }
    s.parse::<u8>()
        .ok()
        .filter(|&v| v <= 63)
        .ok_or_else(|| ValueError::Dscp(s.to_owned()))
}

/// A match key given as a string or an integer, kept as text for its own parser.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string or a number")
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

/// `match = { src = "...", dst = "...", proto = "udp", sport = "...", dport = "5201", dscp = "ef",
/// vlan = 10, raw = ["05000000/0f000000 at 0"] }` in the config (`raw`: u32's general keys, as
/// tc's `filter show` prints them, at most four).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatchSection(pub Match);

impl<'de> Deserialize<'de> for MatchSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(default, deserialize_with = "opt_text")]
            src: Option<String>,
            #[serde(default, deserialize_with = "opt_text")]
            dst: Option<String>,
            #[serde(default, deserialize_with = "opt_text")]
            proto: Option<String>,
            #[serde(default, deserialize_with = "opt_text")]
            sport: Option<String>,
            #[serde(default, deserialize_with = "opt_text")]
            dport: Option<String>,
            #[serde(default, deserialize_with = "opt_text")]
            dscp: Option<String>,
            #[serde(default, deserialize_with = "opt_text")]
            vlan: Option<String>,
            #[serde(default)]
            raw: Vec<String>,
        }
        fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
            text(d).map(Some)
        }
        let raw = Raw::deserialize(d)?;
        let keys = raw
            .raw
            .iter()
            .map(|k| k.parse::<RawKey>())
            .collect::<Result<Vec<_>, ParseError>>()
            .map_err(de::Error::custom)?;
        let keys = RawKeys::new(&keys).ok_or_else(|| {
            de::Error::custom(format!(
                "{} raw keys: a filter holds at most {MAX_RAW_KEYS}",
                keys.len()
            ))
        })?;
        let m = Match {
            family: None,
            // `protocol arp` sets it, beside the match.
            arp: false,
            src: raw
                .src
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(de::Error::custom)?,
            dst: raw
                .dst
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(de::Error::custom)?,
            proto: raw
                .proto
                .as_deref()
                .map(parse_protocol)
                .transpose()
                .map_err(de::Error::custom)?,
            sport: raw
                .sport
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(de::Error::custom)?,
            dport: raw
                .dport
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(de::Error::custom)?,
            dscp: raw
                .dscp
                .as_deref()
                .map(parse_dscp)
                .transpose()
                .map_err(de::Error::custom)?,
            vlan: raw
                .vlan
                .as_deref()
                .map(|v| {
                    v.parse::<u16>()
                        .ok()
                        .filter(|&v| v < 4095)
                        .ok_or_else(|| ValueError::Vlan(v.to_owned()))
                })
                .transpose()
                .map_err(de::Error::custom)?,
            raw: keys,
        };
        if (m.sport.is_some() || m.dport.is_some())
            && m.proto.is_some_and(|p| ![6, 17, 132, 136].contains(&p))
        {
            return Err(de::Error::custom(
                "ports only exist for tcp, udp, sctp and udplite",
            ));
        }
        Ok(Self(m))
    }
}

/// Written back as the same inline table it is read from (the daemon's state file).
impl Serialize for MatchSection {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let m = &self.0;
        let mut map = s.serialize_map(None)?;
        if let Some(v) = m.src {
            map.serialize_entry("src", &v.to_string())?;
        }
        if let Some(v) = m.dst {
            map.serialize_entry("dst", &v.to_string())?;
        }
        if let Some(v) = m.proto {
            map.serialize_entry("proto", &v.to_string())?;
        }
        if let Some(v) = m.sport {
            map.serialize_entry("sport", &v.to_string())?;
        }
        if let Some(v) = m.dport {
            map.serialize_entry("dport", &v.to_string())?;
        }
        if let Some(v) = m.dscp {
            map.serialize_entry("dscp", &v.to_string())?;
        }
        if let Some(v) = m.vlan {
            map.serialize_entry("vlan", &v.to_string())?;
        }
        if !m.raw.is_empty() {
            let keys: Vec<String> = m.raw.as_slice().iter().map(ToString::to_string).collect();
            map.serialize_entry("raw", &keys)?;
        }
        map.end()
    }
}

/// `[[interface.filter]]`: `prio`, `protocol`, `match`, `classid` (and, as `htb-cli` shows it,
/// `kind` and `handle`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSection {
    /// Evaluation order, lower first (default 0).
    #[serde(default)]
    pub prio: u32,
    /// tc's `protocol`: `ip`, `ipv6`, `arp`, `802.1q` or `all` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// How `htb-cli filter show` presents it: `u32` or `flower` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The tc handle it is shown with (`800::800`, `0x1`); assigned when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// The match; `{}` matches everything.
    #[serde(rename = "match", default)]
    pub matcher: MatchSection,
    /// Target class; a u32 hash table (`divisor`) and a `link` may have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classid: Option<Located<ClassIdValue>>,
    /// u32: this filter is a hash table with this many buckets (its `handle` is `X:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divisor: Option<u16>,
    /// u32: packets it matches go on to this hash table (`"2:"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// u32: with `link`, the bits that pick the bucket (`hashkey mask M`), e.g. `0x000000ff`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_mask: Option<u32>,
    /// u32: with `hash_mask`, the byte offset of the hashed word (`at 16`: IPv4 destination).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_at: Option<u32>,
    /// `action police …`: `{ rate = "5mbit", burst = "20k", exceed = "drop" }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub police: Option<Located<PoliceSection>>,
    /// `action mirred egress redirect dev IFB` (filters of an ingress qdisc only): what it
    /// matches is shaped by that IFB port's tree first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<Located<InterfaceName>>,
}

/// A filter's policer (tc's `police rate R burst B [mtu M] [peakrate P] [overhead O] [mpu U]
/// [linklayer L] conform-exceed EXCEED/CONFORM`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoliceSection {
    /// The bucket's rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateValue>,
    /// Its depth in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<SizeValue>,
    /// Longer packets exceed (default 2040 bytes with a rate, as tc's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<SizeValue>,
    /// A second bucket, `mtu` deep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peakrate: Option<RateValue>,
    /// Bytes added to each packet's length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<u16>,
    /// Minimum packet unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpu: Option<u16>,
    /// `ethernet` or `atm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linklayer: Option<LinkLayerValue>,
    /// Verdict over the rate: `reclassify` (default), `drop`, `continue`, `pipe`, `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exceed: Option<String>,
    /// Verdict within it: `ok` (default), `pipe`, `continue`, `drop`, `reclassify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conform: Option<String>,
}

impl PoliceSection {
    /// The policer these options make, checked as tc checks them.
    ///
    /// # Errors
    /// An unknown verdict, a size over 4 GiB, or what tc refuses.
    pub fn config(&self) -> Result<PoliceConfig, ValueError> {
        let verdict = |v: &Option<String>, default: ControlAction| match v {
            None => Ok(default),
            Some(s) => ControlAction::parse(s).ok_or_else(|| ValueError::PoliceVerdict(s.clone())),
        };
        let bytes = |v: Option<SizeValue>, what: &'static str| {
            v.map_or(Ok(0), |v| {
                u32::try_from(v.0).map_err(|_| ValueError::PoliceTooLarge(what))
            })
        };
        let defaults = PoliceConfig::default();
        let config = PoliceConfig {
            rate: self.rate.map(|r| r.0),
            burst: bytes(self.burst, "burst")?,
            mtu: bytes(self.mtu, "mtu")?,
            peakrate: self.peakrate.map(|r| r.0),
            adjust: htb_core::LengthAdjust {
                overhead: self.overhead.unwrap_or(0),
                mpu: self.mpu.unwrap_or(0),
                link_layer: self.linklayer.map(|l| l.0).unwrap_or_default(),
            },
            exceed: verdict(&self.exceed, defaults.exceed)?,
            conform: verdict(&self.conform, defaults.conform)?,
        };
        config.check().map_err(ValueError::Police)?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    /// A UDP packet to 10.201.2.2:5201, with nothing else a filter could look at.
    fn packet() -> PacketInfo {
        PacketInfo {
            dst: Some(Ipv4Addr::new(10, 201, 2, 2).into()),
            proto: Some(17),
            dport: Some(5201),
            ..PacketInfo::default()
        }
    }

    #[test]
    fn names() {
        assert_eq!(parse_protocol("UDP"), Ok(17));
        assert_eq!(parse_dscp("af21"), Ok(18));
        assert_eq!(parse_dscp("cs1"), Ok(8));
        assert_eq!(parse_dscp("ef"), Ok(46));
        assert!(parse_dscp("64").is_err());
    }

    #[test]
    fn config_sections() {
        #[derive(Debug, Deserialize)]
        struct Doc {
            filter: Vec<FilterSection>,
        }
        let doc: Doc = toml::from_str(
            "[[filter]]\nprio = 1\nmatch = { dst = \"10.201.2.0/24\", proto = \"udp\", dport = \"5201\" }\nclassid = \"1:20\"\n\
             [[filter]]\nmatch = { dscp = \"ef\", sport = 53 }\nclassid = \"1:30\"\n",
        )
        .unwrap();
        assert!(doc.filter[0].matcher.0.matches(&packet()));
        assert_eq!(doc.filter[1].matcher.0.dscp, Some(46));
        let err =
            toml::from_str::<Doc>("[[filter]]\nmatch = { dport = \"x\" }\nclassid = \"1:1\"\n")
                .unwrap_err();
        assert!(err.message().contains("invalid port"), "{}", err.message());
        let err = toml::from_str::<Doc>(
            "[[filter]]\nmatch = { proto = \"icmp\", dport = 1 }\nclassid = \"1:1\"\n",
        )
        .unwrap_err();
        assert!(
            err.message().contains("ports only exist"),
            "{}",
            err.message()
        );
        // u32's general keys: read, kept, written back as read.
        let doc: Doc = toml::from_str(
            "[[filter]]\nmatch = { proto = \"tcp\", raw = [\"05000000/0f000000 at 0\", \"00100000/00ff0000 at 32\"] }\nclassid = \"1:10\"\n",
        )
        .unwrap();
        let m = doc.filter[0].matcher.0;
        assert_eq!(m.raw.as_slice().len(), 2);
        assert_eq!(m.raw.as_slice()[1].at, 32);
        let written = toml::to_string(&doc.filter[0]).unwrap();
        assert!(
            written.contains("raw = [\"05000000/0f000000 at 0\", \"00100000/00ff0000 at 32\"]"),
            "{written}"
        );
        let err = toml::from_str::<Doc>(
            "[[filter]]\nmatch = { raw = [\"1/1 at 0\", \"1/1 at 4\", \"1/1 at 8\", \"1/1 at 12\", \"1/1 at 16\"] }\nclassid = \"1:1\"\n",
        )
        .unwrap_err();
        assert!(err.message().contains("at most 4"), "{}", err.message());
        let err = toml::from_str::<Doc>("[[filter]]\nmatch = { port = 1 }\nclassid = \"1:1\"\n")
            .unwrap_err();
        assert!(
            err.message().contains("unknown field `port`"),
            "{}",
            err.message()
        );
    }
}
