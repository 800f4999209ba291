//! The packet the schedulers hold: a UMEM frame (its [`Chunk`]), with what its leaf queue
//! discipline needs — the flow hash and where its ECN bits are — read once when it arrives.

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;

use htb_core::{Packet, TcpAck};

use crate::parse::Parsed;
use crate::rings::Chunk;

/// A received frame waiting in a scheduler. Not `Copy`: it owns its chunk, which only a send or
/// a release gives back.
#[derive(Debug)]
pub struct Frame {
    chunk: Chunk,
    tag: FrameTag,
}

#[cfg(test)]
impl FrameTag {
    /// A tag of a non-IP frame.
    pub(crate) fn for_test() -> Self {
        Self {
            hash: 0,
            truesize: 2048,
            l3: None,
            network: 14,
            ipv6: false,
            ecn: 0,
            dscp: 0,
            hosts: (0, 0),
            mark_ce: false,
            wash: false,
            tcp: None,
            onward: NO_ONWARD,
        }
    }
}

/// [`FrameTag::onward`] of a frame on its last hop.
const NO_ONWARD: u16 = u16::MAX;

/// What a frame carries besides its chunk: read once when it arrives, and handed to another
/// worker with it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FrameTag {
    hash: u32,
    /// The UMEM chunk it occupies (`skb->truesize` for `fq_codel`'s memory limit).
    truesize: u32,
    /// The IP header's offset, if the frame is IP.
    l3: Option<u16>,
    /// The network header's offset, IP or not.
    network: u16,
    ipv6: bool,
    /// ECN field as received.
    ecn: u8,
    /// DSCP as received (CS7 for ARP, as `cake` reads it).
    dscp: u8,
    /// Keyed hashes of the source and destination addresses (ports with a `cake` leaf).
    hosts: (u32, u32),
    /// A leaf asked for Congestion Experienced: written into the frame before it is sent.
    mark_ce: bool,
    /// A `cake` leaf washed its DSCP: cleared in the frame before it is sent.
    wash: bool,
    /// The segment as `cake`'s ACK filter compares it (TCP frames of ports that filter ACKs).
    tcp: Option<TcpAck>,
    /// In an IFB's tree: the port the frame leaves through once the IFB releases it
    /// ([`NO_ONWARD`]: none, it is in its egress port's tree).
    onward: u16,
}

/// What the data plane reads of a frame besides its flow hash, for the leaves of its egress
/// port.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FrameNeeds {
    /// A `cake` leaf: host hashes.
    pub(crate) hosts: bool,
    /// A `cake` leaf that filters ACKs: the TCP view.
    pub(crate) tcp_acks: bool,
}

impl FrameNeeds {
    /// What the leaves of `htb` read of a frame, added to what is read already.
    pub(crate) fn note_tree<P: Packet>(&mut self, htb: &htb_core::Scheduler<P>) {
        for id in htb.class_ids() {
            if let Some(leaf) = htb.class_info(id).and_then(|i| i.leaf) {
                self.note(&leaf);
            }
        }
    }

    /// What a leaf `leaf` reads of a frame, added to what is read already.
    pub(crate) fn note(&mut self, leaf: &htb_core::LeafConfig) {
        if let htb_core::LeafConfig::Cake(c) = leaf {
            self.hosts = true;
            self.tcp_acks |= c.ack_filter != htb_core::AckFilter::Off;
        }
    }
}

/// Header edits a frame needs before it is sent: CE at the IP header (offset, IPv6), and the
/// DSCP cleared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Edits {
    pub(crate) l3: usize,
    pub(crate) ipv6: bool,
    pub(crate) ce: bool,
    pub(crate) wash: bool,
}

impl Frame {
    /// A frame received as `chunk` (its first buffer `bytes`), parsed as `parsed`, hashed by
    /// `flows`, with what the egress port's leaves `need` read.
    pub(crate) fn new(
        chunk: Chunk,
        bytes: &[u8],
        parsed: &Parsed,
        flows: &FlowHasher,
        truesize: u32,
        need: FrameNeeds,
    ) -> Self {
        let dscp = if parsed.arp {
            0x38
        } else {
            parsed.info.dscp.unwrap_or(0)
        };
        let hosts = if need.hosts {
            (flows.host(parsed.info.src), flows.host(parsed.info.dst))
        } else {
            (0, 0)
        };
        let tcp = match (need.tcp_acks, parsed.l3, parsed.info.proto) {
            (true, Some(l3), Some(6)) => TcpAck::parse(bytes.get(l3..).unwrap_or_default()),
            _ => None,
        };
        Self {
            chunk,
            tag: FrameTag {
                hash: flows.hash(parsed),
                truesize,
                l3: parsed.l3.and_then(|l| u16::try_from(l).ok()),
                network: u16::try_from(parsed.network).unwrap_or(14),
                ipv6: parsed.ipv6,
                ecn: parsed.ecn,
                dscp,
                hosts,
                mark_ce: false,
                wash: false,
                tcp,
                onward: NO_ONWARD,
            },
        }
    }

