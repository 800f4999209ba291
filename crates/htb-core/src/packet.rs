//! What the scheduler and its leaves ask of a packet: its length, and what the leaf queue
//! disciplines read (its flow, ECN, DSCP, hosts, TCP ACK, mark).

use crate::leaf::TcpAck;

/// A packet as the scheduler sees it: something with a length, and what the leaf queue
/// disciplines need to know about it.
///
/// The length is what the token buckets are charged (before the class's
/// [`LengthAdjust`](crate::LengthAdjust)) and what the byte counters count: use the L2 frame length for an
/// Ethernet shaper, as the kernel's `qdisc_pkt_len` does.
pub trait Packet {
    /// Length in bytes.
    fn len_bytes(&self) -> u32;

    /// A hash of the packet's flow (its 5-tuple, keyed against collisions), as the kernel's
    /// `skb_get_hash`: `sfq` and `fq_codel` put packets with equal hashes in one flow. The
    /// default puts every packet in one flow.
    fn flow_hash(&self) -> u32 {
        0
    }

    /// Marks the packet Congestion Experienced if it is ECN-capable (`INET_ECN_set_ce`), and
    /// returns whether it now carries CE (it was ECT(0), ECT(1) or CE). The default: not
    /// ECN-capable, so CoDel drops it instead.
    fn set_ce(&mut self) -> bool {
        false
    }

    /// Bytes of buffer the packet holds (the kernel's `skb->truesize`): what `fq_codel`'s
    /// `memory_limit` counts. The default is its length.
    fn truesize(&self) -> u32 {
        self.len_bytes()
    }

    /// The DSCP (the IP header's DS field without its ECN bits) that `cake` picks a tin by
    /// (`cake_handle_diffserv`): 0 for packets without one, CS7 (`0x38`) for ARP. The
    /// default: 0, best effort.
    fn dscp(&self) -> u8 {
        0
    }

    /// Clears the DSCP, keeping the ECN bits (`cake`'s `wash`). The default does nothing.
    fn wash_dscp(&mut self) {}

    /// Keyed hashes of the source and destination addresses (the same address hashes alike
    /// either way), as `cake` isolates hosts by them. The default: one host each way.
    fn host_hashes(&self) -> (u32, u32) {
        (0, 0)
    }

    /// Bytes before the network header (`skb_network_offset`: 14 on Ethernet, 18 with a VLAN
    /// tag), which `cake`'s `overhead` replaces. The default: 0.
    fn network_offset(&self) -> u32 {
        0
    }

    /// The packet as `cake`'s ACK filter compares it, if it is a TCP segment
    /// ([`TcpAck::parse`] reads it from the headers). The default: not TCP.
    fn tcp_ack(&self) -> Option<&TcpAck> {
        None
    }

    /// The packet's firewall mark (`skb->mark`), which `cake`'s `fwmark` reads. The default: 0.
    fn mark(&self) -> u32 {
        0
    }
}

/// A bare length is a packet: handy for simulations and tests.
impl Packet for u32 {
    fn len_bytes(&self) -> u32 {
        *self
    }
}
