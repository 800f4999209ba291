//! `htb-xdp-gen IFACE --src-mac M --dst-mac M --src-ip A --dst-ip A [--size 60] [--seconds 5]
//! [--rate 1.3gbit] [--encap pppoe]`: sends one UDP/IPv4 packet shape as fast as AF_XDP copy
//! mode allows (or paced to an L2 rate) and prints the rate — the lab benchmark's small-packet
//! source, and the lab tests' gigabit source (iperf3 cannot offer 1.2 Gbit/s beside htbd on two
//! cores). `--encap` wraps the IP packet as access networks carry it: a VLAN tag, QinQ, a PPPoE
//! session or an MPLS label.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use htb_xdp::TxGenerator;

#[derive(Parser)]
#[command(name = "htb-xdp-gen", about = "AF_XDP UDP packet generator")]
struct Args {
    /// Interface to send from.
    interface: String,
    #[arg(long)]
    src_mac: String,
    #[arg(long)]
    dst_mac: String,
    #[arg(long)]
    src_ip: Ipv4Addr,
    #[arg(long)]
    dst_ip: Ipv4Addr,
    /// UDP destination port.
    #[arg(long, default_value_t = 9)]
    dport: u16,
    /// Frame size without FCS (60 = a 64-byte frame on the wire).
    #[arg(long, default_value_t = 60)]
    size: usize,
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Pace to this L2 rate (frame bytes, FCS excluded), e.g. "1.3gbit"; default: flat out.
    #[arg(long)]
    rate: Option<String>,
    /// The interface's TX queue to send on (a veth delivers it to its peer's RX queue of the
    /// same number).
    #[arg(long, default_value_t = 0)]
    queue: u32,
    /// What carries the IP packet after the Ethernet header.
    #[arg(long, value_enum, default_value_t = Encap::None)]
    encap: Encap,
}

/// The encapsulations of `--encap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Encap {
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

fn mac(s: &str) -> Option<[u8; 6]> {
    let bytes: Vec<u8> = s
        .split(':')
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    bytes.try_into().ok()
}

/// An Ethernet + (encapsulation +) IPv4 + UDP frame of `size` bytes (UDP checksum 0: allowed
/// over IPv4).
fn frame(args: &Args, src: [u8; 6], dst: [u8; 6]) -> Vec<u8> {
    let encap_len = args.encap.header(0).len() - 2;
    let size = args.size.max(42 + encap_len);
    let mut f = vec![0u8; size];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    let ip_len = (size - 14 - encap_len) as u16;
    f[12..14 + encap_len].copy_from_slice(&args.encap.header(ip_len));
    let f_ip = &mut f[14 + encap_len..];
    let ip = &mut f_ip[..20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&args.src_ip.octets());
    ip[16..20].copy_from_slice(&args.dst_ip.octets());
    let sum = (0..10)
        .map(|i| u32::from(u16::from_be_bytes([ip[2 * i], ip[2 * i + 1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let checksum = !((sum & 0xffff) + (sum >> 16)) as u16;
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    f_ip[20..22].copy_from_slice(&9999u16.to_be_bytes());
    f_ip[22..24].copy_from_slice(&args.dport.to_be_bytes());
    f_ip[24..26].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (Some(src), Some(dst)) = (mac(&args.src_mac), mac(&args.dst_mac)) else {
        eprintln!("htb-xdp-gen: MAC addresses look like 02:00:0a:c9:01:02");
        return ExitCode::from(2);
    };
    let packet = frame(&args, src, dst);
    let pps = match args.rate.as_deref().map(htb_core::units::parse_rate) {
        None => None,
        Some(Ok(rate)) => Some(rate.bits_per_sec() as f64 / (packet.len() * 8) as f64),
        Some(Err(e)) => {
            eprintln!("htb-xdp-gen: --rate: {e}");
            return ExitCode::from(2);
        }
    };
    let mut generator = match TxGenerator::new(&args.interface, args.queue, &packet, 8192) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("htb-xdp-gen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let start = Instant::now();
    let sent = generator.run(Duration::from_secs(args.seconds), pps);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{{\"sent\":{sent},\"seconds\":{secs:.3},\"pps\":{:.0},\"bps\":{:.0}}}",
        sent as f64 / secs,
        sent as f64 * (packet.len() * 8) as f64 / secs
    );
    ExitCode::SUCCESS
}