    /// The frame waits in an IFB's tree and leaves through port `egress` after it (tc's
    /// `mirred egress redirect dev ifbN` on `egress`'s peer's ingress).
    pub(crate) fn redirected(mut self, egress: usize) -> Self {
        self.tag.onward = u16::try_from(egress).unwrap_or(NO_ONWARD);
        self
    }

    /// The port a frame released by an IFB's tree goes on to (`None`: the frame is in its
    /// egress port's tree).
    pub(crate) fn onward(&self) -> Option<usize> {
        (self.tag.onward != NO_ONWARD).then_some(usize::from(self.tag.onward))
    }

    /// The frame's chunk and tag, to hand it to another worker.
    pub(crate) fn into_handoff(self) -> (Chunk, FrameTag) {
        (self.chunk, self.tag)
    }

    /// A frame handed over from another worker, as it was there.
    pub(crate) fn from_handoff(chunk: Chunk, tag: FrameTag) -> Self {
        Self { chunk, tag }
    }

    /// The frame's chunk, and the header edits its leaf asked for (CE, a washed DSCP), if
    /// any.
    pub(crate) fn into_parts(self) -> (Chunk, Option<Edits>) {
        let tag = self.tag;
        let edits = match tag.l3 {
            Some(l3) if tag.mark_ce || tag.wash => Some(Edits {
                l3: usize::from(l3),
                ipv6: tag.ipv6,
                ce: tag.mark_ce,
                wash: tag.wash,
            }),
            _ => None,
        };
        (self.chunk, edits)
    }

    /// The frame's chunk (a drop: the mark no longer matters).
    pub(crate) fn into_chunk(self) -> Chunk {
        self.chunk
    }
}

impl Packet for Frame {
    fn len_bytes(&self) -> u32 {
        self.chunk.len()
    }

    fn flow_hash(&self) -> u32 {
        self.tag.hash
    }

    /// `INET_ECN_set_ce`: ECT(0), ECT(1) or CE frames take the mark (written at transmit);
    /// Not-ECT ones are dropped instead, as RFC 8290 says.
    fn set_ce(&mut self) -> bool {
        if self.tag.l3.is_none() || self.tag.ecn == 0 {
            return false;
        }
        self.tag.mark_ce = true;
        true
    }

    fn truesize(&self) -> u32 {
        self.tag.truesize
    }

    fn dscp(&self) -> u8 {
        self.tag.dscp
    }

    /// Written at transmit, with the IPv4 checksum (`ipv4_change_dsfield`).
    fn wash_dscp(&mut self) {
        if self.tag.l3.is_some() && self.tag.dscp != 0 {
            self.tag.wash = true;
            self.tag.dscp = 0;
        }
    }

    fn host_hashes(&self) -> (u32, u32) {
        self.tag.hosts
    }

    fn network_offset(&self) -> u32 {
        u32::from(self.tag.network)
    }

    fn tcp_ack(&self) -> Option<&TcpAck> {
        self.tag.tcp.as_ref()
    }
}

/// The flow hash: keyed (per process, from the OS's randomness, like the kernel's
/// `skb_get_hash` with its boot-time key) over the VLAN, addresses, protocol and ports.
/// Fragments are hashed without ports so that a datagram's pieces stay in one flow, as the
/// kernel's flow dissector does.
///
/// A folded multiply (the 128-bit product's halves XORed, as foldhash and ahash mix) per
/// 64-bit word of the key, not SipHash: the review of the data plane found SipHash taking 28 %
/// of the forwarding thread's user time. The keys are secret, so a sender cannot aim flows at
/// one queue of fq_codel or sfq without learning them; no more is asked of this hash (the
/// queues themselves bound what a collision costs).
#[derive(Clone, Copy, Debug)]
pub struct FlowHasher {
    k0: u64,
    k1: u64,
}

impl Default for FlowHasher {
    fn default() -> Self {
        let random = RandomState::new();
        Self {
            k0: random.hash_one(0x243f_6a88_85a3_08d3_u64),
            k1: random.hash_one(0x1319_8a2e_0370_7344_u64) | 1,
        }
    }
}

