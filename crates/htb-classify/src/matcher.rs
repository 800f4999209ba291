//! The keys of one filter: prefixes, protocol, ports, DSCP, VLAN.

use alloc::format;
use alloc::string::ToString;
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;
use core::str::FromStr;

use crate::packet::{Family, PacketInfo};
use crate::parse_error::ParseError;
use crate::raw_key::{Headers, MAX_RAW_KEYS, RawKeys};

/// A match field the classifier cannot hold, as a filter's match is read from the control
/// socket or htbd's journal (each names the field and why).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MatchError {
    /// DSCP is the top 6 bits of the traffic class.
    #[error("dscp {0}: must be 0 to 63 (6 bits)")]
    Dscp(u8),
    /// A VLAN id is 12 bits and 4095 is reserved (IEEE 802.1Q).
    #[error("vlan {0}: must be 0 to 4094")]
    Vlan(u16),
    /// A port range whose first port is above its last matches nothing.
    #[error("{field} {first}-{last}: an empty port range (first above last)")]
    EmptyPorts {
        /// `sport` or `dport`.
        field: &'static str,
        /// First port.
        first: u16,
        /// Last port.
        last: u16,
    },
    /// A u32 key's offset beyond what a key holds.
    #[error("raw: u32 key at {0}: offsets stop at 65535")]
    KeyOffset(u32),
    /// More general keys than a filter holds inline.
    #[error("raw: {0} u32 keys at offsets: a filter holds at most {MAX_RAW_KEYS}")]
    TooManyKeys(usize),
}

/// An address prefix, `10.0.0.0/8` or `2001:db8::/32`; a bare address is a host prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpPrefix {
    addr: IpAddr,
    len: u8,
}

impl IpPrefix {
    /// `addr/len`, `None` when `len` is wider than the address.
    #[must_use]
    pub fn new(addr: IpAddr, len: u8) -> Option<Self> {
        (len <= Family::of(addr).bits()).then_some(Self { addr, len })
    }

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

    /// The address family.
    #[must_use]
    pub fn family(&self) -> Family {
        Family::of(self.addr)
    }

    /// The network bits (the address with the host bits cleared), as a number.
    #[must_use]
    pub fn network_bits(&self) -> u128 {
        masked(self.addr, self.len)
    }

    /// Whether `ip` lies in this prefix (never across address families).
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        Family::of(ip) == self.family() && masked(ip, self.len) == self.network_bits()
    }

    /// The packets both prefixes hold: the longer one if it lies in the shorter, `None` when
    /// they are disjoint.
    #[must_use]
    pub fn intersect(self, other: Self) -> Option<Self> {
        let (short, long) = if self.len <= other.len {
            (self, other)
        } else {
            (other, self)
        };
        short.contains(long.addr).then_some(long)
    }
}

/// `ip`'s top `len` bits as a number (the rest zero); IPv4 in the low 32 bits.
pub(crate) fn masked(ip: IpAddr, len: u8) -> u128 {
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u128::from(u32::from(v4) & mask)
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(v6) & mask
        }
    }
}

impl FromStr for IpPrefix {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| ParseError::Address(addr.to_string()))?;
        let max = Family::of(addr).bits();
        let len = match len {
            None => max,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|&l| l <= max)
                .ok_or_else(|| ParseError::PrefixLength(l.to_string()))?,
        };
        Ok(Self { addr, len })
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// As text, `10.0.0.0/8`: the form the control socket's wire has always carried.
#[cfg(feature = "serde")]
impl serde::Serialize for IpPrefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for IpPrefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = IpPrefix;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address prefix such as \"10.0.0.0/8\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<IpPrefix, E> {
                v.parse().map_err(|e| E::custom(format_args!("{v:?}: {e}")))
            }
        }
        d.deserialize_str(V)
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

    /// The one port this range holds, if it holds one.
    #[must_use]
    pub fn single(&self) -> Option<u16> {
        (self.first == self.last).then_some(self.first)
    }

    /// The ports both hold, `None` when none.
    #[must_use]
    pub fn intersect(self, other: Self) -> Option<Self> {
        let (first, last) = (self.first.max(other.first), self.last.min(other.last));
        (first <= last).then_some(Self { first, last })
    }
}

impl FromStr for PortRange {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        let port = |p: &str| {
            p.trim()
                .parse::<u16>()
                .map_err(|_| ParseError::Port(p.to_string()))
        };
        let (first, last) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(s)?, port(s)?),
        };
        if first > last {
            return Err(ParseError::EmptyRange(s.to_string()));
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
    /// Only ARP frames (tc's `protocol arp`).
    pub arp: bool,
    /// u32's general keys (words at offsets), for what the fields above do not express.
    pub raw: RawKeys,
}

