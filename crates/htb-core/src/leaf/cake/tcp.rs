//! A TCP segment as `cake`'s ACK filter sees it, read once from the network header on
//! (`cake_get_iphdr`, `cake_get_tcphdr`, `cake_get_tcpopt`, the option scan of
//! `cake_tcph_may_drop`): a packet implementation keeps it beside the packet
//! ([`Packet::tcp_ack`](crate::Packet::tcp_ack)), so that the filter never reads headers again.

/// `TCP_FLAG_*` bits of the flag byte.
pub(crate) const SYN: u8 = 0x02;
pub(crate) const ACK: u8 = 0x10;
pub(crate) const ECE: u8 = 0x40;
pub(crate) const CWR: u8 = 0x80;

const OPT_EOL: u8 = 0;
const OPT_NOP: u8 = 1;
const OPT_SACK: u8 = 5;
const OPT_TIMESTAMP: u8 = 8;
const OPT_MD5SIG: u8 = 19;

/// SACK blocks a TCP header holds at most (40 bytes of options).
pub(crate) const MAX_SACK: usize = 4;

/// The fields of a TCP segment that decide whether a queued pure ACK is redundant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpAck {
    /// A hash of the IP version, addresses and ports: segments of one connection direction
    /// compare equal.
    pub(crate) tuple: u64,
    /// The header's reserved bits (low nibble of byte 12) and flag byte 13.
    pub(crate) reserved: u8,
    pub(crate) flags: u8,
    pub(crate) ack_seq: u32,
    /// It carries data (IP payload longer than the TCP header).
    pub(crate) payload: bool,
    /// Its options let it be dropped (`cake_tcph_may_drop` without the timestamp test): only
    /// EOL, NOP, MD5, SACK of a whole number of blocks, and a well-formed timestamp.
    pub(crate) options_droppable: bool,
    /// The timestamp option's TSval and TSecr (both 0 without one, as the kernel reads it).
    pub(crate) tsval: u32,
    pub(crate) tsecr: u32,
    pub(crate) has_timestamp: bool,
    /// The first SACK option's blocks.
    pub(crate) sack: [(u32, u32); MAX_SACK],
    pub(crate) sack_blocks: u8,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// FNV-1a over the connection's identity.
