//! IPFIX (RFC 7011) flow export for htbd, sans-IO: [`Exporter`] turns flow records into
//! messages (templates first, and again every refresh, as §10.3.6 asks of an exporter over
//! UDP), and [`Collector`] reads messages back (the lab's tests, the fuzzer). No sockets, no
//! clocks: every call takes the time.
//!
//! # The templates
//!
//! Template 256 carries IPv4 flows, template 257 IPv6 flows; the two differ only in their
//! address elements. Every field has a fixed length. Standard elements (RFC 7012, IANA's
//! registry) come first, then htbd's own under Private Enterprise Number [`PEN`] (32473, the
//! number RFC 5612 reserves for documentation: htb has no number of its own yet).
//!
//! | Element                          | IE  | PEN   | Bytes | Notes                          |
//! |----------------------------------|-----|-------|-------|--------------------------------|
//! | sourceIPv4Address / sourceIPv6Address | 8 / 27 |  | 4 / 16 |                          |
//! | destinationIPv4Address / destinationIPv6Address | 12 / 28 | | 4 / 16 |               |
//! | protocolIdentifier               | 4   |       | 1     |                                |
//! | sourceTransportPort              | 7   |       | 2     | 0 without ports                |
//! | destinationTransportPort         | 11  |       | 2     |                                |
//! | tcpControlBits                   | 6   |       | 1     | flags seen, ORed               |
//! | vlanId                           | 58  |       | 2     | innermost; 0: none             |
//! | octetDeltaCount                  | 1   |       | 8     | IP bytes                       |
//! | packetDeltaCount                 | 2   |       | 8     |                                |
//! | flowStartMilliseconds            | 152 |       | 8     | Unix ms                        |
//! | flowEndMilliseconds              | 153 |       | 8     | Unix ms                        |
//! | flowEndReason                    | 136 |       | 1     | 1 idle, 2 active, 3 FIN/RST, 4 forced, 5 evicted |
//! | ingressInterface                 | 10  |       | 4     | ifindex                        |
//! | egressInterface                  | 14  |       | 4     | ifindex                        |
//! | samplingPacketInterval           | 305 |       | 4     | 1-in-N; 1: every packet        |
//! | htbClass                         | 1   | 32473 | 8     | major << 32 \| minor; 0: none  |
//! | htbRttMinMicroseconds            | 2   | 32473 | 4     | 0: not measured                |
//! | htbRttMedianMicroseconds         | 3   | 32473 | 4     | 0: not measured                |
//! | htbRetransmits                   | 4   | 32473 | 4     |                                |
//! | htbLeafDrops                     | 5   | 32473 | 8     | packets the class's leaf dropped |

mod collector;
mod exporter;
mod record;
mod template;

pub use collector::{Collector, DecodeError, Decoded};
pub use exporter::{Exporter, ExporterConfig, ExporterError};
pub use htb_core::ClassId;
pub use record::{EndReason, FlowRecord};
pub use template::{Field, PEN, TEMPLATE_V4, TEMPLATE_V6, fields};

/// IPFIX's version number in every message header (RFC 7011 §3.1).
pub const VERSION: u16 = 10;

/// The message header's length.
pub const HEADER_LEN: usize = 16;

/// The Set ID of template sets (§3.3.2).
pub const TEMPLATE_SET: u16 = 2;

/// The Set ID of options template sets (§3.3.2), which this crate reads past.
pub const OPTIONS_TEMPLATE_SET: u16 = 3;

#[cfg(test)]
mod tests;