/// Both keys, or the one given; `None` in the outer option when they cannot both hold.
fn both<T: Copy>(
    a: Option<T>,
    b: Option<T>,
    meet: impl Fn(T, T) -> Option<T>,
) -> Option<Option<T>> {
    match (a, b) {
        (Some(a), Some(b)) => meet(a, b).map(Some),
        (a, b) => Some(a.or(b)),
    }
}

fn equal<T: PartialEq>(a: T, b: T) -> Option<T> {
    (a == b).then_some(a)
}

impl Match {
    /// The highest DSCP (6 bits).
    pub const MAX_DSCP: u8 = 63;
    /// The highest VLAN id (12 bits; 4095 is reserved).
    pub const MAX_VLAN: u16 = 4094;

    /// In words, as `htb-cli explain` and the console say it: `dst 10.0.3.7/32 proto 6 dport
    /// 443` (`everything` for an empty match). Unlike [`Display`](fmt::Display), which
    /// writes every key, it leaves out the family (the filter's protocol says it) and counts
    /// the u32 keys rather than listing them.
    #[must_use]
    pub fn words(&self) -> Words<'_> {
        Words(self)
    }

    /// Whether `p` matches every field key of this match (a key the packet lacks never
    /// matches); the general keys need the packet's bytes: [`matches_headers`](Self::matches_headers).
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
        check(self.family, p.family(), |w, g| w == g)
            && check(self.src, p.src, |w, g| w.contains(g))
            && check(self.dst, p.dst, |w, g| w.contains(g))
            && check(self.proto, p.proto, |w, g| w == g)
            && check(self.sport, p.sport, |w, g| w.contains(g))
            && check(self.dport, p.dport, |w, g| w.contains(g))
            && check(self.dscp, p.dscp, |w, g| w == g)
            && check(self.vlan, p.vlan, |w, g| w == g)
            && (!self.arp || p.arp)
    }

    /// [`matches`](Self::matches), and the general keys against the packet's bytes.
    #[must_use]
    pub fn matches_headers(&self, p: &PacketInfo, h: &Headers<'_>) -> bool {
        self.matches(p) && self.raw.matches(h)
    }

    /// Whether no key is given (matches everything).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The one family every packet it matches has, if its keys fix one; `Err(())` when its
    /// keys disagree (a v4 source with a v6 destination, `protocol ip` with a v6 prefix), so
    /// it matches nothing.
    #[allow(clippy::result_unit_err)]
    pub fn fixed_family(&self) -> Result<Option<Family>, ()> {
        if self.arp && (self.family.is_some() || self.src.is_some() || self.dst.is_some()) {
            // An ARP frame has no IP addresses.
            return Err(());
        }
        let mut family = self.family;
        for prefix in [self.src, self.dst].into_iter().flatten() {
            match family {
                Some(f) if f != prefix.family() => return Err(()),
                _ => family = Some(prefix.family()),
            }
        }
        Ok(family)
    }

    /// The packets both match, as one match; `None` when no packet can match both. This is
    /// how a u32 `link` is flattened: the linking filter's keys AND each linked filter's.
    #[must_use]
    pub fn intersect(&self, other: &Self) -> Option<Self> {
        let m = Self {
            family: both(self.family, other.family, equal)?,
            src: both(self.src, other.src, IpPrefix::intersect)?,
            dst: both(self.dst, other.dst, IpPrefix::intersect)?,
            proto: both(self.proto, other.proto, equal)?,
            sport: both(self.sport, other.sport, PortRange::intersect)?,
            dport: both(self.dport, other.dport, PortRange::intersect)?,
            dscp: both(self.dscp, other.dscp, equal)?,
            vlan: both(self.vlan, other.vlan, equal)?,
            arp: self.arp || other.arp,
            raw: self.raw.and(&other.raw)?,
        };
        m.fixed_family().ok().map(|_| m)
    }
}

impl Match {
    /// The same match without the raw keys its addresses already imply: a u32 `link` from a
    /// hash bucket whose selector reads part of an address (`match u8 1 0xff at 18` for
    /// bucket 1 of a table hashed on the third byte) says nothing more once the linked
    /// filter's `/32` fixes that byte, and the classifier keeps its fast path for plain
    /// address filters. `None` when an address contradicts a key: the match is empty.
    #[must_use]
    pub fn without_implied_keys(self) -> Option<Self> {
        let mut kept = RawKeys::default();
        for key in self.raw.as_slice() {
            let word = (!key.nexthdr).then(|| self.address_word(key.at)).flatten();
            match word {
                Some((value, fixed)) if key.mask & !fixed == 0 => {
                    if value & key.mask != key.value & key.mask {
                        return None;
                    }
                }
                _ => kept = kept.with(*key)?,
            }
        }
        Some(Self { raw: kept, ..self })
    }

