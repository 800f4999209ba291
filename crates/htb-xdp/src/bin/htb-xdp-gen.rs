//! `htb-xdp-gen IFACE --src-mac M --dst-mac M --src-ip A --dst-ip A [--size 60] [--seconds 5]
//! [--rate 1.3gbit]`: sends one UDP/IPv4 packet shape as fast as AF_XDP copy mode allows (or
//! paced to an L2 rate) and prints the rate — the lab benchmark's small-packet source, and the
//! lab tests' gigabit source (iperf3 cannot offer 1.2 Gbit/s beside htbd on two cores).

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
}

fn mac(s: &str) -> Option<[u8; 6]> {
    let bytes: Vec<u8> = s
        .split(':')
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    bytes.try_into().ok()
}

/// An Ethernet + IPv4 + UDP frame of `size` bytes (UDP checksum 0: allowed over IPv4).
fn frame(args: &Args, src: [u8; 6], dst: [u8; 6]) -> Vec<u8> {
    let size = args.size.max(42);
    let mut f = vec![0u8; size];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (size - 14) as u16;
    let ip = &mut f[14..34];
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
    f[34..36].copy_from_slice(&9999u16.to_be_bytes());
    f[36..38].copy_from_slice(&args.dport.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (Some(src), Some(dst)) = (mac(&args.src_mac), mac(&args.dst_mac)) else {
        eprintln!("htb-xdp-gen: MAC addresses look like 02:00:0a:c9:01:02");
        return ExitCode::from(2);
    };
    let pps = match args.rate.as_deref().map(htb_core::units::parse_rate) {
        None => None,
        Some(Ok(rate)) => Some(rate.bits_per_sec() as f64 / (args.size.max(42) * 8) as f64),
        Some(Err(e)) => {
            eprintln!("htb-xdp-gen: --rate: {e}");
            return ExitCode::from(2);
        }
    };
    let packet = frame(&args, src, dst);
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
