//! `htbd --config FILE --print-tc`: the same trees and filters as kernel `tc` commands — to
//! compare with the kernel's HTB on the same box, or to go back to it.

use htb_config::TreeSpec;
use htb_config::filter::{Filter, Match};
use htb_core::{LeafConfig, LinkLayer};
use htb_xdp::PortConfig;

use crate::{DaemonConfig, InterfaceTrees};

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

/// A policer as tc's options (` police rate R burst B … conform-exceed E/C`). A filter whose
/// port range takes several u32 filters gets one policer on each in the kernel.
fn police_args(p: &htb_config::filter::PoliceConfig) -> String {
    let mut out = String::from(" police");
    if let Some(r) = p.rate {
        out += &format!(" rate {}bit burst {}", r.bits_per_sec(), p.burst);
    }
    if p.mtu != 0 {
        out += &format!(" mtu {}", p.mtu);
    }
    if let Some(r) = p.peakrate {
        out += &format!(" peakrate {}bit", r.bits_per_sec());
    }
    let a = p.adjust;
    if a.overhead != 0 {
        out += &format!(" overhead {}", a.overhead);
    }
    if a.mpu != 0 {
        out += &format!(" mpu {}", a.mpu);
    }
    if a.link_layer == LinkLayer::Atm {
        out += " linklayer atm";
    }
    out += &format!(" conform-exceed {}/{}", p.exceed.name(), p.conform.name());
    out
}

/// `u32` filters for one filter: kernels without `flower` (like this lab's) have `u32`. Port
/// ranges become mask-aligned blocks, ports without a protocol one filter per transport; a VLAN
/// match has no u32 form on egress and is left out with a comment.
fn u32_filters(dev: &str, major: u16, filter: &Filter, action: Option<&str>) -> Vec<String> {
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
                for k in m.raw.as_slice() {
                    keys.push(format!(
                        "match u32 0x{:08x} 0x{:08x} at {}{}",
                        k.value,
                        k.mask,
                        if k.nexthdr { "nexthdr+" } else { "" },
                        k.at
                    ));
                }
                if keys.is_empty() {
                    keys.push("match u32 0 0".into());
                }
                let protocol = match (ip, v6) {
                    _ if m.arp => "arp",
                    (false, _) => "all",
                    (true, true) => "ipv6",
                    (true, false) => "ip",
                };
                let police = filter
                    .police
                    .as_ref()
                    .map(|p| police_args(p.config()))
                    .unwrap_or_default();
                let tail = match action {
                    Some(action) => action.to_owned(),
                    None => format!("flowid {}", filter.class),
                };
                out.push(format!(
                    "tc filter add dev {dev} parent {major:x}: protocol {protocol} prio {} u32 {}{police} {tail}",
                    filter.prio + 1,
                    keys.join(" "),
                ));
            }
        }
    }
    out
}

/// tc commands building `port`'s trees (`trees`: its `mq` and trees as the config gives
/// them) and filters; none for an unshaped port.
#[must_use]
pub fn port_commands(trees: &InterfaceTrees, port: &PortConfig) -> Vec<String> {
    let dev = &port.name;
    let mut out = Vec::new();
    if trees.ifb {
        // The kernel needs the device; htbd shapes without one.
        out.push(format!(
            "ip link add name {dev} type ifb 2>/dev/null || true; ip link set dev {dev} up"
        ));
    }
    if let Some(ingress) = &trees.ingress {
        out.push(format!(
            "tc qdisc del dev {dev} ingress 2>/dev/null || true"
        ));
        out.push(format!("tc qdisc add dev {dev} handle ffff: ingress"));
        for (filter, redirect) in crate::model::ingress_hook_of(ingress) {
            let action = redirect.map_or_else(
                || "flowid :1".to_owned(),
                |to| format!("action mirred egress redirect dev {to}"),
            );
            out.extend(u32_filters(dev, INGRESS, &filter, Some(&action)));
        }
    }
    if port.trees.is_empty() {
        return out;
    }
    out.push(format!("tc qdisc del dev {dev} root 2>/dev/null || true"));
    if let Some(root) = &trees.root_leaf {
        let stab = trees.trees.first().and_then(|t| t.tree.tree.config.stab);
        out.push(format!(
            "tc qdisc add dev {dev} root handle {:x}: {}{}",
            root.handle.unwrap_or(1),
            stab_args(stab),
            tc_leaf_args(&root.config)
        ));
        return out;
    }
    if let Some(mq) = trees.mq {
        out.push(format!("tc qdisc add dev {dev} root handle {mq:x}: mq"));
        out.push(format!(
            "# {dev}: htbd steers a packet to the tree of the class its first matching filter \
             names; the kernel's mq picks the TX queue first (XPS, hash), and each tree's filters \
             see only that queue's packets"
        ));
    }
    for tree in &port.trees {
        let at = match (trees.mq, tree.mq_minor) {
            (Some(mq), Some(minor)) => format!("parent {mq:x}:{minor:x}"),
            _ => "root".to_owned(),
        };
        tree_commands(dev, &at, &tree.tree, &mut out);
    }
    out.extend(
        port.filters
            .iter()
            .flat_map(|f| u32_filters(dev, f.class.major(), f, None)),
    );
    out
}

