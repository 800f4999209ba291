//! One flow's record as exported: what a Data Record of template 256 or 257 carries.

use std::net::IpAddr;

use htb_core::ClassId;

/// Why a flow's record was exported (IE 136 flowEndReason, IANA's values).
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
    /// The value on the wire.
    #[must_use]
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The reason of a wire value (`None` for one IANA has not assigned).
    #[must_use]
    pub fn from_code(code: u8) -> Option<Self> {
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

/// One unidirectional flow's record for one export interval.
///
/// Zero means "none" on the wire for `vlan`, `class` and the round trips, so `Some(0)` of
/// these reads back as `None`; a round trip under 1 µs is sent as 1 µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// Source address (the same family as `dst`: IPv4 goes in template 256, IPv6 in 257).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol.
    pub proto: u8,
    /// Source port (0 for protocols without ports).
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// The innermost VLAN id.
    pub vlan: Option<u16>,
    /// TCP flags seen, ORed.
    pub tcp_flags: u8,
    /// IP bytes.
    pub octets: u64,
    /// Packets.
    pub packets: u64,
    /// First packet, Unix ms.
    pub start_ms: u64,
    /// Last packet, Unix ms.
    pub end_ms: u64,
    /// Why it was exported.
    pub end_reason: EndReason,
    /// The ifindex it came in on.
    pub ingress_if: u32,
    /// The ifindex it left through.
    pub egress_if: u32,
    /// Its class.
    pub class: Option<ClassId>,
    /// Its shortest round trip, µs.
    pub rtt_min_us: Option<u32>,
    /// The median of its last round trips, µs.
    pub rtt_median_us: Option<u32>,
    /// Its retransmitted segments.
    pub retransmits: u32,
    /// Its packets the class's leaf dropped.
    pub leaf_drops: u64,
    /// 1-in-N packet sampling the counts are of (1: every packet).
    pub sampling_interval: u32,
}

impl FlowRecord {
    /// Whether it goes in the IPv6 template.
    #[must_use]
    pub fn is_ipv6(&self) -> bool {
        self.src.is_ipv6() || self.dst.is_ipv6()
    }
}
