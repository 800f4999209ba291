//! `htb-cli flows [ dev DEV ] [ class CLASSID ] [ top N ]`: the flow records htbd keeps now
//! (its `[flows]` section), the largest first — what an operator asks first when a customer
//! is slow: what is eating the class, and how long its round trips are. `tc` has no such
//! command; the kernel keeps no flows.

use std::fmt::Write as _;
use std::io::Write;

use htb_ipc::{FlowList, FlowsQuery, ReplyBody, RequestBody};

use super::parse::Options;
use crate::client::{Client, ClientError};

/// Asks htbd and prints its answer (`-j`: as JSON).
pub(super) fn run(
    client: &mut Client,
    options: &Options,
    ask: FlowsQuery,
    out: &mut impl Write,
) -> Result<(), ClientError> {
    let ReplyBody::Flows(list) = client.call(RequestBody::Flows(ask))? else {
        return Err(ClientError::Unexpected);
    };
    let text = if options.json {
        super::format::json(&list, options.pretty).map_err(|_| ClientError::Unexpected)?
    } else {
        format(&list)
    };
    let _ = out.write_all(text.as_bytes());
    Ok(())
}

/// A byte count as tc prints sizes.
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 10 << 30 => format!("{}Gb", b >> 30),
        b if b >= 10 << 20 => format!("{}Mb", b >> 20),
        b if b >= 10 << 10 => format!("{}Kb", b >> 10),
        b => format!("{b}b"),
    }
}

/// TCP flags as letters (`FSRPAU`: FIN, SYN, RST, PSH, ACK, URG), as nfdump prints them.
fn flags(f: u8) -> String {
    ["F", "S", "R", "P", "A", "U"]
        .iter()
        .enumerate()
        .map(|(bit, l)| if f & (1 << bit) != 0 { *l } else { "." })
        .collect()
}

/// An address and port as one word (`[v6]:port`, `v4:port`; no port without one).
fn endpoint(addr: std::net::IpAddr, port: u16, proto: u8) -> String {
    let ports = matches!(proto, 6 | 17 | 132 | 136);
    match (addr, ports) {
        (std::net::IpAddr::V6(a), true) => format!("[{a}]:{port}"),
        (a, true) => format!("{a}:{port}"),
        (a, false) => a.to_string(),
    }
}

/// The text form: a header line, then a line per flow.
#[must_use]
pub(super) fn format(list: &FlowList) -> String {
    let mut text = format!(
        "{} flows{}{}\n",
        list.matched,
        if list.flows.len() < list.matched as usize {
            format!(", the {} largest", list.flows.len())
        } else {
            String::new()
        },
        if list.sampling > 1 {
            format!(" (1 in {} packets sampled)", list.sampling)
        } else {
            String::new()
        }
    );
    for f in &list.flows {
        let proto = match f.proto {
            6 => "tcp".to_owned(),
            17 => "udp".to_owned(),
            1 => "icmp".to_owned(),
            58 => "icmpv6".to_owned(),
            n => n.to_string(),
        };
        let _ = write!(
            text,
            "{proto} {} > {}",
            endpoint(f.src, f.sport, f.proto),
            endpoint(f.dst, f.dport, f.proto)
        );
        if let Some(vlan) = f.vlan {
            let _ = write!(text, " vlan {vlan}");
        }
        let _ = write!(text, " dev {} > {}", f.ingress, f.egress);
        if let Some(class) = f.class {
            let _ = write!(text, " class {class}");
        }
        let _ = write!(
            text,
            "\n  {} {} pkts, {} ms old, idle {} ms",
            size(f.bytes),
            f.packets,
            f.age_ms,
            f.idle_ms
        );
        if f.proto == 6 {
            let _ = write!(text, ", flags {}", flags(f.tcp_flags));
        }
        if let (Some(min), Some(median)) = (f.rtt_min_us, f.rtt_median_us) {
            let _ = write!(
                text,
                ", rtt min {:.3} ms median {:.3} ms",
                min as f64 / 1e3,
                median as f64 / 1e3
            );
        }
        if f.retransmits > 0 {
            let _ = write!(text, ", {} retransmits", f.retransmits);
        }
        if f.leaf_drops > 0 {
            let _ = write!(text, ", {} dropped", f.leaf_drops);
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::ClassId;
    use htb_ipc::FlowEntry;

    #[test]
    fn each_flow_gets_its_line_and_counts() {
        let list = FlowList {
            flows: vec![
                FlowEntry {
                    src: "10.201.1.2".parse().unwrap(),
                    dst: "10.201.2.2".parse().unwrap(),
                    proto: 6,
                    sport: 40000,
                    dport: 5201,
                    vlan: None,
                    ingress: "r1".parse().unwrap(),
                    egress: "r2".parse().unwrap(),
                    class: Some(ClassId::new(1, 0x10)),
                    bytes: 12_500_000,
                    packets: 8300,
                    age_ms: 10_000,
                    idle_ms: 0,
                    tcp_flags: 0x18,
                    rtt_min_us: Some(420),
                    rtt_median_us: Some(1_250),
                    retransmits: 3,
                    leaf_drops: 2,
                },
                FlowEntry {
                    src: "2001:db8::1".parse().unwrap(),
                    dst: "2001:db8::2".parse().unwrap(),
                    proto: 58,
                    sport: 0,
                    dport: 0,
                    vlan: Some(100),
                    ingress: "r1".parse().unwrap(),
                    egress: "r2".parse().unwrap(),
                    class: None,
                    bytes: 840,
                    packets: 10,
                    age_ms: 9_000,
                    idle_ms: 900,
                    tcp_flags: 0,
                    rtt_min_us: None,
                    rtt_median_us: None,
                    retransmits: 0,
                    leaf_drops: 0,
                },
            ],
            matched: 7,
            sampling: 1,
        };
        assert_eq!(
            format(&list),
            "7 flows, the 2 largest\n\
             tcp 10.201.1.2:40000 > 10.201.2.2:5201 dev r1 > r2 class 1:10\n  \
             11Mb 8300 pkts, 10000 ms old, idle 0 ms, flags ...PA., rtt min 0.420 ms \
             median 1.250 ms, 3 retransmits, 2 dropped\n\
             icmpv6 2001:db8::1 > 2001:db8::2 vlan 100 dev r1 > r2\n  \
             840b 10 pkts, 9000 ms old, idle 900 ms\n"
        );
        let sampled = FlowList {
            sampling: 100,
            ..FlowList::default()
        };
        assert_eq!(format(&sampled), "0 flows (1 in 100 packets sampled)\n");
    }
}
