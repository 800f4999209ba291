//! Reads what the classifier, the flow hash and ECN marking need from an Ethernet frame. Every
//! access is bounds-checked: a truncated or malformed frame yields `None` fields (it matches no
//! filter that needs them) and never panics.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use htb_classify::PacketInfo;

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const ETH_P_ARP: u16 = 0x0806;
const ETH_P_PPP_SES: u16 = 0x8864;
const ETH_P_MPLS_UC: u16 = 0x8847;
const ETH_P_MPLS_MC: u16 = 0x8848;
/// PPP protocol numbers of IPv4 and IPv6 (`PPP_IP`, `PPP_IPV6`).
const PPP_IP: u16 = 0x0021;
const PPP_IPV6: u16 = 0x0057;
/// The most MPLS labels read before the payload (the kernel's flow dissector reads one).
const MPLS_MAX_LABELS: usize = 8;

/// What carries the IP packet between the Ethernet (and VLAN) header and the IP header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Encapsulation {
    /// The IP header follows the Ethernet header and its VLAN tags.
    #[default]
    None,
    /// A PPPoE session frame (RFC 2516): 6 bytes of PPPoE header, 2 of PPP protocol.
    Pppoe,
    /// An MPLS label stack (RFC 3032), IPv4 or IPv6 under its bottom label.
    Mpls,
}

/// Where the IP packet inside `frame` starts, from the network header at `at` of ethertype
/// `ethertype`: `(ethertype of the IP header, its offset, encapsulation)`; `None` when it
/// carries no IP.
fn decapsulate(frame: &[u8], ethertype: u16, at: usize) -> Option<(u16, usize, Encapsulation)> {
    match ethertype {
        ETH_P_IP | ETH_P_IPV6 => Some((ethertype, at, Encapsulation::None)),
        ETH_P_PPP_SES => {
            // Version 1, type 1, code 0 (session data); then the PPP protocol field.
            if frame.get(at)? != &0x11 || frame.get(at + 1)? != &0 {
                return None;
            }
            let inner = match be16(frame, at + 6)? {
                PPP_IP => ETH_P_IP,
                PPP_IPV6 => ETH_P_IPV6,
                _ => return None,
            };
            Some((inner, at + 8, Encapsulation::Pppoe))
        }
        ETH_P_MPLS_UC | ETH_P_MPLS_MC => {
            // Labels until the bottom of stack; the payload's type is guessed from its first
            // nibble, as the kernel's `mpls_egress` does for a popped IP packet.
            let mut label = at;
            for _ in 0..MPLS_MAX_LABELS {
                let bottom = frame.get(label + 2)? & 0x01 != 0;
                label += 4;
                if bottom {
                    let inner = match frame.get(label)? >> 4 {
                        4 => ETH_P_IP,
                        6 => ETH_P_IPV6,
                        _ => return None,
                    };
                    return Some((inner, label, Encapsulation::Mpls));
                }
            }
            None
        }
        _ => None,
    }
}

/// Transports with ports in their first four bytes.
fn has_ports(proto: u8) -> bool {
    matches!(proto, 6 | 17 | 132 | 136)
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// What the engine reads from a frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The classification fields.
    pub info: PacketInfo,
    /// Offset of the IPv4 or IPv6 header, when the frame has a whole one.
    pub l3: Option<usize>,
    /// Whether that header is IPv6.
    pub ipv6: bool,
    /// The ECN field (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub ecn: u8,
    /// A fragment (first or later): its ports must not split the datagram's flow.
    pub fragment: bool,
    /// Offset of the transport header (after IPv4 options and IPv6 extension headers), when
    /// the packet has one: u32's `nexthdr+` keys read from it.
    pub l4: Option<usize>,
    /// The frame is ARP (`cake` gives it CS7, network control).
    pub arp: bool,
    /// Offset of the network header, IP or not (after the VLAN tags): `skb_network_offset`.
    /// For PPPoE and MPLS it is the encapsulation's header; `l3` is the IP header inside.
    pub network: usize,
    /// What carries the IP header, if anything does.
    pub encapsulation: Encapsulation,
}