/// A size table as tc's options, before the qdisc's kind (`stab overhead 34 linklayer
/// ethernet `), or nothing.
fn stab_args(stab: Option<htb_core::SizeTable>) -> String {
    let Some(s) = stab.map(|t| t.spec()) else {
        return String::new();
    };
    let mut out = String::from("stab ");
    for (key, v) in [("mtu", s.mtu), ("tsize", s.tsize), ("mpu", s.mpu)] {
        if v != 0 {
            out += &format!("{key} {v} ");
        }
    }
    if s.overhead != 0 {
        out += &format!("overhead {} ", s.overhead);
    }
    if let Some(l) = s.link_layer {
        out += &format!("linklayer {} ", l.name());
    }
    out
}

/// tc commands building one HTB tree at `at` (`root`, or `parent 7fff:1`): its qdisc, classes
/// and leaves.
fn tree_commands(dev: &str, at: &str, tree: &TreeSpec, out: &mut Vec<String>) {
    let c = &tree.config;
    let major = c.major;
    out.push(format!(
        "tc qdisc add dev {dev} {at} handle {major:x}: {}htb default {:x} r2q {} direct_qlen {}",
        stab_args(c.stab),
        c.default_minor,
        c.r2q,
        c.direct_qlen
    ));
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
    }
    // Every leaf gets its qdisc, the default one too: the kernel's default is pfifo, htbd's
    // fq_codel unless the config says otherwise.
    for class in &tree.classes {
        if tree.classes.iter().any(|c| c.parent == Some(class.id)) {
            continue;
        }
        let (handle, leaf) = match &class.leaf {
            Some(l) => (l.handle, l.config),
            None => (None, c.default_leaf),
        };
        let handle = handle.map_or_else(String::new, |h| format!(" handle {h:x}:"));
        out.push(format!(
            "tc qdisc add dev {dev} parent {}{handle} {}",
            class.id,
            tc_leaf_args(&leaf)
        ));
    }
}

/// A leaf's kind and options as tc reads them (`fq_codel limit 10240 …`), every option given
/// so that the kernel's qdisc matches htbd's whatever its defaults: each kind's own writer
/// ([`LeafConfig::tc_args`]), kept with its spec in the core.
#[must_use]
pub fn tc_leaf_args(leaf: &LeafConfig) -> String {
    format!("{}{}", leaf.kind().name(), leaf.tc_args())
}

/// The ingress qdisc's handle major.
const INGRESS: u16 = crate::model::INGRESS_MAJOR;

