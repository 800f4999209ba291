//! The one packet the generator sends: Ethernet, an access encapsulation if asked, IPv4, UDP.

use std::net::Ipv4Addr;

/// What carries the IP packet after the Ethernet header (`--encap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Encap {
    /// Plain IPv4.
    None,
    /// One 802.1Q tag, VID 100.
    Vlan,
    /// 802.1ad outer tag VID 100, 802.1Q inner tag VID 200.
    Qinq,
    /// A PPPoE session (id 0x1234), PPP protocol IPv4.
    Pppoe,
    /// One MPLS label (1000), bottom of stack, TTL 64.
    Mpls,
}

impl Encap {
    /// The bytes from the ethertype to the IP header, given the IP packet's length.
    fn header(self, ip_len: u16) -> Vec<u8> {
        match self {
            Self::None => vec![0x08, 0x00],
            Self::Vlan => vec![0x81, 0x00, 0x00, 0x64, 0x08, 0x00],
            Self::Qinq => vec![0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x00, 0xc8, 0x08, 0x00],
            Self::Pppoe => {
                // PPPoE's length counts the PPP protocol field and the payload.
                let [hi, lo] = (ip_len + 2).to_be_bytes();
                vec![0x88, 0x64, 0x11, 0x00, 0x12, 0x34, hi, lo, 0x00, 0x21]
            }
            // Label 1000 (0x003e8): 0x003e8 << 12 | bottom of stack << 8 | TTL 64.
            Self::Mpls => vec![0x88, 0x47, 0x00, 0x3e, 0x81, 0x40],
        }
    }
}

/// A MAC address written `02:00:0a:c9:01:02`.
pub(crate) fn mac(s: &str) -> Option<[u8; 6]> {
    let bytes: Vec<u8> = s
        .split(':')
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    bytes.try_into().ok()
}

/// The fields of the packet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UdpPacket {
    pub(crate) src_mac: [u8; 6],
    pub(crate) dst_mac: [u8; 6],
    pub(crate) src_ip: Ipv4Addr,
    pub(crate) dst_ip: Ipv4Addr,
    /// UDP destination port (the source port is 9999).
    pub(crate) dport: u16,
    /// Frame length without FCS; raised to the headers' length if shorter.
    pub(crate) size: usize,
    pub(crate) encap: Encap,
}

impl UdpPacket {
    /// The frame's bytes (UDP checksum 0: allowed over IPv4).
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let encap_len = self.encap.header(0).len() - 2;
        let size = self.size.max(42 + encap_len);
        let mut f = vec![0u8; size];
        f[0..6].copy_from_slice(&self.dst_mac);
        f[6..12].copy_from_slice(&self.src_mac);
        let ip_len = (size - 14 - encap_len) as u16;
        f[12..14 + encap_len].copy_from_slice(&self.encap.header(ip_len));
        let f_ip = &mut f[14 + encap_len..];
        let ip = &mut f_ip[..20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&self.src_ip.octets());
        ip[16..20].copy_from_slice(&self.dst_ip.octets());
        let checksum = !fold(ones_sum(ip));
        ip[10..12].copy_from_slice(&checksum.to_be_bytes());
        f_ip[20..22].copy_from_slice(&9999u16.to_be_bytes());
        f_ip[22..24].copy_from_slice(&self.dport.to_be_bytes());
        f_ip[24..26].copy_from_slice(&(ip_len - 20).to_be_bytes());
        f
    }
}

/// Where the UDP header (its source port) starts in a packet of `encap`.
pub(crate) fn udp_offset(encap: Encap) -> usize {
    14 + encap.header(0).len() - 2 + 20
}

/// The 16-bit words of `header` summed (RFC 1071), not yet folded.
fn ones_sum(header: &[u8]) -> u32 {
    header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)])))
        .sum()
}

/// Carries folded back into 16 bits.
fn fold(sum: u32) -> u16 {
    let sum = (sum & 0xffff) + (sum >> 16);
    ((sum & 0xffff) + (sum >> 16)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(encap: Encap, size: usize) -> Vec<u8> {
        UdpPacket {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 201, 1, 2),
            dst_ip: Ipv4Addr::new(10, 202, 1, 2),
            dport: 5001,
            size,
            encap,
        }
        .bytes()
    }

    #[test]
    fn headers_are_where_each_encapsulation_puts_them_and_the_ip_checksum_verifies() {
        for (encap, ip_at) in [
            (Encap::None, 14),
            (Encap::Vlan, 18),
            (Encap::Qinq, 22),
            (Encap::Pppoe, 22),
            (Encap::Mpls, 18),
        ] {
            let f = packet(encap, 60);
            assert_eq!(f.len(), 60, "{encap:?}");
            let ip = &f[ip_at..];
            assert_eq!(ip[0], 0x45, "{encap:?}");
            assert_eq!(fold(ones_sum(&ip[..20])), 0xffff, "{encap:?}: checksum");
            let ip_len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            assert_eq!(ip_len, 60 - ip_at, "{encap:?}");
            assert_eq!(u16::from_be_bytes([ip[22], ip[23]]), 5001);
            // --flows rewrites the source port where udp_offset says it is.
            let at = udp_offset(encap);
            assert_eq!(
                (at, u16::from_be_bytes([f[at], f[at + 1]])),
                (ip_at + 20, 9999)
            );
            assert_eq!(
                usize::from(u16::from_be_bytes([ip[24], ip[25]])),
                ip_len - 20
            );
        }
        let pppoe = packet(Encap::Pppoe, 100);
        assert_eq!(u16::from_be_bytes([pppoe[18], pppoe[19]]), 100 - 22 + 2);
    }

    #[test]
    fn a_size_below_the_headers_grows_to_them_and_jumbo_sizes_are_kept() {
        assert_eq!(packet(Encap::None, 10).len(), 42);
        assert_eq!(packet(Encap::Qinq, 10).len(), 50);
        assert_eq!(packet(Encap::None, 9014).len(), 9014);
        assert_eq!(mac("02:00:0a:c9:01:02"), Some([2, 0, 0x0a, 0xc9, 1, 2]));
        assert_eq!(mac("02:00:0a:c9:01"), None);
    }
}
