//! `htbd --config FILE --print-tc`: the same trees and filters as kernel `tc` commands — to
//! compare with the kernel's HTB on the same box, or to go back to it. Each command is built
//! as the typed [`Command`] htb-cli would send htbd and written by htb-tc's one writer
//! ([`htb_tc::write::command_line`]), so that the words are tc's own grammar; what u32 cannot
//! express, and what the kernel must be told beside tc (the IFB device), are written here.

use htb_config::TreeSpec;
use htb_config::filter::{Family, Filter, Match, PortRange};
use htb_core::{ClassId, DiffservMode, Duration, LeafConfig, LeafSpec, LinkLayer, SizeTable};
use htb_ipc::{
    ClassSpec, Command, FilterKind, FilterSpec, InterfaceName, LeafQdiscSpec, MqSpec, Protocol,
    QdiscSpec,
};
use htb_tc::write::{WriteError, command_line};
use htb_xdp::PortConfig;

use crate::{DaemonConfig, InterfaceTrees};

/// Why a port's trees have no tc commands: one of them has no words in tc's grammar.
#[derive(Debug, thiserror::Error)]
#[error("{dev}: a command has no tc words: {source}")]
pub struct TcExportError {
    /// The port.
    pub dev: String,
    /// The writer's reason.
    #[source]
    pub source: WriteError,
}

/// A port's name as a command's `dev`: the one place this module makes one.
fn dev(port: &InterfaceName) -> InterfaceName {
    port.clone()
}

/// The lines for one port, in order: tc commands (`tc …`), shell lines the kernel needs beside
/// them, and `# …` comments for what tc cannot say.
struct Lines<'a> {
    port: &'a InterfaceName,
    out: Vec<String>,
}

impl Lines<'_> {
    /// `c` as tc's command line.
    fn command(&mut self, c: &Command) -> Result<(), TcExportError> {
        let line = command_line(c).map_err(|source| TcExportError {
            dev: self.port.to_string(),
            source,
        })?;
        self.out.push(format!("tc {line}"));
        Ok(())
    }

    /// A `# PORT: text` line.
    fn comment(&mut self, text: &str) {
        self.out.push(format!("# {}: {text}", self.port));
    }
}

/// Splits an inclusive port range into `(value, mask)` blocks u32 can match (the writer
/// refuses a range that is not one block: `f_u32.c` has one value and mask per key).
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

/// `r` as u32 can match it: one range per mask-aligned block.
fn port_ranges(r: Option<PortRange>) -> Vec<Option<PortRange>> {
    match r {
        Some(r) => port_blocks(r.first, r.last)
            .into_iter()
            .map(|(value, mask)| {
                Some(PortRange {
                    first: value,
                    last: value | !mask,
                })
            })
            .collect(),
        None => vec![None],
    }
}

/// The tc protocol of a u32 filter matching `m`: `arp` for ARP; `all` when nothing of an IP
/// header is matched (raw keys alone, or everything); `ipv6` for IPv6 addresses or family;
/// `ip` otherwise.
fn protocol(m: &Match) -> Protocol {
    let v6 =
        m.family == Some(Family::V6) || m.src.or(m.dst).is_some_and(|p| p.family() == Family::V6);
    let ip = m.src.is_some()
        || m.dst.is_some()
        || m.proto.is_some()
        || m.sport.is_some()
        || m.dport.is_some()
        || m.dscp.is_some();
    match (ip, v6) {
        _ if m.arp => Protocol::Arp,
        (false, _) => Protocol::All,
        (true, true) => Protocol::Ipv6,
        (true, false) => Protocol::Ip,
    }
}

