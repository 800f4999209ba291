//! The two templates (RFC 7011 §3.4.1): which Information Elements a record carries, in which
//! order and length, and how one record is written into a Data Set and read out of one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use htb_core::ClassId;

use crate::error::RecordError;
use crate::record::{EndReason, FlowRecord};

/// The Private Enterprise Number of htbd's own elements (htbClass, the round trips,
/// retransmits, leaf drops): 32473, which RFC 5612 reserves for documentation and examples, as
/// htb has none registered. Public so an operator can configure a collector to name them.
pub const PEN: u32 = 32_473;

/// The Template ID of IPv4 flows (256, the first a data set may have: §3.4.3).
pub const TEMPLATE_V4: u16 = 256;

/// The Template ID of IPv6 flows.
pub const TEMPLATE_V6: u16 = 257;

/// The bit of a Field Specifier's element id that says a PEN follows (§3.2).
const ENTERPRISE_BIT: u16 = 0x8000;

/// One Field Specifier of a template (§3.2): an Information Element and its length, which is
/// all a collector learns of a record's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The element's id (without the enterprise bit).
    pub id: u16,
    /// The enterprise number (`None`: IANA's registry; `Some` sets the enterprise bit).
    pub pen: Option<u32>,
    /// Its length in the record (65 535 would be variable length, §7, which htbd never sends).
    pub len: u16,
}

const fn iana(id: u16, len: u16) -> Field {
    Field { id, pen: None, len }
}

const fn htb(id: u16, len: u16) -> Field {
    Field {
        id,
        pen: Some(PEN),
        len,
    }
}

/// The elements after the addresses, the same in both templates.
const COMMON: [Field; 18] = [
    iana(4, 1),   // protocolIdentifier
    iana(7, 2),   // sourceTransportPort
    iana(11, 2),  // destinationTransportPort
    iana(6, 1),   // tcpControlBits
    iana(58, 2),  // vlanId
    iana(1, 8),   // octetDeltaCount
    iana(2, 8),   // packetDeltaCount
    iana(152, 8), // flowStartMilliseconds
    iana(153, 8), // flowEndMilliseconds
    iana(136, 1), // flowEndReason
    iana(10, 4),  // ingressInterface
    iana(14, 4),  // egressInterface
    // samplingInterval, "one of every N packets": IE 305 samplingPacketInterval, which
    // replaced it, counts the packets taken in a row, so 1-in-N would need 305 = 1 and 306
    // samplingPacketSpace = N - 1; nfdump reads 34.
    iana(34, 4),
    htb(1, 8), // htbClass
    htb(2, 4), // htbRttMinMicroseconds
    htb(3, 4), // htbRttMedianMicroseconds
    htb(4, 4), // htbRetransmits
    htb(5, 8), // htbLeafDrops
];

const fn with_addresses(src: Field, dst: Field) -> [Field; 20] {
    let mut all = [src; 20];
    all[1] = dst;
    let mut i = 0;
    while i < COMMON.len() {
        all[i + 2] = COMMON[i];
        i += 1;
    }
    all
}

/// Template 256's fields.
const V4: [Field; 20] = with_addresses(iana(8, 4), iana(12, 4));
/// Template 257's fields.
const V6: [Field; 20] = with_addresses(iana(27, 16), iana(28, 16));

/// The fields of the IPv6 template (257), or of the IPv4 one (256), in record order: for a
/// collector's configuration, or a test that reads the layout.
#[must_use]
pub fn fields(ipv6: bool) -> &'static [Field] {
    if ipv6 { &V6 } else { &V4 }
}

/// The length of one record of `fields`.
pub(crate) fn record_len(fields: &[Field]) -> usize {
    fields.iter().map(|f| usize::from(f.len)).sum()
}

/// Appends template `id`'s Template Record (§3.4.1): its id, field count and specifiers.
pub(crate) fn write_template(out: &mut Vec<u8>, id: u16, fields: &[Field]) {
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(
        &u16::try_from(fields.len())
            .unwrap_or(u16::MAX)
            .to_be_bytes(),
    );
    for f in fields {
        let bit = if f.pen.is_some() { ENTERPRISE_BIT } else { 0 };
        out.extend_from_slice(&(f.id | bit).to_be_bytes());
        out.extend_from_slice(&f.len.to_be_bytes());
        if let Some(pen) = f.pen {
            out.extend_from_slice(&pen.to_be_bytes());
        }
    }
}

/// The bytes a template record takes.
pub(crate) fn template_len(fields: &[Field]) -> usize {
    4 + fields
        .iter()
        .map(|f| if f.pen.is_some() { 8 } else { 4 })
        .sum::<usize>()
}

/// Reads template records' field specifiers from `bytes`: `None` when they run past it.
pub(crate) fn read_fields(bytes: &[u8], count: usize) -> Option<(Vec<Field>, usize)> {
    let mut at = 0;
    let mut fields = Vec::with_capacity(count.min(256));
    for _ in 0..count {
        let id = u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]);
        let len = u16::from_be_bytes([*bytes.get(at + 2)?, *bytes.get(at + 3)?]);
        at += 4;
        let pen = if id & ENTERPRISE_BIT != 0 {
            let pen = u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?);
            at += 4;
            Some(pen)
        } else {
            None
        };
        fields.push(Field {
            id: id & !ENTERPRISE_BIT,
            pen,
            len,
        });
    }
    Some((fields, at))
}

/// `a` as an IPv6 address (an IPv4 one mapped), for the IPv6 template.
fn v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// `a` as an IPv4 address (0.0.0.0 for an IPv6 one, which never goes in template 256).
fn v4(a: IpAddr) -> Ipv4Addr {
    match a {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) => v6.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
    }
}

