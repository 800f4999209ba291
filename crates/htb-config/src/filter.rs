//! Filters: which class a packet goes to (`[[interface.filter]]`, and tc's `u32`/`flower`
//! matches in the CLI). A filter matches when every key it names matches; filters are tried
//! in `prio` order (lowest first, then in the order given), the first match wins.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use htb_core::ClassId;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::error::Located;
use crate::values::ClassIdValue;

/// What a filter can look at in a packet; `None` where the packet does not have it (not IP,
/// truncated, a later fragment, …).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketInfo {
    /// Outer VLAN id.
    pub vlan: Option<u16>,
    /// IPv4 or IPv6 source.
    pub src: Option<IpAddr>,
    /// IPv4 or IPv6 destination.
    pub dst: Option<IpAddr>,
    /// IP protocol / IPv6 next header of the transport.
    pub proto: Option<u8>,
    /// Transport source port (TCP, UDP, SCTP, UDP-Lite).
    pub sport: Option<u16>,
    /// Transport destination port.
    pub dport: Option<u16>,
    /// DSCP (the upper six bits of the TOS / traffic class byte).
    pub dscp: Option<u8>,
}

/// An address prefix, `10.0.0.0/8` or `2001:db8::/32`; a bare address is a host prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpPrefix {
    addr: IpAddr,
    len: u8,
}

impl IpPrefix {
    /// The network address as given.
    #[must_use]
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    #[must_use]
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// Whether `ip` lies in this prefix (never across address families).
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for IpPrefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("invalid address {addr:?}"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|&l| l <= max)
                .ok_or_else(|| format!("invalid prefix length {l:?}"))?,
        };
        Ok(Self { addr, len })
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A port or an inclusive range, `5201` or `5000-5100`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (inclusive).
    pub last: u16,
}

impl PortRange {
    /// Whether `port` is in the range.
    #[must_use]
    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

impl FromStr for PortRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let port = |p: &str| {
            p.trim()
                .parse::<u16>()
                .map_err(|_| format!("invalid port {p:?}"))
        };
        let (first, last) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(s)?, port(s)?),
        };
        if first > last {
            return Err(format!("port range {s:?} is empty"));
        }
        Ok(Self { first, last })
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// IP protocol by name (`tcp`, `udp`, `icmp`, `icmpv6`, `sctp`, `gre`, `esp`) or number.
pub fn parse_protocol(s: &str) -> Result<u8, String> {
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
            .map_err(|_| format!("invalid protocol {s:?}: a name like tcp/udp/icmp or 0-255")),
    }
}

/// DSCP by number (0–63) or name (`be`, `ef`, `cs0`–`cs7`, `af11`–`af43`, `va`).
pub fn parse_dscp(s: &str) -> Result<u8, String> {
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
        .ok_or_else(|| format!("invalid dscp {s:?}: 0-63 or a name like ef, cs1, af21"))
}

/// An IP version a filter is restricted to (tc's `protocol ip` / `protocol ipv6`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 (`protocol ip`).
    V4,
    /// IPv6 (`protocol ipv6`).
    V6,
}

/// tc's filter `protocol`: `ip`, `ipv6`, `802.1q` or `all` (the default).
///
/// # Errors
/// An unknown protocol name.
pub fn parse_family(s: &str) -> Result<Option<Family>, String> {
    match s.to_ascii_lowercase().as_str() {
        "ip" | "ipv4" => Ok(Some(Family::V4)),
        "ipv6" => Ok(Some(Family::V6)),
        "all" | "802.1q" | "8021q" | "802_1q" => Ok(None),
        _ => Err(format!("invalid protocol {s:?}: ip, ipv6, 802.1q or all")),
    }
}

/// The match part of a filter: every key given must match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Match {
    /// IP version (from the filter's `protocol`).
    pub family: Option<Family>,
    /// Source prefix.
    pub src: Option<IpPrefix>,
    /// Destination prefix.
    pub dst: Option<IpPrefix>,
    /// IP protocol.
    pub proto: Option<u8>,
    /// Source port(s).
    pub sport: Option<PortRange>,
    /// Destination port(s).
    pub dport: Option<PortRange>,
    /// DSCP.
    pub dscp: Option<u8>,
    /// VLAN id.
    pub vlan: Option<u16>,
}

impl Match {
    /// Whether `p` matches every key of this match (a key the packet lacks never matches).
    #[must_use]
    pub fn matches(&self, p: &PacketInfo) -> bool {
        fn check<T: Copy, V: Copy>(
            want: Option<T>,
            got: Option<V>,
            ok: impl Fn(T, V) -> bool,
        ) -> bool {
            match want {
                None => true,
                Some(w) => got.is_some_and(|g| ok(w, g)),
            }
        }
        let family = p
            .src
            .map(|a| if a.is_ipv4() { Family::V4 } else { Family::V6 });
        check(self.family, family, |w, g| w == g)
            && check(self.src, p.src, |w, g| w.contains(g))
            && check(self.dst, p.dst, |w, g| w.contains(g))
            && check(self.proto, p.proto, |w, g| w == g)
            && check(self.sport, p.sport, |w, g| w.contains(g))
            && check(self.dport, p.dport, |w, g| w.contains(g))
            && check(self.dscp, p.dscp, |w, g| w == g)
            && check(self.vlan, p.vlan, |w, g| w == g)
    }