    /// The 32-bit word at network-header offset `at` (a multiple of 4) as this match's
    /// addresses fix it: its value and the bits fixed (`None`: no address covers that word).
    #[must_use]
    pub fn address_word(&self, at: u16) -> Option<(u32, u32)> {
        let (prefix, word) = match (self.fixed_family().ok().flatten(), at) {
            (Some(Family::V4), 12) => (self.src?, 0),
            (Some(Family::V4), 16) => (self.dst?, 0),
            (Some(Family::V6), 8 | 12 | 16 | 20) => (self.src?, (at - 8) / 4),
            (Some(Family::V6), 24 | 28 | 32 | 36) => (self.dst?, (at - 24) / 4),
            _ => return None,
        };
        let width = match prefix.addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let (bits, len) = (masked(prefix.addr, prefix.len), u32::from(prefix.len));
        let shift = width - 32 * (u32::from(word) + 1);
        let value = (bits >> shift) as u32;
        let covered = len.saturating_sub(32 * u32::from(word)).min(32);
        let fixed = !u32::MAX.checked_shr(covered).unwrap_or(0);
        Some((value, fixed))
    }
}

/// [`Match::words`]: a match in words.
#[derive(Clone, Copy, Debug)]
pub struct Words<'a>(&'a Match);

impl fmt::Display for Words<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        let mut parts = Vec::new();
        if let Some(p) = m.src {
            parts.push(format!("src {p}"));
        }
        if let Some(p) = m.dst {
            parts.push(format!("dst {p}"));
        }
        if let Some(p) = m.proto {
            parts.push(format!("proto {p}"));
        }
        if let Some(r) = m.sport {
            parts.push(format!("sport {r}"));
        }
        if let Some(r) = m.dport {
            parts.push(format!("dport {r}"));
        }
        if let Some(d) = m.dscp {
            parts.push(format!("dscp {d}"));
        }
        if let Some(v) = m.vlan {
            parts.push(format!("vlan {v}"));
        }
        if !m.raw.is_empty() {
            parts.push(format!("{} u32 keys", m.raw.as_slice().len()));
        }
        if parts.is_empty() {
            f.write_str("everything")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match self.family {
            Some(Family::V4) => parts.push("ip".to_string()),
            Some(Family::V6) => parts.push("ipv6".to_string()),
            None => {}
        }
        if self.arp {
            parts.push("arp".to_string());
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
        for k in self.raw.as_slice() {
            parts.push(format!("key {k}"));
        }
        if parts.is_empty() {
            f.write_str("all")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw_key::RawKey;

    fn third_byte(value: u32) -> RawKeys {
        RawKeys::new(&[RawKey {
            at: 16,
            nexthdr: false,
            mask: 0x0000_ff00,
            value: value << 8,
        }])
        .unwrap()
    }

    /// In words as `htb-cli explain` and the console have always said it: no family, the u32
    /// keys counted, `everything` for an empty match.
    #[test]
    fn words_say_what_explain_says() {
        let m = Match {
            family: Some(Family::V4),
            src: Some("10.0.0.0/8".parse().unwrap()),
            dst: Some("10.0.3.7".parse().unwrap()),
            proto: Some(6),
            sport: Some(PortRange {
                first: 1024,
                last: 2047,
            }),
            dport: Some(PortRange {
                first: 443,
                last: 443,
            }),
            dscp: Some(46),
            vlan: Some(7),
            raw: third_byte(1),
            ..Match::default()
        };
        assert_eq!(
            m.words().to_string(),
            "src 10.0.0.0/8 dst 10.0.3.7/32 proto 6 sport 1024-2047 dport 443 dscp 46 vlan 7 1 u32 keys"
        );
        assert_eq!(Match::default().words().to_string(), "everything");
    }

    /// A key on the destination's third byte goes once a `/32` (or `/24`) fixes that byte,
    /// agreeing; stays for a `/16`; and a contradicting address leaves nothing to match.
    #[test]
    fn keys_the_addresses_imply_go() {
        let with = |dst: &str, raw| Match {
            dst: Some(dst.parse().unwrap()),
            raw,
            ..Match::default()
        };
        let plain = with("10.0.1.6/32", RawKeys::default());
        assert_eq!(
            with("10.0.1.6/32", third_byte(1)).without_implied_keys(),
            Some(plain)
        );
        assert!(
            with("10.0.1.0/24", third_byte(1))
                .without_implied_keys()
                .is_some_and(|m| m.raw.is_empty())
        );
        assert_eq!(
            with("10.0.0.0/16", third_byte(1)).without_implied_keys(),
            Some(with("10.0.0.0/16", third_byte(1))),
            "the /16 leaves the byte open"
        );
        assert_eq!(
            with("10.0.2.6/32", third_byte(1)).without_implied_keys(),
            None
        );
        let v6 = Match {
            dst: Some("fd00:1:302:400::/64".parse().unwrap()),
            raw: RawKeys::new(&[RawKey {
                at: 28,
                nexthdr: false,
                mask: 0xff00_0000,
                value: 0x0300_0000,
            }])
            .unwrap(),
            ..Match::default()
        };
        assert!(v6.without_implied_keys().is_some_and(|m| m.raw.is_empty()));
    }
}