/// tc commands for every shaped port of `config` (IFB ports first: the kernel's mirred
/// needs its device to exist).
#[must_use]
pub fn commands(config: &DaemonConfig) -> Vec<String> {
    config
        .interfaces
        .iter()
        .zip(&config.engine.ports)
        .filter(|(trees, _)| trees.ifb)
        .chain(
            config
                .interfaces
                .iter()
                .zip(&config.engine.ports)
                .filter(|(trees, _)| !trees.ifb),
        )
        .flat_map(|(trees, port)| port_commands(trees, port))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_translate_to_tc() {
        let text = "[daemon]\nstate_dir = \"/tmp/x\"\n[[interface]]\nname = \"r2\"\n\
                    [interface.qdisc]\nleaf = \"sfq\"\n[[interface.class]]\nid = \"1:1\"\nrate = \"10mbit\"\n\
                    [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"1mbit\"\n\
                    leaf = { kind = \"fq_codel\", handle = \"10:\", target = \"10ms\", ecn = false }\n\
                    [[interface.class]]\nid = \"1:20\"\nparent = \"1:1\"\nrate = \"1mbit\"\nlimit = 50\n\
                    [[interface.class]]\nid = \"1:30\"\nparent = \"1:1\"\nrate = \"5mbit\"\n\
                    leaf = { kind = \"tbf\", rate = \"1mbit\", burst = \"10k\", latency = \"50ms\" }\n";
        let config = DaemonConfig::parse(text).unwrap();
        let cmds = commands(&config);
        assert!(cmds.contains(&"tc qdisc add dev r2 parent 1:10 handle 10: fq_codel limit 10240 flows 1024 target 10ms interval 100ms quantum 1514 memory_limit 33554432 drop_batch 64 noecn".to_owned()), "{cmds:#?}");
        assert!(cmds.contains(&"tc qdisc add dev r2 parent 1:20 sfq limit 50 quantum 1514 depth 127 divisor 1024 flows 50".to_owned()), "{cmds:#?}");
        // A tbf's latency is written as the limit tc made of it.
        assert!(
            cmds.contains(
                &"tc qdisc add dev r2 parent 1:30 tbf rate 1000000bit burst 10240 limit 16490"
                    .to_owned()
            ),
            "{cmds:#?}"
        );
        assert!(
            !cmds
                .iter()
                .any(|c| c.starts_with("tc qdisc add dev r2 parent 1:1 ")),
            "inner classes take no leaf"
        );
    }

    #[test]
    fn a_size_table_goes_before_the_qdisc_kind() {
        let text = "[daemon]\nstate_dir = \"/tmp/x\"\n[[interface]]\nname = \"r2\"\n\
                    [interface.qdisc]\nstab = { overhead = 44, linklayer = \"atm\" }\n\
                    [[interface.class]]\nid = \"1:1\"\nrate = \"10mbit\"\n";
        let config = DaemonConfig::parse(text).unwrap();
        let cmds = commands(&config);
        assert_eq!(
            cmds[1],
            "tc qdisc add dev r2 root handle 1: stab mtu 2047 tsize 512 overhead 44 linklayer atm htb default 0 r2q 10 direct_qlen 1000"
        );
    }

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
    fn an_ingress_redirect_and_its_ifb_translate_to_tc_and_ip() {
        let text = "[daemon]\nstate_dir = \"/tmp/x\"\n[[interface]]\nname = \"r2\"\n\
                    [interface.ingress]\nredirect = \"ifb0\"\n\
                    [[interface]]\nname = \"ifb0\"\ntype = \"ifb\"\n\
                    [[interface.class]]\nid = \"1:1\"\nrate = \"10mbit\"\n";
        let cmds = commands(&DaemonConfig::parse(text).unwrap());
        // The IFB first: mirred needs its device.
        assert_eq!(
            cmds[0],
            "ip link add name ifb0 type ifb 2>/dev/null || true; ip link set dev ifb0 up"
        );
        let redirect = cmds.iter().position(|c| c.contains("mirred")).unwrap();
        assert_eq!(
            cmds[redirect - 1..=redirect],
            [
                "tc qdisc add dev r2 handle ffff: ingress".to_owned(),
                "tc filter add dev r2 parent ffff: protocol all prio 11 u32 match u32 0 0 action mirred egress redirect dev ifb0".to_owned()
            ]
        );
        assert!(
            cmds[..redirect]
                .iter()
                .any(|c| c.starts_with("tc class add dev ifb0 parent 1: classid 1:1")),
            "{cmds:#?}"
        );
    }

    #[test]
    fn an_mq_root_translates_to_mq_and_an_htb_per_class() {
        let text = "[daemon]\nstate_dir = \"/tmp/x\"\n[[interface]]\nname = \"r1\"\nmq = \"7fff:\"\n\
                    [[interface.tree]]\nparent = \"7fff:2\"\nqdisc = { handle = \"2:\", default = \"1\" }\n\
                    [[interface.tree.class]]\nid = \"2:1\"\nrate = \"10mbit\"\n\
                    [[interface.tree.filter]]\nprio = 1\nmatch = { dst = \"10.0.0.2/32\" }\nclassid = \"2:1\"\n";
        let cmds = commands(&DaemonConfig::parse(text).unwrap());
        assert_eq!(cmds[1], "tc qdisc add dev r1 root handle 7fff: mq");
        assert!(cmds.contains(
            &"tc qdisc add dev r1 parent 7fff:2 handle 2: htb default 1 r2q 10 direct_qlen 1000"
                .to_owned()
        ));
        assert!(
            cmds.iter()
                .any(|c| c.starts_with("tc filter add dev r1 parent 2: protocol ip")),
            "the filter goes on its class's tree: {cmds:#?}"
        );
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