/// `u32` filters for one filter on the qdisc `major:`: kernels without `flower` (like this
/// lab's) have `u32`. Port ranges become mask-aligned blocks, ports without a protocol one
/// filter per transport (tcp, udp), each with the filter's policer (the kernel polices each
/// u32 filter on its own); a VLAN match has no u32 form on egress and is left out with a
/// comment. `redirect`: an ingress filter's `action mirred egress redirect dev IFB`, else its
/// class; `class`: the class to write (an ingress filter without a redirect names `:1`).
fn u32_filters(
    lines: &mut Lines<'_>,
    major: u16,
    filter: &Filter,
    class: Option<ClassId>,
    redirect: Option<&InterfaceName>,
) -> Result<(), TcExportError> {
    let m = &filter.matcher;
    if m.vlan.is_some() {
        lines.comment(&format!(
            "filter \"{m}\" matches a VLAN id, which u32 cannot on egress; left out"
        ));
        return Ok(());
    }
    let protocols: Vec<Option<u8>> = match m.proto {
        Some(p) => vec![Some(p)],
        None if m.sport.is_some() || m.dport.is_some() => vec![Some(6), Some(17)],
        None => vec![None],
    };
    let police = filter.police.as_ref().map(|p| Box::new(*p.config()));
    for proto in protocols {
        for sport in port_ranges(m.sport) {
            for dport in port_ranges(m.dport) {
                let matcher = Match {
                    proto,
                    sport,
                    dport,
                    ..*m
                };
                let spec = FilterSpec {
                    parent: Some(ClassId::new(major, 0)),
                    protocol: protocol(&matcher),
                    prio: Some(filter.prio + 1),
                    kind: FilterKind::U32,
                    matcher,
                    class,
                    police: police.clone(),
                    redirect: redirect.cloned(),
                    ..FilterSpec::new(dev(lines.port))
                };
                lines.command(&Command::FilterAdd(Box::new(spec)))?;
            }
        }
    }
    Ok(())
}

/// tc commands building `port`'s trees (`trees`: its `mq` and trees as the config gives
/// them) and filters; none for an unshaped port.
///
/// # Errors
/// A command tc's grammar has no words for ([`TcExportError`]).
pub fn port_commands(
    trees: &InterfaceTrees,
    port: &PortConfig,
) -> Result<Vec<String>, TcExportError> {
    // The config's name, checked when it was read; `port` is the data plane's view of it.
    let name = &trees.name;
    let mut lines = Lines {
        port: name,
        out: Vec::new(),
    };
    if trees.ifb {
        // The kernel needs the device; htbd shapes without one.
        lines.out.push(format!(
            "ip link add name {name} type ifb 2>/dev/null || true; ip link set dev {name} up"
        ));
    }
    if let Some(ingress) = &trees.ingress {
        lines.out.push(format!(
            "tc qdisc del dev {name} ingress 2>/dev/null || true"
        ));
        lines.command(&Command::IngressAdd { dev: dev(name) })?;
        for entry in ingress {
            // tc's `flowid :1` (class 1 of whatever qdisc): the ingress qdisc's filters need
            // a verdict, and a redirect is one.
            let redirect = entry.redirect();
            let class = redirect.is_none().then_some(ClassId::new(0, 1));
            let filter = crate::model::ingress_filter(entry);
            u32_filters(&mut lines, INGRESS, &filter, class, redirect)?;
        }
    }
    if port.trees.is_empty() {
        return Ok(lines.out);
    }
    lines
        .out
        .push(format!("tc qdisc del dev {name} root 2>/dev/null || true"));
    if let Some(root) = &trees.root_leaf {
        let stab = trees.trees.first().and_then(|t| t.tree.tree.config.stab);
        leaf(
            &mut lines,
            None,
            Some(root.handle.unwrap_or(1)),
            &root.config,
            stab,
        )?;
        return Ok(lines.out);
    }
    if let Some(mq) = trees.mq {
        lines.command(&Command::MqAdd(MqSpec {
            dev: dev(name),
            handle: Some(ClassId::new(mq, 0)),
        }))?;
        lines.comment(
            "htbd steers a packet to the tree of the class its first matching filter names; \
             the kernel's mq picks the TX queue first (XPS, hash), and each tree's filters see \
             only that queue's packets",
        );
    }
    for tree in &port.trees {
        let at = match (trees.mq, tree.mq_minor) {
            (Some(mq), Some(minor)) => Some(ClassId::new(mq, u32::from(minor))),
            _ => None,
        };
        tree_commands(&mut lines, at, &tree.tree)?;
        for (id, choice) in &tree.split {
            lines.comment(&format!(
                "htbd serves subtree {id} {} (split = {}); the kernel's one HTB has no workers",
                match choice {
                    htb_core::SplitChoice::Split => "on every worker at once",
                    htb_core::SplitChoice::Owned => "on one worker whatever its rate",
                },
                *choice == htb_core::SplitChoice::Split
            ));
        }
    }
    for f in &port.filters {
        u32_filters(&mut lines, f.class.major(), f, Some(f.class), None)?;
    }
    Ok(lines.out)
}

