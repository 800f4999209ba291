//! tc's filter `protocol` (the `ETH_P_*` a filter is attached for), typed on the wire: htb-cli
//! reads it once, htbd never parses it again.

use std::fmt;

use htb_classify::Family;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// tc's filter `protocol`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `all` (ETH_P_ALL): any frame.
    #[default]
    All,
    /// `ip`: IPv4.
    Ip,
    /// `ipv6`.
    Ipv6,
    /// `802.1q`: VLAN-tagged frames.
    Dot1q,
    /// `arp`: ARP frames (bridge mode; in router mode the kernel handles ARP).
    Arp,
}

/// A protocol name htbd does not filter by.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid protocol {0:?}: ip, ipv6, arp, 802.1q or all")]
pub struct UnknownProtocol(pub String);

impl Protocol {
    /// Parses tc's names (`ll_proto_a2n`'s, case-insensitive).
    ///
    /// # Errors
    /// An unknown name.
    pub fn parse(s: &str) -> Result<Self, UnknownProtocol> {
        match s.to_ascii_lowercase().as_str() {
            "all" => Ok(Self::All),
            "ip" | "ipv4" => Ok(Self::Ip),
            "ipv6" => Ok(Self::Ipv6),
            "802.1q" | "8021q" | "802_1q" => Ok(Self::Dot1q),
            "arp" => Ok(Self::Arp),
            _ => Err(UnknownProtocol(s.to_owned())),
        }
    }

    /// The name tc prints (`802.1Q` in capitals, as `ll_proto_n2a` does).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Dot1q => "802.1Q",
            other => other.wire_name(),
        }
    }

    /// The name on the wire, as command lines spell it.
    fn wire_name(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Ip => "ip",
            Self::Ipv6 => "ipv6",
            Self::Dot1q => "802.1q",
            Self::Arp => "arp",
        }
    }

    /// The IP version it restricts filters to.
    #[must_use]
    pub fn family(self) -> Option<Family> {
        match self {
            Self::Ip => Some(Family::V4),
            Self::Ipv6 => Some(Family::V6),
            Self::All | Self::Dot1q | Self::Arp => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// As text (`"ip"`, `"802.1q"`), the form older versions wrote.
impl Serialize for Protocol {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.wire_name())
    }
}

impl<'de> Deserialize<'de> for Protocol {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_and_written_as_before() {
        for (text, p) in [
            ("all", Protocol::All),
            ("ip", Protocol::Ip),
            ("ipv6", Protocol::Ipv6),
            ("802.1q", Protocol::Dot1q),
            ("arp", Protocol::Arp),
        ] {
            let json = format!("\"{text}\"");
            assert_eq!(serde_json::from_str::<Protocol>(&json).unwrap(), p);
            assert_eq!(serde_json::to_string(&p).unwrap(), json);
        }
        assert_eq!(Protocol::parse("802.1Q"), Ok(Protocol::Dot1q));
        assert_eq!(Protocol::Dot1q.name(), "802.1Q");
        assert!(serde_json::from_str::<Protocol>("\"ipx\"").is_err());
    }
}
