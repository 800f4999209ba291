//! What a filter can see in a packet.

use core::net::IpAddr;

use crate::matcher::Family;

/// What a filter can look at in a packet; `None` where the packet does not have it (not IP,
/// truncated, a later fragment, …).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketInfo {
    /// Outer VLAN id.
    pub vlan: Option<u16>,
    /// IPv4 or IPv6 source.
    pub src: Option<IpAddr>,
    /// IPv4 or IPv6 destination.
    pub dst: Option<IpAddr>,
    /// IP protocol / IPv6 next header of the transport.
    pub proto: Option<u8>,
    /// Transport source port (TCP, UDP, SCTP, UDP-Lite).
    pub sport: Option<u16>,
    /// Transport destination port.
    pub dport: Option<u16>,
    /// DSCP (the upper six bits of the TOS / traffic class byte).
    pub dscp: Option<u8>,
    /// The frame is ARP (what `protocol arp` filters match).
    pub arp: bool,
}

impl PacketInfo {
    /// The IP version, from the source address (`None`: not IP).
    #[must_use]
    pub fn family(&self) -> Option<Family> {
        self.src.map(Family::of)
    }
}
