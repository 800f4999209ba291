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

mod generator;
mod packet;

use generator::TxGenerator;
use packet::{Encap, UdpPacket, mac};

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
    /// Send this many flows at once, one packet each in turn: source ports 10000 to 59999,
    /// then the next destination port (single-frame packets).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    flows: Option<u32>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (Some(src), Some(dst)) = (mac(&args.src_mac), mac(&args.dst_mac)) else {
        eprintln!("htb-xdp-gen: MAC addresses look like 02:00:0a:c9:01:02");
        return ExitCode::from(2);
    };
    let packet = UdpPacket {
        src_mac: src,
        dst_mac: dst,
        src_ip: args.src_ip,
        dst_ip: args.dst_ip,
        dport: args.dport,
        size: args.size,
        encap: args.encap,
    }
    .bytes();
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
    if let Some(count) = args.flows {
        let sport_at = packet::udp_offset(args.encap);
        if let Err(e) = generator.vary_source_port(&packet, sport_at, count) {
            eprintln!("htb-xdp-gen: --flows: {e}");
            return ExitCode::from(2);
        }
    }
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