impl Parsed {
    /// The bytes u32's general keys read in `frame` (the one parsed): from the IP header on,
    /// with the transport header's place in them; empty for a frame that is not IP.
    #[must_use]
    pub fn headers<'a>(&self, frame: &'a [u8]) -> htb_classify::Headers<'a> {
        match self.l3 {
            Some(l3) => htb_classify::Headers {
                network: frame.get(l3..).unwrap_or_default(),
                transport: self.l4.map(|t| t - l3),
            },
            None => htb_classify::Headers::default(),
        }
    }
}

/// The classification fields of `frame`.
#[must_use]
pub fn packet_info(frame: &[u8]) -> PacketInfo {
    parse(frame).info
}

/// Everything the engine reads from `frame`.
#[must_use]
pub fn parse(frame: &[u8]) -> Parsed {
    let mut parsed = Parsed::default();
    let info = &mut parsed.info;
    let Some(mut ethertype) = be16(frame, 12) else {
        return parsed;
    };
    let mut at = 14;
    // Up to two VLAN tags (802.1ad outer, 802.1Q inner); the outer VID is reported.
    for _ in 0..2 {
        if ethertype != ETH_P_8021Q && ethertype != ETH_P_8021AD {
            break;
        }
        let Some(tci) = be16(frame, at) else {
            return parsed;
        };
        info.vlan.get_or_insert(tci & 0x0fff);
        let Some(next) = be16(frame, at + 2) else {
            return parsed;
        };
        ethertype = next;
        at += 4;
    }
    parsed.network = at;
    parsed.arp = ethertype == ETH_P_ARP;
    info.arp = parsed.arp;
    // The IP packet, behind PPPoE or MPLS where it is: classification, the flow hash and ECN
    // marking all read the inner header (the subscriber's addresses).
    let Some((ethertype, at, encapsulation)) = decapsulate(frame, ethertype, at) else {
        return parsed;
    };
    let l3 = &frame[at.min(frame.len())..];
    let transport = match ethertype {
        ETH_P_IP => ipv4(l3, info, &mut parsed.fragment),
        _ => ipv6(l3, info, &mut parsed.fragment),
    };
    if info.src.is_some() {
        parsed.l3 = Some(at);
        parsed.ipv6 = ethertype == ETH_P_IPV6;
        parsed.ecn = if parsed.ipv6 { l3[1] >> 4 } else { l3[1] } & 0b11;
        parsed.encapsulation = encapsulation;
    }
    if let Some((offset, proto)) = transport {
        info.proto = Some(proto);
        if parsed.l3.is_some() && !parsed.fragment {
            parsed.l4 = Some(at + offset);
        }
        if has_ports(proto) {
            info.sport = be16(l3, offset);
            info.dport = be16(l3, offset + 2);
            if info.dport.is_none() {
                info.sport = None;
            }
        }
    }
    parsed
}

/// Marks the IP header at `l3` Congestion Experienced if it is ECN-capable
/// (`INET_ECN_set_ce`): IPv4 with its header checksum updated (RFC 1624), IPv6 in its traffic
/// class. Returns whether the header now carries CE (false for Not-ECT, which is left alone).
pub fn set_ce(frame: &mut [u8], l3: usize, ipv6: bool) -> bool {
    match dsfield(frame, l3, ipv6).map(|ds| ds & 0b11) {
        None | Some(0) => false,
        Some(_) => change_dsfield(frame, l3, ipv6, 0xff, 0b11),
    }
}

