//! The saved state: every port's tree, leaves and filters in the config file's format.

use std::fmt::Write;

use htb_config::{LeafDef, label_toml, leaf_toml};
use htb_core::{LeafConfig, LinkLayer, Rate, SplitChoice};
use htb_ipc::FilterHandle;

use super::{Model, QdiscModel, Root};

/// A size table as the config's inline table, as the kernel keeps it.
fn stab_toml(table: htb_core::SizeTable) -> String {
    let s = table.spec();
    let mut out = format!(
        "{{ overhead = {}, mpu = {}, mtu = {}, tsize = {}",
        s.overhead, s.mpu, s.mtu, s.tsize
    );
    if let Some(l) = s.link_layer {
        let _ = write!(out, ", linklayer = \"{}\"", l.name());
    }
    out.push_str(" }");
    out
}

/// A filter's policer as the config's inline table (exact integers, every verdict named).
fn police_toml(p: &htb_config::filter::PoliceConfig) -> String {
    let mut keys = Vec::new();
    if let Some(r) = p.rate {
        keys.push(format!("rate = {}, burst = {}", r.bits_per_sec(), p.burst));
    }
    if p.mtu != 0 {
        keys.push(format!("mtu = {}", p.mtu));
    }
    if let Some(r) = p.peakrate {
        keys.push(format!("peakrate = {}", r.bits_per_sec()));
    }
    let a = p.adjust;
    keys.push(format!("overhead = {}, mpu = {}", a.overhead, a.mpu));
    if a.link_layer == LinkLayer::Atm {
        keys.push("linklayer = \"atm\"".into());
    }
    keys.push(format!(
        "exceed = \"{}\", conform = \"{}\"",
        p.exceed.name(),
        p.conform.name()
    ));
    format!("{{ {} }}", keys.join(", "))
}

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

impl Model {
    /// The saved-state file: every port, its qdisc (or `mq` and the tree under each of its
    /// classes), classes, leaf qdiscs and filters, in the config file's format (exact integers
    /// for rates and sizes, every leaf option given).
    #[must_use]
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        self.write_toml(&mut out);
        out
    }

    /// The generation of the state: the hash of [`Model::to_toml`]'s text, written into the
    /// hash as it is made instead of into a string (at a million subscribers the text is some
    /// 300 MB, which the memory lock then kept resident).
    #[must_use]
    pub fn generation(&self) -> htb_ipc::Generation {
        let mut hasher = htb_ipc::GenerationHasher::default();
        self.write_toml(&mut hasher);
        hasher.finish()
    }

    /// Writes [`Model::to_toml`]'s text to `out`. Writing to a `String` or a hash cannot fail,
    /// which is why the results are ignored.
    fn write_toml(&self, out: &mut impl Write) {
        for port in &self.ports {
            let _ = writeln!(out, "[[interface]]\nname = {}", quoted(&port.name));
            if port.ifb {
                let _ = out.write_str("type = \"ifb\"\n");
            }
            match &port.root {
                Root::None => {}
                Root::Htb(qdisc) => tree_toml(out, "interface", qdisc),
                Root::Leaf(qdisc) => {
                    if let Some(def) = qdisc.root_leaf() {
                        let _ = writeln!(out, "root = {}", leaf_toml(&def));
                    }
                    if let Some(stab) = qdisc.config.stab {
                        let _ = writeln!(out, "[interface.qdisc]\nstab = {}", stab_toml(stab));
                    }
                }
                Root::Mq(mq) => {
                    let _ = writeln!(out, "mq = \"{:x}:\"", mq.handle);
                    for (minor, qdisc) in &mq.trees {
                        let _ = writeln!(
                            out,
                            "[[interface.tree]]\nparent = \"{:x}:{minor:x}\"",
                            mq.handle
                        );
                        tree_toml(out, "interface.tree", qdisc);
                    }
                }
            }
            if let Some(ingress) = &port.ingress {
                let _ = out.write_str("[interface.ingress]\n");
                filters_toml(out, "interface.ingress", &ingress.filters);
            }
            let _ = out.write_char('\n');
        }
    }
}

