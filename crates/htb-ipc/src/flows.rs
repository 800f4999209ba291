//! `htb-cli flows`: the flow records htbd keeps now (`[flows]` in its config), the largest
//! first, and the flow tables' and exporter's counters in `htb-cli status`.

use std::net::IpAddr;

use htb_core::ClassId;

use crate::InterfaceName;
use serde::{Deserialize, Serialize};

/// Which flows to list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowsQuery {
    /// Only flows leaving through this port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<InterfaceName>,
    /// Only flows of this class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassId>,
    /// At most this many, the largest (in bytes) first.
    pub top: u32,
}

/// One flow direction's record, live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowEntry {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol number.
    pub proto: u8,
    /// Source port (0 without ports).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// The innermost VLAN id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// The port it came in on.
    pub ingress: InterfaceName,
    /// The port it leaves through.
    pub egress: InterfaceName,
    /// Its class there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassId>,
    /// IP bytes of the sampled packets since the record's interval began.
    pub bytes: u64,
    /// Sampled packets.
    pub packets: u64,
    /// ms since its first packet (of this interval).
    pub age_ms: u64,
    /// ms since its last packet.
    pub idle_ms: u64,
    /// TCP flags seen, ORed.
    pub tcp_flags: u8,
    /// Its shortest round trip measured, µs (TCP with `rtt = true` on the port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_min_us: Option<u64>,
    /// The median of its last round trips, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_median_us: Option<u64>,
    /// Its segments that were retransmissions.
    pub retransmits: u32,
    /// Its packets the class's leaf (or a full queue) dropped.
    pub leaf_drops: u64,
}

/// The answer to a [`FlowsQuery`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowList {
    /// The flows, the largest first.
    pub flows: Vec<FlowEntry>,
    /// How many records matched (more than listed when `top` cut the list).
    pub matched: u64,
    /// 1-in-N packet sampling: counts are of the sampled packets.
    pub sampling: u32,
}

/// The flow tables and the exporter, in `htb-cli status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowStatus {
    /// Records per worker's table (the configured size rounded up to a power of two).
    pub entries: u64,
    /// Memory all tables take, bytes.
    pub memory_bytes: u64,
    /// Records live now.
    pub live: u64,
    /// Records started.
    pub started: u64,
    /// Records ended (idle, active timeout, FIN/RST, evicted, forced).
    pub ended: u64,
    /// Records ended because a new flow needed the place.
    pub evicted: u64,
    /// Ended records lost because the export ring was full.
    pub ring_drops: u64,
    /// The collector (`None`: records are not exported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector: Option<String>,
    /// Records handed to the socket for it (those of messages it refused too: `send_errors`
    /// counts those messages).
    pub exported: u64,
    /// IPFIX messages sent.
    pub messages: u64,
    /// Messages the socket refused (the records in them are lost).
    pub send_errors: u64,
}
