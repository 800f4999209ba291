//! A filter's match on the control socket's wire (htb-ipc) and in htbd's journal, which holds
//! what the socket carried: JSON such as `{"dst":"10.0.3.7/32","proto":6,"dport":[443,443]}`.
//! It is read through a mirror of that shape and checked there, once, so that a [`Match`]
//! read from a client or an old journal holds only what the classifier can match: a bad
//! field is refused as the message is read, naming the field ([`MatchError`]).
//!
//! The shape is the one the wire has always had (field names, empty fields left out, port
//! ranges as `[first, last]`, u32 keys as `{at, nexthdr, mask, value}`), so that journals and
//! clients of older versions still read. The family and `arp` are not on it: a filter's
//! `protocol` carries them, and htbd restricts the match to it.

use alloc::vec::Vec;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::matcher::{IpPrefix, Match, MatchError, PortRange};
use crate::raw_key::{RawKey, RawKeys};

/// The JSON shape of a [`Match`], before it is checked.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    src: Option<IpPrefix>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dst: Option<IpPrefix>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    proto: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sport: Option<(u16, u16)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dport: Option<(u16, u16)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dscp: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vlan: Option<u16>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    raw: Vec<WireKey>,
}

/// The JSON shape of a [`RawKey`]: its offset as the wider number older clients sent.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireKey {
    at: u32,
    #[serde(default, skip_serializing_if = "core::ops::Not::not")]
    nexthdr: bool,
    mask: u32,
    value: u32,
}

fn ports(field: &'static str, range: Option<(u16, u16)>) -> Result<Option<PortRange>, MatchError> {
    match range {
        None => Ok(None),
        Some((first, last)) if first <= last => Ok(Some(PortRange { first, last })),
        Some((first, last)) => Err(MatchError::EmptyPorts { field, first, last }),
    }
}

impl WireMatch {
    fn of(m: &Match) -> Self {
        let pair = |r: Option<PortRange>| r.map(|r| (r.first, r.last));
        Self {
            src: m.src,
            dst: m.dst,
            proto: m.proto,
            sport: pair(m.sport),
            dport: pair(m.dport),
            dscp: m.dscp,
            vlan: m.vlan,
            raw: m
                .raw
                .as_slice()
                .iter()
                .map(|k| WireKey {
                    at: u32::from(k.at),
                    nexthdr: k.nexthdr,
                    mask: k.mask,
                    value: k.value,
                })
                .collect(),
        }
    }

    /// The match, every field checked as the classifier needs it.
    fn parse(self) -> Result<Match, MatchError> {
        if let Some(d) = self.dscp.filter(|&d| d > Match::MAX_DSCP) {
            return Err(MatchError::Dscp(d));
        }
        if let Some(v) = self.vlan.filter(|&v| v > Match::MAX_VLAN) {
            return Err(MatchError::Vlan(v));
        }
        let mut raw = RawKeys::default();
        for k in &self.raw {
            let key = RawKey {
                at: u16::try_from(k.at).map_err(|_| MatchError::KeyOffset(k.at))?,
                nexthdr: k.nexthdr,
                mask: k.mask,
                // The bits outside the mask are never compared: kept as 0, as tc's
                // `pack_key` keeps them, so that one key has one form.
                value: k.value & k.mask,
            };
            // A key with mask 0 matches every packet and takes no place (`RawKeys::with`).
            raw = raw
                .with(key)
                .ok_or(MatchError::TooManyKeys(self.raw.len()))?;
        }
        Ok(Match {
            family: None,
            src: self.src,
            dst: self.dst,
            proto: self.proto,
            sport: ports("sport", self.sport)?,
            dport: ports("dport", self.dport)?,
            dscp: self.dscp,
            vlan: self.vlan,
            arp: false,
            raw,
        })
    }
}

/// As the wire's JSON; the family and `arp` are left out (the filter's `protocol` says them).
impl Serialize for Match {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WireMatch::of(self).serialize(s)
    }
}

/// Reads the wire's JSON and checks it ([`MatchError`] as the reader's error); the family is
/// `None` and `arp` false until the filter's `protocol` restricts the match.
impl<'de> Deserialize<'de> for Match {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        WireMatch::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::{String, ToString};