/// Clears the DSCP of the IP header at `l3`, keeping its ECN bits (`cake`'s `wash`:
/// `ipv4_change_dsfield(iph, INET_ECN_MASK, 0)`).
pub fn wash_dscp(frame: &mut [u8], l3: usize, ipv6: bool) -> bool {
    change_dsfield(frame, l3, ipv6, 0b11, 0)
}

/// The DS field (DSCP and ECN) of the IP header at `l3`.
fn dsfield(frame: &[u8], l3: usize, ipv6: bool) -> Option<u8> {
    if ipv6 {
        let b = frame.get(l3..l3 + 2)?;
        Some((b[0] << 4) | (b[1] >> 4))
    } else {
        frame.get(l3 + 1).copied()
    }
}

/// `ipv4_change_dsfield` / `ipv6_change_dsfield`: the DS field becomes `(ds & keep) | set`;
/// IPv4's header checksum follows (RFC 1624: HC' = ~(~HC + ~m + m')).
fn change_dsfield(frame: &mut [u8], l3: usize, ipv6: bool, keep: u8, set: u8) -> bool {
    let Some(old) = dsfield(frame, l3, ipv6) else {
        return false;
    };
    let new = (old & keep) | set;
    if ipv6 {
        frame[l3] = (frame[l3] & 0xf0) | (new >> 4);
        frame[l3 + 1] = (frame[l3 + 1] & 0x0f) | (new << 4);
        return true;
    }
    if frame.len() < l3 + 12 {
        return false;
    }
    let before = u16::from_be_bytes([frame[l3], old]);
    let after = u16::from_be_bytes([frame[l3], new]);
    frame[l3 + 1] = new;
    let check = u16::from_be_bytes([frame[l3 + 10], frame[l3 + 11]]);
    let mut sum = u32::from(!check) + u32::from(!before) + u32::from(after);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    frame[l3 + 10..l3 + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    true
}

/// Parses an IPv4 header; returns the transport's offset and protocol when the packet is a
/// first (or only) fragment.
fn ipv4(b: &[u8], info: &mut PacketInfo, fragment: &mut bool) -> Option<(usize, u8)> {
    let version_ihl = *b.first()?;
    if version_ihl >> 4 != 4 || b.len() < 20 {
        return None;
    }
    let header_len = usize::from(version_ihl & 0x0f) * 4;
    if header_len < 20 {
        return None;
    }
    info.dscp = Some(b[1] >> 2);
    info.src = Some(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15])));
    info.dst = Some(IpAddr::V4(Ipv4Addr::new(b[16], b[17], b[18], b[19])));
    let flags_offset = be16(b, 6)?;
    let fragment_offset = flags_offset & 0x1fff;
    *fragment = flags_offset & 0x3fff != 0;
    if fragment_offset != 0 {
        // A later fragment: the protocol is known but there is no transport header.
        info.proto = Some(b[9]);
        return None;
    }
    (b.len() >= header_len).then_some((header_len, b[9]))
}