/// tc commands building one HTB tree at `at` (the root, or an `mq` class): its qdisc,
/// classes and leaves.
fn tree_commands(
    lines: &mut Lines<'_>,
    at: Option<ClassId>,
    tree: &TreeSpec,
) -> Result<(), TcExportError> {
    let c = &tree.config;
    let major = c.major;
    lines.command(&Command::QdiscAdd(Box::new(QdiscSpec {
        dev: dev(lines.port),
        parent: at,
        handle: Some(ClassId::new(major, 0)),
        default_minor: Some(c.default_minor),
        r2q: Some(c.r2q),
        direct_qlen: Some(c.direct_qlen),
        stab: c.stab.map(|t| t.spec()),
    })))?;
    for class in &tree.classes {
        let s = &class.spec;
        let a = s.adjust;
        lines.command(&Command::ClassAdd(Box::new(ClassSpec {
            dev: dev(lines.port),
            id: class.id,
            parent: Some(class.parent.unwrap_or(ClassId::new(major, 0))),
            rate: s.rate,
            ceil: Some(s.ceil.unwrap_or(s.rate)),
            burst: s.burst,
            cburst: s.cburst,
            // HTB's prio is 0 to 7 (`TC_HTB_NUMPRIO`); the kernel refuses more.
            prio: Some(s.prio.min(7)),
            quantum: s.quantum,
            mtu: s.mtu,
            overhead: (a.overhead != 0).then_some(a.overhead),
            mpu: (a.mpu != 0).then_some(a.mpu),
            linklayer: (a.link_layer == LinkLayer::Atm).then_some(LinkLayer::Atm),
        })))?;
    }
    // Every leaf gets its qdisc, the default one too: the kernel's default is pfifo, htbd's
    // fq_codel unless the config says otherwise.
    for class in &tree.classes {
        if tree.classes.iter().any(|c| c.parent == Some(class.id)) {
            continue;
        }
        let (handle, config) = match &class.leaf {
            Some(l) => (l.handle, l.config),
            None => (None, c.default_leaf),
        };
        leaf(lines, Some(class.id), handle, &config, None)?;
    }
    Ok(())
}

/// A leaf qdisc at `parent` (`None`: the root) with every option given, so that the kernel's
/// qdisc matches htbd's whatever its defaults: the config's resolved parameters as the spec
/// that gives them back ([`LeafConfig::to_spec`]), written by htb-tc's one writer. Cake's
/// target apart from its rtt, which tc cannot say, becomes the rtt's, with a comment.
fn leaf(
    lines: &mut Lines<'_>,
    parent: Option<ClassId>,
    handle: Option<u16>,
    config: &LeafConfig,
    stab: Option<SizeTable>,
) -> Result<(), TcExportError> {
    let mut spec = leaf_spec(config);
    if let LeafSpec::Cake(cake) = &mut spec
        && let (Some(rtt), Some(target)) = (cake.rtt, cake.target)
        && target != cake_target(rtt)
    {
        // tc's cake has no `target` keyword: a config's own target has no tc words, and the
        // kernel's queue gets the rtt's twentieth.
        lines.comment(&format!(
            "cake's target {target} has no tc words (tc gives rtt {rtt}, whose twentieth, \
             {}, the kernel's cake takes)",
            cake_target(rtt)
        ));
        cake.target = Some(cake_target(rtt));
    }
    lines.command(&Command::LeafAdd(Box::new(LeafQdiscSpec {
        dev: dev(lines.port),
        parent,
        handle: handle.map(|h| ClassId::new(h, 0)),
        leaf: spec,
        stab: stab.map(|t| t.spec()),
    })))
}

