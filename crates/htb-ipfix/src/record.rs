//! One flow's record as exported: what a Data Record of template 256 or 257 carries.

use std::net::IpAddr;

use htb_core::ClassId;

/// Why a flow's record was exported (IE 136 flowEndReason, RFC 7012 §5.11.3 and IANA's
/// values): a collector tells a flow that goes on (active timeout) from one that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// Idle for the idle timeout.
    IdleTimeout = 1,
    /// Running for the active timeout; the flow goes on.
    ActiveTimeout = 2,
    /// A FIN or RST ended it.
    EndOfFlow = 3,
    /// The exporter stopped.
    ForcedEnd = 4,
    /// Its place was needed for another flow.
    LackOfResources = 5,
}

impl EndReason {
    /// The value on the wire (IE 136 is unsigned8).
    #[must_use]
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The reason of a wire value (`None` for one IANA has not assigned, which the decoder
    /// refuses as [`RecordError::EndReason`](crate::RecordError::EndReason)).
    #[must_use]
    pub const fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::IdleTimeout,
            2 => Self::ActiveTimeout,
            3 => Self::EndOfFlow,
            4 => Self::ForcedEnd,
            5 => Self::LackOfResources,
            _ => return None,
        })
    }
}

/// One unidirectional flow's record for one export interval: what a Data Record of template
/// 256 (IPv4) or 257 (IPv6) carries, field by field (the crate's table gives each element).
///
/// Fixed-length fields cannot be absent, so zero means "none" on the wire for `vlan` and
/// `class`: `Some(0)` and `Some(ClassId::new(0, 0))` read back as `None`. A round trip of
/// `Some(0)` is sent as 1 µs, so a measured round trip never reads back as "not measured".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// Source address (sourceIPv4Address or sourceIPv6Address), of the same family as `dst`:
    /// IPv4 goes in template 256, IPv6 in 257.
    pub src: IpAddr,
    /// Destination address (destinationIPv4Address or destinationIPv6Address).
    pub dst: IpAddr,
    /// IP protocol (protocolIdentifier, IE 4).
    pub proto: u8,
    /// Source port (sourceTransportPort, IE 7; 0 for protocols without ports).
    pub src_port: u16,
    /// Destination port (destinationTransportPort, IE 11; 0 for protocols without ports).
    pub dst_port: u16,
    /// The innermost VLAN id (vlanId, IE 58; sent as 0 when `None`).
    pub vlan: Option<u16>,
    /// TCP flags seen, ORed (tcpControlBits, IE 6).
    pub tcp_flags: u8,
    /// IP bytes in this interval (octetDeltaCount, IE 1).
    pub octets: u64,
    /// Packets in this interval (packetDeltaCount, IE 2).
    pub packets: u64,
    /// First packet, Unix ms (flowStartMilliseconds, IE 152).
    pub start_ms: u64,
    /// Last packet, Unix ms (flowEndMilliseconds, IE 153).
    pub end_ms: u64,
    /// Why it was exported (flowEndReason, IE 136).
    pub end_reason: EndReason,
    /// The ifindex it came in on (ingressInterface, IE 10).
    pub ingress_if: u32,
    /// The ifindex it left through (egressInterface, IE 14).
    pub egress_if: u32,
    /// Its class (htbClass, enterprise element 1: `major << 32 | minor`; 0 when `None`), so a
    /// collector can sum traffic per subscriber.
    pub class: Option<ClassId>,
    /// Its shortest round trip, µs (htbRttMinMicroseconds, enterprise element 2; 0 when not
    /// measured).
    pub rtt_min_us: Option<u32>,
    /// The median of its last round trips, µs (htbRttMedianMicroseconds, enterprise element
    /// 3; 0 when not measured).
    pub rtt_median_us: Option<u32>,
    /// Its retransmitted segments (htbRetransmits, enterprise element 4).
    pub retransmits: u32,
    /// Its packets the class's leaf dropped (htbLeafDrops, enterprise element 5): the shaping
    /// a flow met, which no standard element says.
    pub leaf_drops: u64,
    /// 1-in-N packet sampling the counts are of (samplingInterval, IE 34: "one of every N packets"; 1: every
    /// packet), so a collector can scale sampled counts.
    pub sampling_interval: u32,
}

impl FlowRecord {
    /// Whether it goes in the IPv6 template (257): either address is IPv6.
    #[must_use]
    pub fn is_ipv6(&self) -> bool {
        self.src.is_ipv6() || self.dst.is_ipv6()
    }
}