/// The 128-bit product of `a` and `b`, its halves folded together.
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

/// An address as two words (an IPv4 one in the first, tagged so it never equals an IPv6 one).
pub(crate) fn address_words(address: Option<IpAddr>) -> [u64; 2] {
    match address {
        None => [0, 0],
        Some(IpAddr::V4(v4)) => [u64::from(u32::from(v4)) | 1 << 32, 0],
        Some(IpAddr::V6(v6)) => {
            let bits = u128::from(v6);
            [(bits >> 64) as u64, bits as u64]
        }
    }
}

impl FlowHasher {
    /// The keyed 32-bit hash of one address (`cake`'s host slots): the same address hashes
    /// alike as source and as destination.
    #[must_use]
    pub fn host(&self, address: Option<IpAddr>) -> u32 {
        let [a, b] = address_words(address);
        let h = folded_multiply(folded_multiply(self.k1 ^ a, self.k0 | 1) ^ b, self.k1);
        (h ^ (h >> 32)) as u32
    }

    /// The 32-bit hash of a parsed frame's flow.
    #[must_use]
    pub fn hash(&self, parsed: &Parsed) -> u32 {
        self.hash_way(parsed, false)
    }

    /// The hash of the reverse direction of a parsed frame's flow (addresses and ports
    /// swapped): the flow whose segments this one's acknowledge.
    #[must_use]
    pub fn hash_reverse(&self, parsed: &Parsed) -> u32 {
        self.hash_way(parsed, true)
    }

    fn hash_way(&self, parsed: &Parsed, reverse: bool) -> u32 {
        let i = &parsed.info;
        let (mut sport, mut dport) = if parsed.fragment {
            (None, None)
        } else {
            (i.sport, i.dport)
        };
        let (mut src, mut dst) = (i.src, i.dst);
        if reverse {
            (sport, dport, src, dst) = (dport, sport, dst, src);
        }
        let tag = |v: Option<u16>| v.map_or(0, |v| u64::from(v) | 1 << 16);
        let small = tag(i.vlan)
            | tag(sport) << 17
            | tag(dport) << 34
            | u64::from(i.proto.map_or(0, |p| u16::from(p) | 1 << 8)) << 51;
        let [s0, s1] = address_words(src);
        let [d0, d1] = address_words(dst);
        let mut h = self.k0;
        for word in [small, s0, s1, d0, d1] {
            h = folded_multiply(h ^ word, self.k1);
        }
        let h = folded_multiply(h, self.k0 | 1);
        (h ^ (h >> 32)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse;

    fn udp(sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[14 + 9] = 17;
        f[14 + 12..14 + 16].copy_from_slice(&[10, 0, 0, 1]);
        f[14 + 16..14 + 20].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn flows_hash_by_five_tuple_and_vlan() {
        let h = FlowHasher::default();
        let a = h.hash(&parse(&udp(1000, 53)));
        assert_eq!(a, h.hash(&parse(&udp(1000, 53))), "same flow, same hash");
        assert_ne!(a, h.hash(&parse(&udp(1001, 53))));
        let mut tagged = udp(1000, 53)[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        tagged.extend_from_slice(&udp(1000, 53)[12..]);
        assert_ne!(a, h.hash(&parse(&tagged)), "VLAN-aware");
        // Two fragments of one datagram, with and without its ports, hash alike.
        let mut first = udp(1000, 53);
        first[14 + 6] = 0x20;
        let mut later = udp(0, 0);
        later[14 + 6..14 + 8].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(h.hash(&parse(&first)), h.hash(&parse(&later)));
        // Keyed: another process (key) puts the flow elsewhere.
        assert_ne!(a, FlowHasher::default().hash(&parse(&udp(1000, 53))));
        // Swapping source and destination ports is another flow.
        assert_ne!(a, h.hash(&parse(&udp(53, 1000))));
    }

    #[test]
    fn flows_spread_evenly_over_fq_codel_buckets() {
        // 64 000 flows of one host pair, differing only in the source port, over 1024 buckets
        // (fq_codel's default): each bucket gets 62.5 on average; a bad mix piles them up.
        let h = FlowHasher::default();
        let mut buckets = vec![0u32; 1024];
        for sport in 1000..65_000u16 {
            buckets[(h.hash(&parse(&udp(sport, 443))) % 1024) as usize] += 1;
        }
        let (min, max) = (buckets.iter().min().copied(), buckets.iter().max().copied());
        assert!(
            min.is_some_and(|m| m >= 30) && max.is_some_and(|m| m <= 100),
            "{min:?}..{max:?} flows per bucket"
        );
    }
}