/// Parses an IPv6 header and its extension headers (at most eight).
fn ipv6(b: &[u8], info: &mut PacketInfo, fragment: &mut bool) -> Option<(usize, u8)> {
    if b.len() < 40 || b[0] >> 4 != 6 {
        return None;
    }
    let traffic_class = ((b[0] & 0x0f) << 4) | (b[1] >> 4);
    info.dscp = Some(traffic_class >> 2);
    let addr = |at: usize| {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&b[at..at + 16]);
        IpAddr::V6(Ipv6Addr::from(octets))
    };
    info.src = Some(addr(8));
    info.dst = Some(addr(24));
    let mut next = b[6];
    let mut at = 40;
    for _ in 0..8 {
        match next {
            // Hop-by-hop, routing, destination options: length in 8-octet units, minus one.
            0 | 43 | 60 => {
                let len = (usize::from(*b.get(at + 1)?) + 1) * 8;
                next = *b.get(at)?;
                at += len;
            }
            // Fragment header: a later fragment has no transport header.
            44 => {
                *fragment = true;
                let offset = be16(b, at + 2)? >> 3;
                next = *b.get(at)?;
                at += 8;
                if offset != 0 {
                    info.proto = Some(next);
                    return None;
                }
            }
            // Authentication header: length in 4-octet units, minus two.
            51 => {
                let len = (usize::from(*b.get(at + 1)?) + 2) * 4;
                next = *b.get(at)?;
                at += len;
            }
            _ => return (b.len() >= at).then_some((at, next)),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv4 + UDP, 10.201.1.2:40000 → 10.201.2.2:5201, DSCP EF.
    fn udp4() -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 10];
        f[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[1] = 46 << 2;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 201, 1, 2]);
        ip[16..20].copy_from_slice(&[10, 201, 2, 2]);
        f[34..36].copy_from_slice(&40000u16.to_be_bytes());
        f[36..38].copy_from_slice(&5201u16.to_be_bytes());
        f
    }

    #[test]
    fn ipv4_udp() {
        let info = packet_info(&udp4());
        assert_eq!(info.src, Some("10.201.1.2".parse().unwrap()));
        assert_eq!(info.dst, Some("10.201.2.2".parse().unwrap()));
        assert_eq!(
            (info.proto, info.sport, info.dport, info.dscp),
            (Some(17), Some(40000), Some(5201), Some(46))
        );
        assert_eq!(info.vlan, None);
    }

    #[test]
    fn arp_frames_are_arp_tagged_or_not() {
        assert!(!packet_info(&udp4()).arp);
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let info = packet_info(&arp);
        assert!(info.arp && info.src.is_none());
        // Behind a VLAN tag too (`protocol arp` on a tagged port).
        let mut tagged = arp[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a]);
        tagged.extend_from_slice(&arp[12..]);
        let info = packet_info(&tagged);
        assert_eq!((info.arp, info.vlan), (true, Some(10)));
    }

    #[test]
    fn vlan_tags_and_later_fragments() {
        let plain = udp4();
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x20, 0x0a]); // prio 1, VID 10
        tagged.extend_from_slice(&plain[12..]);
        let info = packet_info(&tagged);
        assert_eq!((info.vlan, info.dport), (Some(10), Some(5201)));

        let mut fragment = udp4();
        fragment[14 + 6..14 + 8].copy_from_slice(&100u16.to_be_bytes());
        let info = packet_info(&fragment);
        assert_eq!(
            (info.proto, info.dport, info.src.is_some()),
            (Some(17), None, true)
        );
    }

    #[test]
    fn ipv6_with_extension_header() {
        let mut f = vec![0u8; 14 + 40 + 8 + 8];
        f[12..14].copy_from_slice(&ETH_P_IPV6.to_be_bytes());
        f[14] = 0x60 | (0xb8 >> 4); // traffic class 0xb8 = DSCP 46
        f[15] = (0xb8 & 0x0f) << 4;
        f[14 + 6] = 60; // destination options
        f[14 + 8 + 15] = 1; // src ::1
        f[14 + 24] = 0x20; // dst 2000::
        f[54] = 6; // next: TCP
        f[55] = 0; // 8 bytes
        f[62..64].copy_from_slice(&443u16.to_be_bytes());
        f[64..66].copy_from_slice(&8080u16.to_be_bytes());
        let info = packet_info(&f);
        assert_eq!(info.src, Some("::1".parse().unwrap()));
        assert_eq!(info.dst, Some("2000::".parse().unwrap()));
        assert_eq!(
            (info.proto, info.sport, info.dport, info.dscp),
            (Some(6), Some(443), Some(8080), Some(46))
        );
    }

    #[test]
    fn ecn_field_and_ce_marking() {
        let mut f = udp4();
        // A real header checksum, to check the incremental update against a recomputation.
        let checksum = |ip: &[u8]| {
            let sum: u32 = (0..10)
                .filter(|&i| i != 5)
                .map(|i| u32::from(u16::from_be_bytes([ip[2 * i], ip[2 * i + 1]])))
                .sum();
            let sum = (sum & 0xffff) + (sum >> 16);
            !((sum & 0xffff) + (sum >> 16)) as u16
        };
        f[14 + 1] = (46 << 2) | 0b10; // EF, ECT(0)
        let c = checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        let p = parse(&f);
        assert_eq!(
            (p.l3, p.ipv6, p.ecn, p.fragment),
            (Some(14), false, 2, false)
        );
        assert!(set_ce(&mut f, 14, false));
        assert_eq!(f[15], (46 << 2) | 0b11, "DSCP kept, CE set");
        assert_eq!(
            u16::from_be_bytes([f[24], f[25]]),
            checksum(&f[14..34]),
            "checksum updated incrementally"
        );
        assert!(set_ce(&mut f, 14, false), "CE stays CE");
        let mut not_ect = udp4();
        let before = not_ect.clone();
        assert!(!set_ce(&mut not_ect, 14, false));
        assert_eq!(not_ect, before, "Not-ECT is left alone");
        // IPv6: ECN in the traffic class's low bits.
        let mut v6 = vec![0u8; 14 + 40 + 8];
        v6[12..14].copy_from_slice(&ETH_P_IPV6.to_be_bytes());
        v6[14] = 0x6b; // traffic class 0xb9: DSCP 46, ECT(1)
        v6[15] = 0x90;
        v6[14 + 6] = 17;
        let p = parse(&v6);
        assert_eq!((p.l3, p.ipv6, p.ecn), (Some(14), true, 1));
        assert!(set_ce(&mut v6, 14, true));
        assert_eq!(parse(&v6).ecn, 3);
        assert_eq!(parse(&v6).info.dscp, Some(46));
        // wash: the DSCP goes, ECN stays, the checksum follows.
        assert!(wash_dscp(&mut f, 14, false));
        assert_eq!(f[15], 0b11);
        assert_eq!(u16::from_be_bytes([f[24], f[25]]), checksum(&f[14..34]));
        assert!(wash_dscp(&mut v6, 14, true));
        assert_eq!((parse(&v6).info.dscp, parse(&v6).ecn), (Some(0), 3));
        assert_eq!(v6[14] >> 4, 6, "the version is untouched");
        // A first fragment is a fragment: its ports must not count in the flow hash.
        let mut first = udp4();
        first[14 + 6] = 0x20; // MF
        assert!(parse(&first).fragment);
    }

    /// `udp4()` with `encapsulation` (bytes after the MACs up to the IP header) in place of
    /// its ethertype.
    fn encapsulated(encapsulation: &[u8]) -> Vec<u8> {
        let plain = udp4();
        let mut f = plain[..12].to_vec();
        f.extend_from_slice(encapsulation);
        f.extend_from_slice(&plain[14..]);
        f
    }

    #[test]
    fn pppoe_qinq_and_mpls_carry_the_inner_ip() {
        let plain = parse(&udp4());
        // PPPoE session 0x1234, PPP protocol IPv4; behind a VLAN tag as access networks send it.
        let pppoe = [0x88, 0x64, 0x11, 0x00, 0x12, 0x34, 0x00, 0x2a, 0x00, 0x21];
        let p = parse(&encapsulated(&pppoe));
        assert_eq!((p.info, p.l3, p.network), (plain.info, Some(22), 14));
        assert_eq!(p.encapsulation, Encapsulation::Pppoe);
        let mut tagged = vec![0x81, 0x00, 0x00, 0x64];
        tagged.extend_from_slice(&pppoe);
        let p = parse(&encapsulated(&tagged));
        assert_eq!(
            (p.info.dst, p.info.vlan, p.l3),
            (plain.info.dst, Some(100), Some(26))
        );
        // PPP's IPv6 and a non-IP PPP protocol (LCP, 0xc021): the latter carries no address.
        let mut lcp = pppoe;
        lcp[8..10].copy_from_slice(&[0xc0, 0x21]);
        assert_eq!(parse(&encapsulated(&lcp)).info.src, None);
        // PPPoE discovery (0x8863) and a session frame with a bad version are not IP.
        let mut discovery = pppoe;
        discovery[1] = 0x63;
        assert_eq!(parse(&encapsulated(&discovery)).l3, None);
        let mut version = pppoe;
        version[2] = 0x21;
        assert_eq!(parse(&encapsulated(&version)).l3, None);
        // QinQ: 802.1ad outer VID 100, 802.1Q inner VID 200; the outer VID is the frame's.
        let qinq = [0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x00, 0xc8, 0x08, 0x00];
        let p = parse(&encapsulated(&qinq));
        assert_eq!(
            (p.info.dst, p.info.dport, p.info.vlan),
            (plain.info.dst, Some(5201), Some(100))
        );
        assert_eq!((p.l3, p.encapsulation), (Some(22), Encapsulation::None));
        // MPLS: two labels, the second the bottom of the stack; the payload's nibble says IPv4.
        let mpls = [0x88, 0x47, 0x00, 0x3e, 0x80, 0x40, 0x00, 0x3e, 0x81, 0x40];
        let p = parse(&encapsulated(&mpls));
        assert_eq!((p.info, p.l3, p.network), (plain.info, Some(22), 14));
        assert_eq!(p.encapsulation, Encapsulation::Mpls);
        // A stack with no bottom in eight labels, and a payload that is neither IPv4 nor IPv6.
        let mut endless = vec![0x88, 0x47];
        for _ in 0..9 {
            endless.extend_from_slice(&[0x00, 0x3e, 0x80, 0x40]);
        }
        assert_eq!(parse(&encapsulated(&endless)).l3, None);
        let mut f = encapsulated(&mpls);
        f[22] = 0x15;
        assert_eq!(parse(&f).l3, None);
        // CE marking edits the inner header (and its checksum), not the encapsulation.
        let mut f = encapsulated(&pppoe);
        f[22 + 1] = 0b10;
        let p = parse(&f);
        assert_eq!(p.ecn, 2);
        assert!(set_ce(&mut f, p.l3.unwrap(), p.ipv6));
        assert_eq!((f[23] & 0b11, &f[12..22]), (0b11, &pppoe[..]));
    }

    #[test]
    fn truncated_and_garbage_frames_never_panic() {
        let frame = udp4();
        for len in 0..frame.len() {
            let info = packet_info(&frame[..len]);
            if len < 34 {
                assert_eq!(info.src, None, "len {len}");
            }
        }
        // Deterministic pseudo-random garbage, including bogus IHL and extension chains.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let len = (x % 128) as usize;
            let frame: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect();
            let mut frame = frame;
            let p = parse(&frame);
            if let Some(l3) = p.l3 {
                let _ = set_ce(&mut frame, l3, p.ipv6);
            }
            let _ = set_ce(&mut frame, 0, false);
            let _ = set_ce(&mut frame, 100, true);
        }
        // Every truncation of the encapsulated forms.
        for encapsulation in [
            &[0x88, 0x64, 0x11, 0x00, 0x12, 0x34, 0x00, 0x2a, 0x00, 0x21][..],
            &[0x88, 0x47, 0x00, 0x3e, 0x80, 0x40, 0x00, 0x3e, 0x81, 0x40],
        ] {
            let frame = encapsulated(encapsulation);
            for len in 0..frame.len() {
                let p = parse(&frame[..len]);
                assert!(p.l3.is_none() || len >= 42, "len {len}");
            }
        }
        let mut bad_ihl = udp4();
        bad_ihl[14] = 0x4f; // IHL 60 bytes, frame shorter
        assert_eq!(packet_info(&bad_ihl).dport, None);
    }
}
