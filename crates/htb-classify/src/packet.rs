//! What a filter can see in a packet.

use core::net::IpAddr;

/// An IP version a filter is restricted to (tc's `protocol ip` / `protocol ipv6`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 (`protocol ip`).
    V4,
    /// IPv6 (`protocol ipv6`).
    V6,
}

impl Family {
    /// The family of `ip`.
    #[must_use]
    pub fn of(ip: IpAddr) -> Self {
        if ip.is_ipv4() { Self::V4 } else { Self::V6 }
    }

    /// Address width in bits.
    #[must_use]
    pub fn bits(self) -> u8 {
        match self {
            Self::V4 => 32,
            Self::V6 => 128,
        }
    }
}

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