    fn read(text: &str) -> Result<Match, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// Every field, as htb-cli 0.1 sent it and htbd's journals hold it: read into the
    /// classifier's match, and written back byte for byte.
    #[test]
    fn todays_json_reads_and_writes_back_the_same() {
        let text = r#"{"src":"10.0.0.0/8","dst":"192.168.1.7/32","proto":6,"sport":[1024,2047],"dport":[5201,5201],"dscp":46,"vlan":100,"raw":[{"at":0,"mask":251658240,"value":83886080},{"at":12,"nexthdr":true,"mask":65280,"value":4608}]}"#;
        let m = read(text).unwrap();
        assert_eq!(m.src, Some("10.0.0.0/8".parse().unwrap()));
        assert_eq!(m.dst, Some("192.168.1.7/32".parse().unwrap()));
        assert_eq!(m.proto, Some(6));
        assert_eq!(
            m.sport,
            Some(PortRange {
                first: 1024,
                last: 2047
            })
        );
        assert_eq!(
            m.dport,
            Some(PortRange {
                first: 5201,
                last: 5201
            })
        );
        assert_eq!(
            (m.dscp, m.vlan, m.family, m.arp),
            (Some(46), Some(100), None, false)
        );
        assert_eq!(
            m.raw.as_slice(),
            [
                RawKey {
                    at: 0,
                    nexthdr: false,
                    mask: 0x0f00_0000,
                    value: 0x0500_0000
                },
                RawKey {
                    at: 12,
                    nexthdr: true,
                    mask: 0xff00,
                    value: 0x1200
                },
            ]
        );
        assert_eq!(serde_json::to_string(&m).unwrap(), text);
        let empty = read("{}").unwrap();
        assert!(empty.is_empty());
        assert_eq!(serde_json::to_string(&empty).unwrap(), "{}");
        // A bare address is a host; bits outside a key's mask are dropped; a key with mask 0
        // matches everything and is left out.
        let m = read(r#"{"dst":"10.0.0.9","raw":[{"at":4,"mask":255,"value":4660},{"at":8,"mask":0,"value":1}]}"#)
            .unwrap();
        assert_eq!(m.dst.map(|p| p.prefix_len()), Some(32));
        assert_eq!(
            m.raw.as_slice(),
            [RawKey {
                at: 4,
                nexthdr: false,
                mask: 0xff,
                value: 0x34
            }]
        );
    }

    /// What the classifier cannot hold is refused as it is read, naming the field.
    #[test]
    fn bad_fields_are_refused_with_their_name() {
        let key = r#"{"at":0,"mask":1,"value":1}"#;
        let five = [key; 5].join(",");
        for (text, says) in [
            (r#"{"dscp":64}"#.to_string(), "dscp 64: must be 0 to 63"),
            (
                r#"{"vlan":4095}"#.to_string(),
                "vlan 4095: must be 0 to 4094",
            ),
            (
                r#"{"sport":[2000,1000]}"#.to_string(),
                "sport 2000-1000: an empty port range",
            ),
            (
                r#"{"dport":[6,5]}"#.to_string(),
                "dport 6-5: an empty port range",
            ),
            (
                r#"{"raw":[{"at":65536,"mask":1,"value":0}]}"#.to_string(),
                "raw: u32 key at 65536",
            ),
            (
                alloc::format!(r#"{{"raw":[{five}]}}"#),
                "raw: 5 u32 keys at offsets: a filter holds at most 4",
            ),
            (r#"{"dst":"10.0.0.300/32"}"#.to_string(), "10.0.0.300"),
            (r#"{"dscp":300}"#.to_string(), "300"),
            (r#"{"flowid":"1:1"}"#.to_string(), "unknown field `flowid`"),
            (
                r#"{"raw":[{"at":0,"mask":1}]}"#.to_string(),
                "missing field `value`",
            ),
        ] {
            let e = read(&text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        // At the limits, accepted.
        let m = read(
            r#"{"dscp":63,"vlan":4094,"sport":[7,7],"raw":[{"at":65535,"mask":1,"value":1}]}"#,
        )
        .unwrap();
        assert_eq!((m.dscp, m.vlan), (Some(63), Some(4094)));
    }
}