fn tuple_hash(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for part in parts {
        for &b in *part {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

impl TcpAck {
    /// Reads `network` (the packet from its IP header on): `None` unless it is a TCP segment
    /// over IPv4, IPv6 without extension headers, or IPv6 in IPv4 (6in4, "a common way to
    /// get v6 connectivity in the home"), with a whole TCP header.
    #[must_use]
    pub fn parse(network: &[u8]) -> Option<Self> {
        let version = network.first()? >> 4;
        let (ip, tcp_at, seglen) = match version {
            4 => {
                let ihl = usize::from(network[0] & 0x0f) * 4;
                if ihl < 20 {
                    return None;
                }
                let protocol = *network.get(9)?;
                let total = usize::from(be16(network, 2)?);
                if protocol == 41 {
                    let inner = network.get(ihl..)?;
                    if inner.first()? >> 4 != 6 || *inner.get(6)? != 6 {
                        return None;
                    }
                    (inner, ihl + 40, usize::from(be16(inner, 4)?))
                } else if protocol == 6 {
                    (network, ihl, total.checked_sub(ihl)?)
                } else {
                    return None;
                }
            }
            6 => {
                if *network.get(6)? != 6 {
                    return None;
                }
                (network, 40, usize::from(be16(network, 4)?))
            }
            _ => return None,
        };
        let addresses = if ip[0] >> 4 == 4 {
            ip.get(12..20)?
        } else {
            ip.get(8..40)?
        };
        let tcp = network.get(tcp_at..)?;
        let doff = usize::from(*tcp.get(12)? >> 4) * 4;
        if doff < 20 {
            return None;
        }
        let mut seg = Self {
            tuple: tuple_hash(&[&[ip[0] >> 4], addresses, tcp.get(0..4)?]),
            reserved: tcp[12] & 0x0f,
            flags: *tcp.get(13)?,
            ack_seq: be32(tcp, 8)?,
            payload: seglen != doff,
            options_droppable: true,
            ..Self::default()
        };
        // A header cut short by the packet's end is not read (`skb_header_pointer` fails).
        let options = tcp.get(20..doff)?;
        seg.read_options(options);
        Some(seg)
    }

    /// One pass over the options: the scan of `cake_tcph_may_drop`, and the first SACK and
    /// timestamp options as `cake_get_tcpopt` finds them.
    fn read_options(&mut self, mut opts: &[u8]) {
        let (mut sack_seen, mut ts_seen, mut scanning) = (false, false, true);
        while let Some((&code, rest)) = opts.split_first() {
            if code == OPT_EOL {
                break;
            }
            if code == OPT_NOP {
                opts = rest;
                continue;
            }
            let Some(&size) = rest.first() else { break };
            let size = usize::from(size);
            if size < 2 || size > opts.len() {
                break;
            }
            let body = &opts[2..size];
            match code {
                OPT_MD5SIG => {}
                OPT_SACK => {
                    if size % 8 != 2 && scanning {
                        self.options_droppable = false;
                        scanning = false;
                    }
                    if !sack_seen {
                        sack_seen = true;
                        for (i, block) in body.chunks_exact(8).take(MAX_SACK).enumerate() {
                            let start =
                                u32::from_be_bytes([block[0], block[1], block[2], block[3]]);
                            let end = u32::from_be_bytes([block[4], block[5], block[6], block[7]]);
                            self.sack[i] = (start, end);
                            self.sack_blocks = i as u8 + 1;
                        }
                    }
                }
                OPT_TIMESTAMP => {
                    if size != 10 && scanning {
                        self.options_droppable = false;
                        scanning = false;
                    }
                    if !ts_seen {
                        ts_seen = true;
                        if size == 10 {
                            self.tsval = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                            self.tsecr = u32::from_be_bytes([body[4], body[5], body[6], body[7]]);
                            self.has_timestamp = true;
                        }
                    }
                }
                // MSS, window scale, SACK-permitted, fast open, experimental, unknown: only
                // on SYNs, or not understood; either way the segment is kept.
                _ => {
                    if scanning {
                        self.options_droppable = false;
                        scanning = false;
                    }
                }
            }
            opts = &opts[size..];
        }
    }

    /// The SYN and ACK flags: a segment the filter may act on has ACK without SYN.
    pub(crate) fn acks_without_syn(&self) -> bool {
        self.flags & (ACK | SYN) == ACK
    }

    /// ECE and CWR, which an older ACK must share with a newer one to be dropped.
    pub(crate) fn ecn_flags(&self) -> u8 {
        self.flags & (ECE | CWR)
    }

    /// Whether the reserved bits are clear and ACK is the only flag but ECE/CWR
    /// (`tcp_flag_word & 0x0F3F0000 == TCP_FLAG_ACK`).
    pub(crate) fn plain_ack(&self) -> bool {
        self.reserved == 0 && self.flags & !(ECE | CWR) == ACK
    }

    /// The SACK blocks.
    pub(crate) fn sacks(&self) -> &[(u32, u32)] {
        &self.sack[..usize::from(self.sack_blocks)]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// An IPv4 TCP segment from 10.0.0.1:1000 to 10.0.0.2:80 with `flags`, `ack`, `payload`
    /// bytes of data and the given options (padded to 4 bytes).
    pub(crate) fn segment(flags: u8, ack: u32, payload: usize, options: &[u8]) -> Vec<u8> {
        let mut opts = options.to_vec();
        while !opts.len().is_multiple_of(4) {
            opts.push(OPT_NOP);
        }
        let tcp_len = 20 + opts.len();
        let total = 20 + tcp_len + payload;
        let mut p = Vec::new();
        p.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0,
            0,
            64,
            6,
            0,
            0,
        ]);
        p.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        p.extend_from_slice(&[0x03, 0xe8, 0, 80, 0, 0, 0, 1]);
        p.extend_from_slice(&ack.to_be_bytes());
        p.push(((tcp_len / 4) << 4) as u8);
        p.push(flags);
        p.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(&opts);
        p.resize(total, 0);
        p
    }

    /// The timestamp option.
    pub(crate) fn ts(val: u32, ecr: u32) -> Vec<u8> {
        let mut o = alloc::vec![OPT_TIMESTAMP, 10];
        o.extend_from_slice(&val.to_be_bytes());
        o.extend_from_slice(&ecr.to_be_bytes());
        o
    }

    /// A SACK option of `blocks`.
    pub(crate) fn sack(blocks: &[(u32, u32)]) -> Vec<u8> {
        let mut o = alloc::vec![OPT_SACK, (2 + 8 * blocks.len()) as u8];
        for (s, e) in blocks {
            o.extend_from_slice(&s.to_be_bytes());
            o.extend_from_slice(&e.to_be_bytes());
        }
        o
    }

    #[test]
    fn a_pure_ack_with_timestamps_and_sack_is_read_whole() {
        let mut opts = ts(7, 9);
        opts.extend(sack(&[(100, 200), (300, 400)]));
        let seg = TcpAck::parse(&segment(ACK, 5000, 0, &opts)).unwrap();
        assert!(seg.acks_without_syn() && seg.plain_ack());
        assert!(!seg.payload && seg.options_droppable);
        assert_eq!((seg.tsval, seg.tsecr, seg.has_timestamp), (7, 9, true));
        assert_eq!(seg.sacks(), &[(100, 200), (300, 400)]);
        assert_eq!(seg.ack_seq, 5000);
    }

    #[test]
    fn data_syns_and_unknown_options_are_marked() {
        assert!(TcpAck::parse(&segment(ACK, 1, 100, &[])).unwrap().payload);
        let syn = TcpAck::parse(&segment(SYN | ACK, 1, 0, &[])).unwrap();
        assert!(!syn.acks_without_syn() && !syn.plain_ack());
        // MSS (kind 2, length 4): kept.
        let mss = TcpAck::parse(&segment(ACK, 1, 0, &[2, 4, 5, 0xb4])).unwrap();
        assert!(!mss.options_droppable);
        // A timestamp of the wrong size: kept, and not read.
        let bad = TcpAck::parse(&segment(ACK, 1, 0, &[8, 6, 0, 0, 0, 1])).unwrap();
        assert!(!bad.options_droppable && !bad.has_timestamp);
        // ECE/CWR do not stop a plain ACK; PSH does.
        assert!(
            TcpAck::parse(&segment(ACK | ECE, 1, 0, &[]))
                .unwrap()
                .plain_ack()
        );
        assert!(
            !TcpAck::parse(&segment(ACK | 0x08, 1, 0, &[]))
                .unwrap()
                .plain_ack()
        );
    }

    #[test]
    fn the_tuple_tells_connections_apart() {
        let a = segment(ACK, 1, 0, &[]);
        let mut b = a.clone();
        b[21] = 81; // another destination port
        let (a, b) = (TcpAck::parse(&a).unwrap(), TcpAck::parse(&b).unwrap());
        assert_ne!(a.tuple, b.tuple);
    }

    #[test]
    fn what_is_not_tcp_or_is_cut_short_is_not_read() {
        let mut udp = segment(ACK, 1, 0, &[]);
        udp[9] = 17;
        assert_eq!(TcpAck::parse(&udp), None);
        let seg = segment(ACK, 1, 0, &[]);
        assert_eq!(TcpAck::parse(&seg[..30]), None);
        assert_eq!(TcpAck::parse(&[]), None);
        assert_eq!(TcpAck::parse(&[0x15; 60]), None, "version 1");
    }
}
