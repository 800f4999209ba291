//! `htbd --config FILE --print-tc`: the same trees and filters as kernel `tc` commands — to
//! compare with the kernel's HTB on the same box, or to go back to it.

use htb_config::filter::{Filter, Match};
use htb_core::LinkLayer;
use htb_xdp::PortConfig;

use crate::DaemonConfig;

/// Splits an inclusive port range into `(value, mask)` blocks u32 can match.
fn port_blocks(first: u16, last: u16) -> Vec<(u16, u16)> {
    let mut blocks = Vec::new();
    let (mut at, last) = (u32::from(first), u32::from(last));
    while at <= last {
        // The largest aligned power-of-two block starting at `at` that stays within the range.
        let mut size = if at == 0 {
            1 << 16
        } else {
            1u32 << at.trailing_zeros()
        };
        while at + size - 1 > last {
            size >>= 1;
        }
        blocks.push((at as u16, (!(size - 1) & 0xffff) as u16));
        at += size;
    }
    blocks
}

/// `u32` filters for one filter: kernels without `flower` (like this lab's) have `u32`. Port
/// ranges become mask-aligned blocks, ports without a protocol one filter per transport; a VLAN
/// match has no u32 form on egress and is left out with a comment.
fn u32_filters(dev: &str, major: u16, filter: &Filter) -> Vec<String> {
    let m: &Match = &filter.matcher;
    let v6 = m.src.or(m.dst).is_some_and(|p| p.to_string().contains(':'));
    let family = if v6 { "ip6" } else { "ip" };
    let protocols: Vec<Option<u8>> = match m.proto {
        Some(p) => vec![Some(p)],
        None if m.sport.is_some() || m.dport.is_some() => vec![Some(6), Some(17)],
        None => vec![None],
    };
    let blocks = |r: Option<htb_config::filter::PortRange>| match r {
        Some(r) => port_blocks(r.first, r.last).into_iter().map(Some).collect(),
        None => vec![None],
    };
    let mut out = Vec::new();
    if m.vlan.is_some() {
        out.push(format!(
            "# {dev}: filter \"{m}\" matches a VLAN id, which u32 cannot on egress; left out"
        ));
        return out;
    }
    for proto in protocols {
        for sport in blocks(m.sport) {
            for dport in blocks(m.dport) {
                let mut keys = Vec::new();
                if let Some(p) = m.src {
                    keys.push(format!("match {family} src {p}"));
                }
                if let Some(p) = m.dst {
                    keys.push(format!("match {family} dst {p}"));
                }
                if let Some(p) = proto {
                    keys.push(format!("match {family} protocol {p} 0xff"));
                }
                if let Some((v, mask)) = sport {
                    keys.push(format!("match {family} sport {v} 0x{mask:x}"));
                }
                if let Some((v, mask)) = dport {
                    keys.push(format!("match {family} dport {v} 0x{mask:x}"));
                }
                if let Some(d) = m.dscp {
                    if v6 {
                        keys.push(format!("match ip6 priority 0x{:x} 0xfc", d << 2));
                    } else {
                        keys.push(format!("match ip tos 0x{:x} 0xfc", d << 2));
                    }
                }
                let ip = !keys.is_empty();
                if !ip {
                    keys.push("match u32 0 0".into());
                }
                let protocol = match (ip, v6) {
                    (false, _) => "all",
                    (true, true) => "ipv6",
                    (true, false) => "ip",
                };
                out.push(format!(
                    "tc filter add dev {dev} parent {major:x}: protocol {protocol} prio {} u32 {} flowid {}",
                    filter.prio + 1,
                    keys.join(" "),
                    filter.class
                ));
            }
        }
    }
    out
}

