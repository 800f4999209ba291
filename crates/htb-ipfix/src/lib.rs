//! IPFIX (RFC 7011) flow export for htbd, sans-IO: [`Exporter`] turns flow records into
//! messages (templates first, and again every refresh, as §8.4 asks of an exporter over
//! UDP), and [`Collector`] reads messages back (the lab's tests, the fuzzer). No sockets, no
//! clocks: every call takes the time, so tests drive refresh and sequence numbers exactly.
//!
//! ```
//! use std::time::Duration;
//! use htb_ipfix::{ClassId, Collector, EndReason, Exporter, ExporterConfig, FlowRecord};
//!
//! let record = FlowRecord {
//!     src: "192.0.2.1".parse().unwrap(),
//!     dst: "198.51.100.7".parse().unwrap(),
//!     proto: 6,
//!     src_port: 40_000,
//!     dst_port: 443,
//!     vlan: None,
//!     tcp_flags: 0x1b,
//!     octets: 1_500_000,
//!     packets: 1_000,
//!     start_ms: 1_700_000_000_000,
//!     end_ms: 1_700_000_030_000,
//!     end_reason: EndReason::EndOfFlow,
//!     ingress_if: 2,
//!     egress_if: 3,
//!     class: Some(ClassId::new(1, 0x10)),
//!     rtt_min_us: Some(850),
//!     rtt_median_us: None,
//!     retransmits: 0,
//!     leaf_drops: 4,
//!     sampling_interval: 1,
//! };
//! let mut exporter = Exporter::new(ExporterConfig {
//!     observation_domain: 7,
//!     template_refresh: Duration::from_secs(60),
//!     max_message: 1400,
//! })?;
//! let messages = exporter.export(1_700_000_031_000, &[record]);
//! let decoded = Collector::new().decode(&messages[0])?;
//! assert_eq!((decoded.domain, decoded.sequence, decoded.export_time), (7, 0, 1_700_000_031));
//! assert_eq!(decoded.records, [record]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The templates
//!
//! Template 256 carries IPv4 flows, template 257 IPv6 flows; the two differ only in their
//! address elements. Every field has a fixed length (no variable-length encoding, §7), in the
//! order below: standard elements (RFC 7012, IANA's registry) first, then htbd's own under
//! Private Enterprise Number [`PEN`], 32473 — the number RFC 5612 reserves for documentation,
//! as htb has no number of its own yet. Their Field Specifiers carry the enterprise bit
//! (0x8000) and the PEN (§3.2). A record is 89 bytes in template 256 and 113 in 257; the
//! template set holding both is 212 bytes.
//!
//! | Element                                         | IE      | PEN   | Bytes  | Notes                            |
//! |-------------------------------------------------|---------|-------|--------|----------------------------------|
//! | sourceIPv4Address / sourceIPv6Address           | 8 / 27  |       | 4 / 16 |                                  |
//! | destinationIPv4Address / destinationIPv6Address | 12 / 28 |       | 4 / 16 |                                  |
//! | protocolIdentifier                              | 4       |       | 1      |                                  |
//! | sourceTransportPort                             | 7       |       | 2      | 0 without ports                  |
//! | destinationTransportPort                        | 11      |       | 2      | 0 without ports                  |
//! | tcpControlBits                                  | 6       |       | 1      | flags seen, ORed                 |
//! | vlanId                                          | 58      |       | 2      | innermost; 0: none               |
//! | octetDeltaCount                                 | 1       |       | 8      | IP bytes                         |
//! | packetDeltaCount                                | 2       |       | 8      |                                  |
//! | flowStartMilliseconds                           | 152     |       | 8      | Unix ms                          |
//! | flowEndMilliseconds                             | 153     |       | 8      | Unix ms                          |
//! | flowEndReason                                   | 136     |       | 1      | 1 idle, 2 active, 3 FIN/RST, 4 forced, 5 evicted |
//! | ingressInterface                                | 10      |       | 4      | ifindex                          |
//! | egressInterface                                 | 14      |       | 4      | ifindex                          |
//! | samplingInterval (deprecated, read by nfdump)   | 34      |       | 4      | 1-in-N; 1: every packet          |
//! | htbClass                                        | 1       | 32473 | 8      | major << 32 \| minor; 0: none    |
//! | htbRttMinMicroseconds                           | 2       | 32473 | 4      | 0: not measured                  |
//! | htbRttMedianMicroseconds                        | 3       | 32473 | 4      | 0: not measured                  |
//! | htbRetransmits                                  | 4       | 32473 | 4      |                                  |
//! | htbLeafDrops                                    | 5       | 32473 | 8      | packets the class's leaf dropped |
//!
//! htbClass is unsigned64, not tc's 32-bit `major << 16 | minor`: htb's class minors go to
//! 32 bits ([`ClassId`]), and a 32-bit handle would fold `1:10010` onto `2:10`.

mod collector;
mod error;
mod exporter;
mod record;
mod template;

pub use collector::{Collector, Decoded};
pub use error::{DecodeError, RecordError};
pub use exporter::{Exporter, ExporterConfig, ExporterError};
pub use htb_core::ClassId;
pub use record::{EndReason, FlowRecord};
pub use template::{Field, PEN, TEMPLATE_V4, TEMPLATE_V6, fields};

/// IPFIX's version number in every message header (RFC 7011 §3.1).
pub const VERSION: u16 = 10;

/// The message header's length (§3.1): the least a message can be.
pub const HEADER_LEN: usize = 16;

/// The Set ID of template sets (§3.3.2), and the Template ID that withdraws all of a domain's
/// templates (§8.1).
pub const TEMPLATE_SET: u16 = 2;

/// The Set ID of options template sets (§3.3.2), which this crate reads past: htbd sends none,
/// and a flow record needs none.
pub const OPTIONS_TEMPLATE_SET: u16 = 3;

#[cfg(test)]
mod tests;