/// The class as htbClass carries it.
fn class_word(class: Option<ClassId>) -> u64 {
    class.map_or(0, |c| u64::from(c.major()) << 32 | u64::from(c.minor()))
}

/// Appends `r` as one Data Record of the template for its family.
pub(crate) fn write_record(out: &mut Vec<u8>, r: &FlowRecord) {
    if r.is_ipv6() {
        out.extend_from_slice(&v6(r.src).octets());
        out.extend_from_slice(&v6(r.dst).octets());
    } else {
        out.extend_from_slice(&v4(r.src).octets());
        out.extend_from_slice(&v4(r.dst).octets());
    }
    out.push(r.proto);
    out.extend_from_slice(&r.src_port.to_be_bytes());
    out.extend_from_slice(&r.dst_port.to_be_bytes());
    out.push(r.tcp_flags);
    out.extend_from_slice(&r.vlan.unwrap_or(0).to_be_bytes());
    out.extend_from_slice(&r.octets.to_be_bytes());
    out.extend_from_slice(&r.packets.to_be_bytes());
    out.extend_from_slice(&r.start_ms.to_be_bytes());
    out.extend_from_slice(&r.end_ms.to_be_bytes());
    out.push(r.end_reason.code());
    out.extend_from_slice(&r.ingress_if.to_be_bytes());
    out.extend_from_slice(&r.egress_if.to_be_bytes());
    out.extend_from_slice(&r.sampling_interval.to_be_bytes());
    out.extend_from_slice(&class_word(r.class).to_be_bytes());
    let rtt = |v: Option<u32>| v.map_or(0, |v| v.max(1));
    out.extend_from_slice(&rtt(r.rtt_min_us).to_be_bytes());
    out.extend_from_slice(&rtt(r.rtt_median_us).to_be_bytes());
    out.extend_from_slice(&r.retransmits.to_be_bytes());
    out.extend_from_slice(&r.leaf_drops.to_be_bytes());
}

/// An unsigned integer of 1 to 8 bytes, big-endian (reduced-size encoding, §6.2).
fn unsigned(b: &[u8], id: u16) -> Result<u64, RecordError> {
    if b.is_empty() || b.len() > 8 {
        return Err(RecordError::FieldLength(id));
    }
    Ok(b.iter().fold(0, |v, &x| v << 8 | u64::from(x)))
}

/// Reads one record of `fields` from `b` (exactly its length). Elements it does not know are
/// skipped; a value too large for its field in [`FlowRecord`] is cut to the field's width.
pub(crate) fn read_record(fields: &[Field], b: &[u8]) -> Result<FlowRecord, RecordError> {
    let mut r = FlowRecord {
        src: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        dst: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        proto: 0,
        src_port: 0,
        dst_port: 0,
        vlan: None,
        tcp_flags: 0,
        octets: 0,
        packets: 0,
        start_ms: 0,
        end_ms: 0,
        end_reason: EndReason::IdleTimeout,
        ingress_if: 0,
        egress_if: 0,
        class: None,
        rtt_min_us: None,
        rtt_median_us: None,
        retransmits: 0,
        leaf_drops: 0,
        sampling_interval: 1,
    };
    let (mut src, mut dst) = (false, false);
    let mut at = 0;
    for f in fields {
        let Some(v) = b.get(at..at + usize::from(f.len)) else {
            return Err(RecordError::Truncated);
        };
        at += usize::from(f.len);
        let address = |v: &[u8]| -> Result<IpAddr, RecordError> {
            match v.len() {
                4 => Ok(IpAddr::from(<[u8; 4]>::try_from(v).unwrap_or_default())),
                16 => Ok(IpAddr::from(<[u8; 16]>::try_from(v).unwrap_or_default())),
                _ => Err(RecordError::FieldLength(f.id)),
            }
        };
        let n = |v: &[u8]| unsigned(v, f.id);
        match (f.pen, f.id) {
            (None, 8 | 27) => (r.src, src) = (address(v)?, true),
            (None, 12 | 28) => (r.dst, dst) = (address(v)?, true),
            (None, 4) => r.proto = n(v)? as u8,
            (None, 7) => r.src_port = n(v)? as u16,
            (None, 11) => r.dst_port = n(v)? as u16,
            (None, 6) => r.tcp_flags = n(v)? as u8,
            (None, 58) => r.vlan = Some(n(v)? as u16).filter(|&v| v != 0),
            (None, 1) => r.octets = n(v)?,
            (None, 2) => r.packets = n(v)?,
            (None, 152) => r.start_ms = n(v)?,
            (None, 153) => r.end_ms = n(v)?,
            (None, 136) => {
                let code = n(v)? as u8;
                r.end_reason = EndReason::from_code(code).ok_or(RecordError::EndReason(code))?;
            }
            (None, 10) => r.ingress_if = n(v)? as u32,
            (None, 14) => r.egress_if = n(v)? as u32,
            (None, 34) => r.sampling_interval = n(v)? as u32,
            (Some(PEN), 1) => {
                let w = n(v)?;
                r.class = Some(ClassId::new((w >> 32) as u16, w as u32)).filter(|_| w != 0);
            }
            (Some(PEN), 2) => r.rtt_min_us = Some(n(v)? as u32).filter(|&v| v != 0),
            (Some(PEN), 3) => r.rtt_median_us = Some(n(v)? as u32).filter(|&v| v != 0),
            (Some(PEN), 4) => r.retransmits = n(v)? as u32,
            (Some(PEN), 5) => r.leaf_drops = n(v)?,
            _ => {}
        }
    }
    if src && dst {
        Ok(r)
    } else {
        Err(RecordError::NoAddresses)
    }
}