/// One HTB qdisc, its classes and filters, as tables under `table` (`interface`, or
/// `interface.tree` under mq).
fn tree_toml(out: &mut impl Write, table: &str, qdisc: &QdiscModel) {
    let c = &qdisc.config;
    let _ = writeln!(
        out,
        "[{table}.qdisc]\nhandle = \"{:x}:\"\ndefault = \"{:x}\"\nr2q = {}\ndirect_qlen = {}\nburst_time = \"{}ns\"",
        c.major,
        c.default_minor,
        c.r2q,
        c.direct_qlen,
        c.default_burst_time.as_nanos()
    );
    if let Some(stab) = c.stab {
        let _ = writeln!(out, "stab = {}", stab_toml(stab));
    }
    if c.default_leaf != LeafConfig::default() {
        let def = LeafDef {
            handle: None,
            config: c.default_leaf,
        };
        let _ = writeln!(out, "leaf = {}", leaf_toml(&def));
    }
    // Each class's definition made as it is written: the tree's list of them all would be
    // another 200 MB at a million subscribers.
    for def in qdisc
        .tree_order()
        .into_iter()
        .filter_map(|id| qdisc.class_def(id))
    {
        let s = &def.spec;
        let _ = writeln!(out, "[[{table}.class]]\nid = \"{}\"", def.id);
        if let Some(p) = def.parent {
            let _ = writeln!(out, "parent = \"{p}\"");
        }
        let _ = writeln!(out, "rate = {}", s.rate.bits_per_sec());
        let opt = |out: &mut dyn Write, key: &str, v: Option<u64>| {
            if let Some(v) = v {
                let _ = writeln!(out, "{key} = {v}");
            }
        };
        opt(out, "ceil", s.ceil.map(Rate::bits_per_sec));
        opt(out, "burst", s.burst);
        opt(out, "cburst", s.cburst);
        opt(out, "prio", (s.prio != 0).then_some(u64::from(s.prio)));
        opt(out, "quantum", s.quantum.map(u64::from));
        opt(out, "mtu", s.mtu.map(u64::from));
        let a = s.adjust;
        opt(
            out,
            "overhead",
            (a.overhead != 0).then_some(u64::from(a.overhead)),
        );
        opt(out, "mpu", (a.mpu != 0).then_some(u64::from(a.mpu)));
        if a.link_layer == LinkLayer::Atm {
            let _ = out.write_str("linklayer = \"atm\"\n");
        }
        if let Some(leaf) = &def.leaf {
            let _ = writeln!(out, "leaf = {}", leaf_toml(leaf));
        }
        if let Some(label) = qdisc.classes.label(def.id).and_then(|l| l.unpack()) {
            let _ = writeln!(out, "label = {}", label_toml(&label));
        }
        if let Some(choice) = qdisc.splits.get(&def.id) {
            let _ = writeln!(out, "split = {}", *choice == SplitChoice::Split);
        }
    }
    filters_toml(out, table, &qdisc.filters);
}

/// Filters as `[[TABLE.filter]]` tables.
fn filters_toml(out: &mut impl Write, table: &str, filters: &super::FilterList) {
    let q = quoted;
    for f in filters {
        let m = f.matcher();
        let mut keys = Vec::new();
        let mut key = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                keys.push(format!("{k} = {}", q(&v)));
            }
        };
        key("src", m.src.map(|p| p.to_string()));
        key("dst", m.dst.map(|p| p.to_string()));
        key("proto", m.proto.map(|p| p.to_string()));
        key("sport", m.sport.map(|p| p.to_string()));
        key("dport", m.dport.map(|p| p.to_string()));
        key("dscp", m.dscp.map(|p| p.to_string()));
        key("vlan", m.vlan.map(|p| p.to_string()));
        if !m.raw.is_empty() {
            let raw: Vec<String> = m.raw.as_slice().iter().map(|k| q(&k.to_string())).collect();
            keys.push(format!("raw = [{}]", raw.join(", ")));
        }
        let _ = writeln!(
            out,
            "[[{table}.filter]]\nprio = {}\nprotocol = {}\nkind = \"{}\"\nhandle = {}\nmatch = {{ {} }}",
            f.prio,
            q(f.protocol.name()),
            f.kind.name(),
            q(&FilterHandle(f.handle).display(f.kind).to_string()),
            keys.join(", "),
        );
        if let Some(class) = f.class {
            let _ = writeln!(out, "classid = \"{class}\"");
        }
        let parts = f.u32();
        if let Some(divisor) = parts.divisor {
            let _ = writeln!(out, "divisor = {divisor}");
        }
        if let Some(link) = parts.link {
            let _ = writeln!(out, "link = \"{link:x}:\"");
        }
        if let Some(key) = parts.hashkey {
            let _ = writeln!(out, "hash_mask = {:#010x}\nhash_at = {}", key.mask, key.at);
        }
        if let Some(p) = f.police() {
            let _ = writeln!(out, "police = {}", police_toml(p.config()));
        }
        if let Some(to) = f.redirect() {
            let _ = writeln!(out, "redirect = {}", q(to));
        }
    }
}