/// The target tc's `rtt` gives cake: q_cake.c's `cake_parse_opt` sends a twentieth of the rtt
/// (at least 1 µs) as `TCA_CAKE_TARGET` beside it, and has no `target` keyword of its own.
fn cake_target(rtt: Duration) -> Duration {
    Duration::from_micros((rtt.as_nanos() / 1000 / 20).max(1))
}

/// `config` as the spec that gives it back ([`LeafConfig::to_spec`]), in the writer's form:
/// cake's default tin mode, diffserv3, unsaid, as the writer (like tc's `q_cake.c`, which
/// sends no tin mode unless one is named) leaves it out; the kernel's default is the same.
fn leaf_spec(config: &LeafConfig) -> LeafSpec {
    match config.to_spec() {
        LeafSpec::Cake(mut cake) => {
            if cake.diffserv == Some(DiffservMode::Diffserv3) {
                cake.diffserv = None;
            }
            LeafSpec::Cake(cake)
        }
        spec => spec,
    }
}

/// The ingress qdisc's handle major.
const INGRESS: u16 = crate::model::INGRESS_MAJOR;

/// tc commands for every shaped port of `config` (IFB ports first: the kernel's mirred
/// needs its device to exist).
///
/// # Errors
/// A command tc's grammar has no words for ([`TcExportError`]).
pub fn commands(config: &DaemonConfig) -> Result<Vec<String>, TcExportError> {
    let ports = || config.interfaces.iter().zip(&config.engine.ports);
    let mut out = Vec::new();
    for (trees, port) in ports()
        .filter(|(trees, _)| trees.ifb)
        .chain(ports().filter(|(trees, _)| !trees.ifb))
    {
        out.extend(port_commands(trees, port)?);
    }
    Ok(out)
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
        let cmds = commands(&config).unwrap();
        parse_all(&cmds);
        assert!(cmds.contains(&"tc qdisc add dev r2 parent 1:10 handle 10: fq_codel limit 10240 flows 1024 target 10ms interval 100ms quantum 1514 memory_limit 33554432 drop_batch 64 noecn".to_owned()), "{cmds:#?}");
        assert!(cmds.contains(&"tc qdisc add dev r2 parent 1:20 sfq limit 50 quantum 1514 perturb 0 divisor 1024 flows 50 depth 127".to_owned()), "{cmds:#?}");
        // A tbf's latency is written as the limit tc made of it.
        assert!(
            cmds.contains(
                &"tc qdisc add dev r2 parent 1:30 tbf rate 1mbit burst 10240 limit 16490"
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
        let cmds = commands(&config).unwrap();
        parse_all(&cmds);
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
        let cmds = commands(&config).unwrap();
        parse_all(&cmds);
        assert_eq!(
            cmds[1],
            "tc qdisc add dev r2 root handle 1: htb default 30 r2q 10 direct_qlen 1000"
        );
        assert_eq!(
            cmds[2],
            "tc class add dev r2 parent 1: classid 1:1 htb rate 300mbit ceil 300mbit prio 0"
        );
        assert_eq!(
            cmds[3],
            "tc class add dev r2 parent 1:1 classid 1:10 htb rate 50mbit ceil 300mbit prio 0"
        );
        assert!(cmds.contains(
            &"tc filter add dev r2 parent 1: protocol ip pref 2 u32 match ip dst 10.201.2.0/24 match ip dport 5201 0xffff match ip protocol 17 0xff classid 1:10"
                .to_owned()
        ));
        // Ports without a protocol: one filter per transport.
        assert!(cmds.iter().any(|c| {
            c.ends_with("match ip dport 5202 0xffff match ip protocol 17 0xff classid 1:20")
        }));
        assert!(cmds.iter().any(|c| {
            c.ends_with("match ip dport 5203 0xffff match ip protocol 6 0xff classid 1:30")
        }));
    }

    #[test]
    fn an_ingress_redirect_and_its_ifb_translate_to_tc_and_ip() {
        let text = "[daemon]\nstate_dir = \"/tmp/x\"\n[[interface]]\nname = \"r2\"\n\
                    [interface.ingress]\nredirect = \"ifb0\"\n\
                    [[interface]]\nname = \"ifb0\"\ntype = \"ifb\"\n\
                    [[interface.class]]\nid = \"1:1\"\nrate = \"10mbit\"\n";
        let cmds = commands(&DaemonConfig::parse(text).unwrap()).unwrap();
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
                "tc filter add dev r2 parent ffff: protocol all pref 11 u32 match u32 0 0 action mirred egress redirect dev ifb0".to_owned()
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
        let cmds = commands(&DaemonConfig::parse(text).unwrap()).unwrap();
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

    /// Every `tc …` line in htb-tc's grammar (the shell lines aside), as kernel tc reads it.
    fn parse_all(cmds: &[String]) {
        for line in cmds {
            let Some(words) = line.strip_prefix("tc ").filter(|l| !l.contains("|| true")) else {
                continue;
            };
            if let Err(e) = htb_tc::parse::parse_command(&htb_tc::parse::split_line(words)) {
                panic!("{line}: {e}");
            }
        }
    }

    #[test]
    fn ranges_policers_vlans_and_ingress_verdicts_translate_to_tc() {
        let text = "[daemon]\nstate_dir = \"/tmp/x\"\n[[interface]]\nname = \"r2\"\n\
                    [interface.ingress]\n\
                    [[interface.ingress.filter]]\nprio = 6\npolice = { rate = \"1mbit\", burst = \"10k\", exceed = \"drop\" }\n\
                    [[interface.class]]\nid = \"1:1\"\nrate = \"10mbit\"\n\
                    [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"1mbit\"\n\
                    [[interface.filter]]\nprio = 1\nmatch = { proto = \"udp\", dport = \"1-6\" }\nclassid = \"1:10\"\n\
                    police = { rate = \"1mbit\", burst = \"10k\", exceed = \"drop\" }\n\
                    [[interface.filter]]\nprio = 2\nmatch = { vlan = 10 }\nclassid = \"1:10\"\n\
                    [[interface.filter]]\nprio = 3\nmatch = { dst = \"2001:db8::/64\", dscp = \"ef\" }\nclassid = \"1:10\"\n";
        let cmds = commands(&DaemonConfig::parse(text).unwrap()).unwrap();
        parse_all(&cmds);
        // The ingress filter's verdict without a redirect: tc's `flowid :1`, policed.
        assert!(
            cmds.contains(&"tc filter add dev r2 parent ffff: protocol all pref 7 u32 match u32 0 0 classid 0:1 action police rate 1mbit burst 10240 conform-exceed drop".to_owned()),
            "{cmds:#?}"
        );
        // 1-6: four blocks, each its own filter with its own policer.
        let ranges: Vec<&String> = cmds.iter().filter(|c| c.contains("dport")).collect();
        assert_eq!(ranges.len(), 4, "{cmds:#?}");
        assert_eq!(
            ranges[1],
            "tc filter add dev r2 parent 1: protocol ip pref 2 u32 match ip dport 2 0xfffe match ip protocol 17 0xff classid 1:10 action police rate 1mbit burst 10240 conform-exceed drop"
        );
        assert!(
            cmds.contains(
                &"# r2: filter \"vlan 10\" matches a VLAN id, which u32 cannot on egress; left out"
                    .to_owned()
            ),
            "{cmds:#?}"
        );
        assert!(
            cmds.contains(&"tc filter add dev r2 parent 1: protocol ipv6 pref 4 u32 match ip6 dst 2001:db8::/64 match ip6 priority 0xb8 0xfc classid 1:10".to_owned()),
            "{cmds:#?}"
        );
    }

    /// Every leaf kind, as the examples give them, is written as tc's words, with every
    /// option: cake's (the examples' own), pfifo's, bfifo's, sfq's, fq_codel's and tbf's.
    #[test]
    fn every_leaf_kind_translates_to_tc_words() {
        let leaves = [
            r#""cake""#,
            r#"{ kind = "cake", flow_mode = "flows" }"#,
            r#"{ kind = "cake", ack_filter = "filter" }"#,
            r#"{ kind = "cake", diffserv = "diffserv4", bandwidth = "10mbit" }"#,
            r#""pfifo""#,
            r#"{ kind = "bfifo", limit = 30000 }"#,
            r#"{ kind = "sfq", perturb = 10 }"#,
            r#""fq_codel""#,
            r#"{ kind = "tbf", rate = "1mbit", burst = "10k", latency = "50ms" }"#,
        ];
        let mut text = "[daemon]\nstate_dir = \"/tmp/x\"\n[[interface]]\nname = \"r2\"\n\
                        [[interface.class]]\nid = \"1:1\"\nrate = \"100mbit\"\n"
            .to_owned();
        for (i, leaf) in leaves.iter().enumerate() {
            text += &format!(
                "[[interface.class]]\nid = \"1:{:x}\"\nparent = \"1:1\"\nrate = \"1mbit\"\nleaf = {leaf}\n",
                i + 0x10
            );
        }
        let config = DaemonConfig::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        let cmds = commands(&config).unwrap();
        parse_all(&cmds);
        let written = cmds
            .iter()
            .filter(|c| c.starts_with("tc qdisc add dev r2 parent 1:"))
            .count();
        assert_eq!(written, leaves.len(), "{cmds:#?}");
    }

    /// A subtree's split choice has no tc words: a comment says what htbd does instead.
    #[test]
    fn a_split_choice_is_a_comment() {
        let text = "[daemon]\nstate_dir = \"/tmp/x\"\n[[interface]]\nname = \"r2\"\n\
                    [[interface.class]]\nid = \"1:1\"\nrate = \"40gbit\"\n\
                    [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"20gbit\"\n\
                    split = true\n";
        let config = DaemonConfig::parse(text).unwrap_or_else(|e| panic!("{e}"));
        let cmds = commands(&config).unwrap();
        parse_all(&cmds);
        assert!(
            cmds.contains(
                &"# r2: htbd serves subtree 1:10 on every worker at once (split = true); the \
                  kernel's one HTB has no workers"
                    .to_owned()
            ),
            "{cmds:#?}"
        );
    }

    /// A cake target of the config's own, which tc has no keyword for, is written as the rtt
    /// gives it, saying so; the target tc's rtt gives (its twentieth) is that rtt, without a
    /// comment.
    #[test]
    fn a_cake_target_tc_cannot_say_is_the_rtts_with_a_comment() {
        let config = |leaf: &str| {
            let text = format!(
                "[daemon]\nstate_dir = \"/tmp/x\"\n[[interface]]\nname = \"r2\"\n\
                 [[interface.class]]\nid = \"1:1\"\nrate = \"10mbit\"\nleaf = {leaf}\n"
            );
            DaemonConfig::parse(&text).unwrap_or_else(|e| panic!("{e}"))
        };
        let cmds = commands(&config(
            r#"{ kind = "cake", rtt = "50ms", target = "10ms" }"#,
        ))
        .unwrap();
        parse_all(&cmds);
        let cake = cmds
            .iter()
            .find(|c| c.starts_with("tc qdisc") && c.contains(" cake "))
            .expect("cake's line");
        assert!(cake.contains(" rtt 50ms "), "{cake}");
        assert!(
            cmds.iter()
                .any(|c| c.starts_with("# r2: cake's target 10ms has no tc words")),
            "{cmds:#?}"
        );
        let cmds = commands(&config(
            r#"{ kind = "cake", rtt = "50ms", target = "2500us" }"#,
        ))
        .unwrap();
        assert!(!cmds.iter().any(|c| c.contains("target")), "{cmds:#?}");
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