    /// Whether no key is given (matches everything).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match self.family {
            Some(Family::V4) => parts.push("ip".to_owned()),
            Some(Family::V6) => parts.push("ipv6".to_owned()),
            None => {}
        }
        if let Some(v) = self.src {
            parts.push(format!("src {v}"));
        }
        if let Some(v) = self.dst {
            parts.push(format!("dst {v}"));
        }
        if let Some(v) = self.proto {
            parts.push(format!("proto {v}"));
        }
        if let Some(v) = self.sport {
            parts.push(format!("sport {v}"));
        }
        if let Some(v) = self.dport {
            parts.push(format!("dport {v}"));
        }
        if let Some(v) = self.dscp {
            parts.push(format!("dscp {v}"));
        }
        if let Some(v) = self.vlan {
            parts.push(format!("vlan {v}"));
        }
        if parts.is_empty() {
            f.write_str("all")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

/// A filter: match, priority, target class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filter {
    /// Lower first.
    pub prio: u32,
    /// What to match.
    pub matcher: Match,
    /// Where matching packets go.
    pub class: ClassId,
}

/// Filters in evaluation order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classifier {
    filters: Vec<Filter>,
}

impl Classifier {
    /// Orders `filters` by prio (stable: equal prios keep their order).
    #[must_use]
    pub fn new(mut filters: Vec<Filter>) -> Self {
        filters.sort_by_key(|f| f.prio);
        Self { filters }
    }

    /// The class of the first matching filter.
    #[must_use]
    pub fn classify(&self, p: &PacketInfo) -> Option<ClassId> {
        self.classify_index(p).map(|i| self.filters[i].class)
    }

    /// The position (in [`filters`](Self::filters)) of the first matching filter.
    #[must_use]
    pub fn classify_index(&self, p: &PacketInfo) -> Option<usize> {
        self.filters.iter().position(|f| f.matcher.matches(p))
    }

    /// The filters in evaluation order.
    #[must_use]
    pub fn filters(&self) -> &[Filter] {
        &self.filters
    }
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
/// vlan = 10 }` in the config.
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
        }
        fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
            text(d).map(Some)
        }
        let raw = Raw::deserialize(d)?;
        let e = |r: Result<_, String>| r.map_err(de::Error::custom);
        let m = Match {
            family: None,
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
            vlan: e(raw
                .vlan
                .as_deref()
                .map(|v| {
                    v.parse::<u16>()
                        .ok()
                        .filter(|&v| v < 4095)
                        .ok_or_else(|| format!("invalid vlan {v:?}: 0-4094"))
                })
                .transpose())?,
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
    /// tc's `protocol`: `ip`, `ipv6`, `802.1q` or `all` (default).
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
    /// Target class.
    pub classid: Located<ClassIdValue>,
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn packet() -> PacketInfo {
        PacketInfo {
            vlan: None,
            src: Some(IpAddr::V4(Ipv4Addr::new(10, 201, 1, 2))),
            dst: Some(IpAddr::V4(Ipv4Addr::new(10, 201, 2, 2))),
            proto: Some(17),
            sport: Some(40000),
            dport: Some(5201),
            dscp: Some(46),
        }
    }

    #[test]
    fn prefixes_ports_and_names() {
        let p: IpPrefix = "10.201.2.0/24".parse().unwrap();
        assert!(p.contains("10.201.2.99".parse().unwrap()));
        assert!(!p.contains("10.201.3.1".parse().unwrap()));
        assert!(!p.contains("::1".parse().unwrap()));
        let p6: IpPrefix = "2001:db8::/32".parse().unwrap();
        assert!(p6.contains("2001:db8:1::5".parse().unwrap()));
        let all: IpPrefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<IpPrefix>().is_err());
        assert_eq!(
            "5000-5100".parse::<PortRange>().unwrap(),
            PortRange {
                first: 5000,
                last: 5100
            }
        );
        assert!("5100-5000".parse::<PortRange>().is_err());
        assert_eq!(parse_protocol("UDP"), Ok(17));
        assert_eq!(parse_dscp("af21"), Ok(18));
        assert_eq!(parse_dscp("cs1"), Ok(8));
        assert_eq!(parse_dscp("ef"), Ok(46));
        assert!(parse_dscp("64").is_err());
    }

    #[test]
    fn first_matching_filter_by_prio_wins() {
        let m = |dport: &str| Match {
            dport: Some(dport.parse().unwrap()),
            ..Match::default()
        };
        let c = Classifier::new(vec![
            Filter {
                prio: 5,
                matcher: Match::default(),
                class: ClassId::new(1, 0x99),
            },
            Filter {
                prio: 1,
                matcher: m("5201"),
                class: ClassId::new(1, 0x10),
            },
            Filter {
                prio: 1,
                matcher: m("5200-5300"),
                class: ClassId::new(1, 0x11),
            },
        ]);
        assert_eq!(c.classify(&packet()), Some(ClassId::new(1, 0x10)));
        let other = PacketInfo {
            dport: Some(5250),
            ..packet()
        };
        assert_eq!(c.classify(&other), Some(ClassId::new(1, 0x11)));
        let not_ip = PacketInfo::default();
        assert_eq!(
            c.classify(&not_ip),
            Some(ClassId::new(1, 0x99)),
            "the catch-all"
        );
        let dscp = Match {
            dscp: Some(46),
            vlan: Some(7),
            ..Match::default()
        };
        assert!(!dscp.matches(&packet()), "no vlan tag: no match");
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
        let err = toml::from_str::<Doc>("[[filter]]\nmatch = { port = 1 }\nclassid = \"1:1\"\n")
            .unwrap_err();
        assert!(
            err.message().contains("unknown field `port`"),
            "{}",
            err.message()
        );
    }
}