/// tc commands building `port`'s tree and filters (none for an unshaped port).
#[must_use]
pub fn port_commands(port: &PortConfig) -> Vec<String> {
    let Some(tree) = &port.tree else {
        return Vec::new();
    };
    let dev = &port.name;
    let c = &tree.config;
    let major = c.major;
    let mut out = vec![
        format!("tc qdisc del dev {dev} root 2>/dev/null || true"),
        format!(
            "tc qdisc add dev {dev} root handle {major:x}: htb default {:x} r2q {} direct_qlen {}",
            c.default_minor, c.r2q, c.direct_qlen
        ),
    ];
    for class in &tree.classes {
        let s = &class.spec;
        let parent = class
            .parent
            .map_or_else(|| format!("{major:x}:"), |p| p.to_string());
        let mut line = format!(
            "tc class add dev {dev} parent {parent} classid {} htb rate {}bit ceil {}bit prio {}",
            class.id,
            s.rate.bits_per_sec(),
            s.ceil.unwrap_or(s.rate).bits_per_sec(),
            s.prio.min(7)
        );
        for (name, value) in [("burst", s.burst), ("cburst", s.cburst)] {
            if let Some(v) = value {
                line += &format!(" {name} {v}");
            }
        }
        if let Some(q) = s.quantum {
            line += &format!(" quantum {q}");
        }
        if let Some(m) = s.mtu {
            line += &format!(" mtu {m}");
        }
        if s.adjust.overhead != 0 {
            line += &format!(" overhead {}", s.adjust.overhead);
        }
        if s.adjust.mpu != 0 {
            line += &format!(" mpu {}", s.adjust.mpu);
        }
        if s.adjust.link_layer == LinkLayer::Atm {
            line += " linklayer atm";
        }
        out.push(line);
        if let Some(limit) = s.limit {
            out.push(format!(
                "tc qdisc add dev {dev} parent {} pfifo limit {limit}",
                class.id
            ));
        }
    }
    out.extend(port.filters.iter().flat_map(|f| u32_filters(dev, major, f)));
    out
}

/// tc commands for every shaped port of `config`.
#[must_use]
pub fn commands(config: &DaemonConfig) -> Vec<String> {
    config.engine.ports.iter().flat_map(port_commands).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_example_translates_to_tc() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/lab.toml"
        ))
        .unwrap();
        let config = DaemonConfig::parse(&text).unwrap();
        let cmds = commands(&config);
        assert_eq!(
            cmds[1],
            "tc qdisc add dev r2 root handle 1: htb default 30 r2q 10 direct_qlen 1000"
        );
        assert_eq!(
            cmds[2],
            "tc class add dev r2 parent 1: classid 1:1 htb rate 300000000bit ceil 300000000bit prio 0"
        );
        assert_eq!(
            cmds[3],
            "tc class add dev r2 parent 1:1 classid 1:10 htb rate 50000000bit ceil 300000000bit prio 0"
        );
        assert!(cmds.contains(
            &"tc filter add dev r2 parent 1: protocol ip prio 2 u32 match ip dst 10.201.2.0/24 match ip protocol 17 0xff match ip dport 5201 0xffff flowid 1:10"
                .to_owned()
        ));
        // Ports without a protocol: one filter per transport.
        assert!(cmds.iter().any(|c| {
            c.ends_with("match ip protocol 17 0xff match ip dport 5202 0xffff flowid 1:20")
        }));
        assert!(cmds.iter().any(|c| {
            c.ends_with("match ip protocol 6 0xff match ip dport 5203 0xffff flowid 1:30")
        }));
    }

    #[test]
    fn port_ranges_become_mask_blocks() {
        assert_eq!(port_blocks(5201, 5201), [(5201, 0xffff)]);
        assert_eq!(port_blocks(5000, 5007), [(5000, 0xfff8)]);
        assert_eq!(
            port_blocks(1, 6),
            [(1, 0xffff), (2, 0xfffe), (4, 0xfffe), (6, 0xffff)]
        );
        assert_eq!(port_blocks(0, 65535), [(0, 0)]);
        let covered: u32 = port_blocks(1000, 2000)
            .iter()
            .map(|&(_, m)| (!u32::from(m) & 0xffff) + 1)
            .sum();
        assert_eq!(covered, 1001);
    }
}
