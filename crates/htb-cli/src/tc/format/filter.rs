//! `tc filter show` for u32 (`u32_print_opt`: the keys tc would have built) and flower
//! (`flower_print_opt`).

use std::fmt::Write as _;
use std::net::IpAddr;

use htb_core::LinkLayer;
use htb_core::units::DisplaySize;
use htb_ipc::{
    ControlAction, FilterInfo, FilterKind, InterfaceName, IpPrefix, Match, PoliceInfo, PortRange,
    Protocol,
};
use serde_json::{Map, Value, json};

use super::{Style, json_text, rate_text};

/// A u32 key: value and mask in host order, at a byte offset of the IP header (or, `nexthdr`,
/// of the transport header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    value: u32,
    mask: u32,
    off: u32,
    nexthdr: bool,
}

fn prefix_words(prefix: IpPrefix) -> Option<(IpAddr, Vec<(u32, u32)>)> {
    let addr = prefix.addr();
    let bits = match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let len = usize::from(prefix.prefix_len());
    let words = bits
        .chunks(4)
        .enumerate()
        .map(|(i, w)| {
            let value = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
            let have = len.saturating_sub(i * 32).min(32);
            let mask = if have == 0 {
                0
            } else {
                u32::MAX << (32 - have)
            };
            (value & mask, mask)
        })
        .collect();
    Some((addr, words))
}

/// A port range as value/mask, if it is one aligned block.
fn port_key(range: PortRange) -> Option<(u32, u32)> {
    let span = u32::from(range.last.checked_sub(range.first)?) + 1;
    let first = u32::from(range.first);
    (span.is_power_of_two() && first % span == 0).then(|| (first, 0xffff & !(span - 1)))
}

/// The keys `tc filter add … u32 match ip…` would have built (`pack_key`, merging keys at the
/// same offset), and what cannot be expressed as one.
fn u32_keys(protocol: Protocol, m: &Match) -> (Vec<Key>, Vec<String>) {
    let v6 = protocol == Protocol::Ipv6 || m.src.or(m.dst).is_some_and(|p| p.addr().is_ipv6());
    let mut keys: Vec<Key> = Vec::new();
    let mut other = Vec::new();
    let mut add_key = |value: u32, mask: u32, off: u32, nexthdr: bool| {
        if mask == 0 {
            return;
        }
        match keys
            .iter_mut()
            .find(|k| k.off == off && k.nexthdr == nexthdr)
        {
            Some(k) => {
                k.value |= value & mask;
                k.mask |= mask;
            }
            None => keys.push(Key {
                value: value & mask,
                mask,
                off,
                nexthdr,
            }),
        }
    };
    for k in m.raw.as_slice() {
        add_key(k.value, k.mask, u32::from(k.at), k.nexthdr);
    }
    let mut add = |value: u32, mask: u32, off: u32| add_key(value, mask, off, false);
    if let Some(d) = m.dscp {
        let tos = u32::from(d) << 2;
        if v6 {
            add(tos << 20, 0xfc << 20, 0);
        } else {
            add(tos << 16, 0xfc << 16, 0);
        }
    }
    if let Some(p) = m.proto {
        if v6 {
            add(u32::from(p) << 8, 0xff << 8, 4);
        } else {
            add(u32::from(p) << 16, 0xff << 16, 8);
        }
    }
    for (prefix, base) in [
        (m.src, if v6 { 8 } else { 12 }),
        (m.dst, if v6 { 24 } else { 16 }),
    ] {
        if let Some((_, words)) = prefix.and_then(prefix_words) {
            for (i, (value, mask)) in words.into_iter().enumerate() {
                add(value, mask, base + 4 * i as u32);
            }
        }
    }
    let ports_at = if v6 { 40 } else { 20 };
    for (range, shift, name) in [(m.sport, 16, "sport"), (m.dport, 0, "dport")] {
        let Some(range) = range else { continue };
        match port_key(range) {
            Some((value, mask)) => add(value << shift, mask << shift, ports_at),
            None => other.push(format!("{name} {}-{}", range.first, range.last)),
        }
    }
    if let Some(v) = m.vlan {
        other.push(format!("vlan {v}"));
    }
    keys.sort_by_key(|k| (k.nexthdr, k.off));
    (keys, other)
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "icmpv6".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

/// flower's key lines (`flower_print_opt`).
fn flower_keys(f: &FilterInfo) -> Vec<(String, Value)> {
    let m = &f.matcher;
    let mut keys = Vec::new();
    match f.protocol {
        Protocol::Ip => keys.push(("eth_type".into(), json!("ipv4"))),
        Protocol::Ipv6 => keys.push(("eth_type".into(), json!("ipv6"))),
        _ => {}
    }
    if let Some(v) = m.vlan {
        keys.push(("vlan_id".into(), json!(v)));
    }
    if let Some(p) = m.proto {
        keys.push(("ip_proto".into(), json!(proto_name(p))));
    }
    if let Some(d) = m.dscp {
        keys.push((
            "ip_tos".into(),
            json!(format!("{:#x}/0xfc", u32::from(d) << 2)),
        ));
    }
    if let Some(p) = m.dst {
        keys.push(("dst_ip".into(), json!(p.to_string())));
    }
    if let Some(p) = m.src {
        keys.push(("src_ip".into(), json!(p.to_string())));
    }
    if let Some(r) = m.dport {
        keys.push(("dst_port".into(), json!(r.to_string())));
    }
    if let Some(r) = m.sport {
        keys.push(("src_port".into(), json!(r.to_string())));
    }
    keys
}

/// A filter's policer as `tc_print_action` prints it (`print_police` in `m_police.c`), its
/// action statistics with `-s`; `index` numbers the policers as the kernel does, from 1.
fn police_text(out: &mut String, p: &PoliceInfo, index: usize, style: Style) {
    let c = &p.config;
    let _ = write!(out, "\n\taction order 1:  police {index:#x} ");
    if let Some(r) = c.rate {
        let _ = write!(out, "rate {} ", rate_text(r.bits_per_sec(), style.iec));
    }
    let _ = write!(
        out,
        "burst {} mtu {} ",
        DisplaySize(u64::from(c.burst)),
        DisplaySize(u64::from(c.mtu))
    );
    if let Some(r) = c.peakrate {
        let _ = write!(out, "peakrate {} ", rate_text(r.bits_per_sec(), style.iec));
    }
    let _ = write!(out, "action {}", c.exceed.name());
    // TCA_POLICE_RESULT goes with a conform verdict other than ok, and prints after a slash.
    if c.conform == ControlAction::Ok {
        out.push(' ');
    } else {
        let _ = write!(out, "/{} ", c.conform.name());
    }
    let _ = write!(
        out,
        "overhead {} ",
        DisplaySize(u64::from(c.adjust.overhead))
    );
    if c.adjust.link_layer == LinkLayer::Atm {
        out.push_str("linklayer atm ");
    } else if style.details {
        out.push_str("linklayer ethernet ");
    }
    out.push_str("\n\tref 1 bind 1 \n");
    if let Some(s) = &p.stats {
        let _ = writeln!(
            out,
            "\tAction statistics:\n\tSent {} bytes {} pkt (dropped {}, overlimits {} requeues 0) \n\tbacklog 0b 0p requeues 0",
            s.bytes, s.packets, s.drops, s.overlimits
        );
    }
}

/// How many actions of each kind were listed so far: the kernel numbers each kind's
/// `index` from 1.
#[derive(Default)]
struct ActionCounts {
    police: usize,
    mirred: usize,
}

/// A filter's actions as `tc_print_action` lists them, in order: its policer, then its mirred
/// redirect (`print_mirred` in `m_mirred.c`); their JSON, if it has any.
fn actions(
    out: &mut String,
    f: &FilterInfo,
    counts: &mut ActionCounts,
    style: Style,
) -> Option<Value> {
    let mut list = Vec::new();
    if let Some(p) = &f.police {
        counts.police += 1;
        police_text(out, p, counts.police, style);
        if let Value::Array(items) = police_json(p, counts.police) {
            list.extend(items);
        }
    }
    if let Some(to) = &f.redirect {
        counts.mirred += 1;
        let order = list.len() + 1;
        let _ = write!(
            out,
            "\n\taction order {order}: mirred (Egress Redirect to device {to}) stolen\n\tindex {} ref 1 bind 1\n",
            counts.mirred
        );
        list.push(json!({
            "order": order,
            "kind": "mirred",
            "mirred_action": "redirect",
            "direction": "egress",
            "to_dev": to,
            "control_action": {"type": "stolen"},
            "index": counts.mirred,
            "ref": 1,
            "bind": 1,
        }));
    }
    (!list.is_empty()).then_some(Value::Array(list))
}

/// A filter's policer in tc's JSON (`"actions": [{"order": 1, "kind": "police", …}]`).
fn police_json(p: &PoliceInfo, index: usize) -> Value {
    let c = &p.config;
    let mut o = json!({
        "order": 1,
        "kind": "police",
        "index": index,
        "control_action": {"type": c.exceed.name()},
        "overhead": c.adjust.overhead,
        "ref": 1,
        "bind": 1,
    });
    if let Some(r) = c.rate {
        o["rate"] = json!(r.bits_per_sec() / 8);
    }
    o["burst"] = json!(c.burst);
    o["mtu"] = json!(c.mtu);
    if let Some(r) = c.peakrate {
        o["peakrate"] = json!(r.bits_per_sec() / 8);
    }
    if c.conform != ControlAction::Ok {
        o["notexceed_action"] = json!({"type": c.conform.name()});
    }
    if let Some(s) = &p.stats {
        o["stats"] = json!({
            "bytes": s.bytes,
            "packets": s.packets,
            "drops": s.drops,
            "overlimits": s.overlimits,
            "requeues": 0,
            "backlog": 0,
            "qlen": 0,
        });
    }
    json!([o])
}

/// `tc filter show`.
#[must_use]
pub fn filters(list: &[FilterInfo], style: Style) -> String {
    let mut out = String::new();
    let mut items = Vec::new();
    let mut previous: Option<(&str, u32)> = None;
    let mut counts = ActionCounts::default();
    // Tables made with `divisor`: their filters are not in a prio's root table.
    let table_of = |f: &FilterInfo| f.handle.u32().table();
    let hashed: Vec<(InterfaceName, u32)> = list
        .iter()
        .filter(|f| f.hashing.divisor.is_some())
        .map(|f| (f.dev.clone(), table_of(f)))
        .collect();
    for f in list {
        let mut head = String::from("filter ");
        if style.show_dev {
            let _ = write!(head, "dev {} ", f.dev);
        }
        // tc's print_filter: the parent only when the show did not name it.
        if !style.hide_parent {
            let _ = write!(head, "parent {} ", f.parent);
        }
        let _ = write!(
            head,
            "protocol {} pref {} {} chain 0 ",
            f.protocol, f.prio, f.kind
        );
        let base = || {
            let mut o = Map::new();
            if style.show_dev {
                o.insert("dev".into(), json!(f.dev));
            }
            if !style.hide_parent {
                o.insert("parent".into(), json!(f.parent));
            }
            o.insert("protocol".into(), json!(f.protocol.name()));
            o.insert("pref".into(), json!(f.prio));
            o.insert("kind".into(), json!(f.kind));
            o.insert("chain".into(), json!(0));
            o
        };
        // One header per priority (tc lists the filter "chain head" first).
        if previous != Some((f.dev.as_str(), f.prio)) {
            previous = Some((f.dev.as_str(), f.prio));
            let _ = writeln!(out, "{head}");
            items.push(Value::Object(base()));
            if f.kind == FilterKind::U32 {
                let root = list
                    .iter()
                    .filter(|g| g.dev == f.dev && g.prio == f.prio)
                    .map(table_of)
                    .find(|t| !hashed.iter().any(|(dev, h)| *dev == f.dev && h == t));
                let ht = root.unwrap_or(0x800);
                let _ = writeln!(out, "{head}fh {ht:x}: ht divisor 1 ");
                let mut o = base();
                o.insert(
                    "options".into(),
                    json!({"fh": format!("{ht:x}:"), "ht_divisor": 1}),
                );
                items.push(Value::Object(o));
            }
        }
        let mut o = base();
        let fh = f.handle.display(f.kind).to_string();
        if let (FilterKind::U32, Some(divisor)) = (f.kind, f.hashing.divisor) {
            let _ = writeln!(out, "{head}fh {fh} ht divisor {divisor} ");
            o.insert("options".into(), json!({"fh": fh, "ht_divisor": divisor}));
            items.push(Value::Object(o));
            continue;
        }
        if f.kind == FilterKind::U32 {
            let h = f.handle.u32();
            let (ht, bucket, order) = (
                format!("{:x}", h.table()),
                format!("{:x}", h.bucket()),
                h.node(),
            );
            let mut line = format!("{head}fh {fh} order {order} key ht {ht} bkt {bucket}");
            if let Some(class) = f.class {
                let _ = write!(line, " flowid {class}");
            } else if f.redirect.is_some() || f.police.is_some() {
                // f_u32.c sets TC_U32_TERMINAL on a filter with an action.
                line.push_str(" terminal flowid");
            }
            if let Some(link) = f.hashing.link {
                let _ = write!(line, " link {link:x}:");
            }
            let _ = writeln!(out, "{line} not_in_hw ");
            let (mut keys, other) = u32_keys(f.protocol, &f.matcher);
            if keys.is_empty() && other.is_empty() && f.protocol == Protocol::All {
                // A `protocol all` filter matching everything was given as `match u32 0 0`
                // (there is no other way to say it), which tc shows.
                keys.push(Key {
                    value: 0,
                    mask: 0,
                    off: 0,
                    nexthdr: false,
                });
            }
            let mut matches = Vec::new();
            for k in &keys {
                let offmask = if k.nexthdr { "nexthdr+" } else { "" };
                let _ = writeln!(
                    out,
                    "  match {:08x}/{:08x} at {offmask}{}",
                    k.value, k.mask, k.off
                );
                matches.push(json!({
                    "value": format!("{:x}", k.value),
                    "mask": format!("{:x}", k.mask),
                    "offmask": offmask,
                    "off": k.off,
                }));
            }
            for o in &other {
                let _ = writeln!(out, "  match {o} (not expressible as a u32 key)");
            }
            if let Some(key) = f.hashing.hashkey {
                let _ = writeln!(out, "    hash mask {:08x} at {} ", key.mask, key.at);
            }
            let mut options = json!({
                "fh": fh,
                "order": order,
                "key_ht": ht,
                "bkt": bucket,
                "not_in_hw": true,
                "match": matches,
            });
            if let Some(class) = f.class {
                options["flowid"] = json!(class);
            }
            if let Some(link) = f.hashing.link {
                options["link"] = json!(format!("{link:x}:"));
            }
            if let Some(key) = f.hashing.hashkey {
                options["hash"] = json!({"mask": format!("{:08x}", key.mask), "at": key.at});
            }
            if let Some(actions) = actions(&mut out, f, &mut counts, style) {
                options["actions"] = actions;
            }
            o.insert("options".into(), options);
        } else {
            let class = f.class.map(|c| c.to_string()).unwrap_or_default();
            let _ = writeln!(out, "{head}handle {fh} classid {class} ");
            let keys = flower_keys(f);
            let mut map = Map::new();
            for (k, v) in keys {
                let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                let _ = writeln!(out, "  {k} {text}");
                map.insert(k, v);
            }
            let _ = writeln!(out, "  not_in_hw");
            let mut options =
                json!({"handle": f.handle.0, "classid": class, "keys": map, "not_in_hw": true});
            if let Some(actions) = actions(&mut out, f, &mut counts, style) {
                options["actions"] = actions;
            }
            o.insert("options".into(), options);
        }
        items.push(Value::Object(o));
    }
    if style.json {
        return json_text(items, style);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_ipc::{ClassId, FilterHandle, U32Hashing};

    /// A u32 filter `800::800` on `dev` under `parent_major:` sending to 1:1, matching all.
    fn u32_to_1_1(dev: &str, parent_major: u16, protocol: Protocol, prio: u32) -> FilterInfo {
        FilterInfo {
            dev: dev.parse().unwrap(),
            parent: ClassId::new(parent_major, 0),
            protocol,
            prio,
            kind: FilterKind::U32,
            handle: FilterHandle::parse(None, "800::800").unwrap(),
            class: Some("1:1".parse().unwrap()),
            matcher: Match::default(),
            hashing: U32Hashing::default(),
            police: None,
            redirect: None,
        }
    }

    /// `filter show -j` of `list`, parsed.
    fn shown_json(list: &[FilterInfo]) -> Value {
        let style = Style {
            json: true,
            ..Style::default()
        };
        serde_json::from_str(&filters(list, style)).unwrap()
    }

    #[test]
    fn filters_print_u32_keys_and_flower_lines() {
        let u32_filter = FilterInfo {
            police: None,
            redirect: None,
            dev: "v0".parse().unwrap(),
            parent: ClassId::new(0x1, 0),
            protocol: Protocol::Ip,
            prio: 1,
            kind: FilterKind::U32,
            handle: FilterHandle::parse(None, "800::800").unwrap(),
            class: Some("1:10".parse().unwrap()),
            matcher: Match {
                dst: Some("10.201.2.0/24".parse().unwrap()),
                proto: Some(17),
                sport: Some(PortRange {
                    first: 5200,
                    last: 5215,
                }),
                dport: Some(PortRange {
                    first: 5201,
                    last: 5201,
                }),
                ..Match::default()
            },
            hashing: U32Hashing::default(),
        };
        assert_eq!(
            filters(std::slice::from_ref(&u32_filter), Style::default()),
            "filter parent 1: protocol ip pref 1 u32 chain 0 \n\
             filter parent 1: protocol ip pref 1 u32 chain 0 fh 800: ht divisor 1 \n\
             filter parent 1: protocol ip pref 1 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 flowid 1:10 not_in_hw \n  \
             match 00110000/00ff0000 at 8\n  \
             match 0ac90200/ffffff00 at 16\n  \
             match 14501451/fff0ffff at 20\n"
        );
        let flower = FilterInfo {
            kind: FilterKind::Flower,
            handle: FilterHandle::parse(None, "0x1").unwrap(),
            prio: 2,
            matcher: Match {
                dst: Some("10.201.2.0/24".parse().unwrap()),
                proto: Some(17),
                dport: Some(PortRange {
                    first: 5000,
                    last: 5100,
                }),
                ..Match::default()
            },
            hashing: U32Hashing::default(),
            ..u32_filter
        };
        assert_eq!(
            filters(std::slice::from_ref(&flower), Style::default()),
            "filter parent 1: protocol ip pref 2 flower chain 0 \n\
             filter parent 1: protocol ip pref 2 flower chain 0 handle 0x1 classid 1:10 \n  \
             eth_type ipv4\n  ip_proto udp\n  dst_ip 10.201.2.0/24\n  dst_port 5000-5100\n  not_in_hw\n"
        );
        let json = shown_json(&[flower]);
        assert_eq!(json[1]["options"]["keys"]["dst_port"], "5000-5100");
    }

    #[test]
    fn a_policer_prints_as_an_action_with_its_statistics() {
        let f = FilterInfo {
            police: Some(PoliceInfo {
                config: htb_ipc::PoliceConfig {
                    rate: Some(htb_core::Rate::from_kbit(2048)),
                    burst: 10 * 1024,
                    mtu: 2040,
                    exceed: ControlAction::Drop,
                    ..htb_ipc::PoliceConfig::default()
                },
                stats: Some(htb_ipc::PoliceStats {
                    packets: 10,
                    bytes: 15_000,
                    overlimits: 3,
                    drops: 3,
                }),
            }),
            ..u32_to_1_1("v0", 1, Protocol::Ip, 50)
        };
        let text = filters(std::slice::from_ref(&f), Style::default());
        assert!(
            text.ends_with(
                "flowid 1:1 not_in_hw \n\n\taction order 1:  police 0x1 rate 2048Kbit burst 10Kb mtu 2Kb action drop overhead 0b \n\tref 1 bind 1 \n\tAction statistics:\n\tSent 15000 bytes 10 pkt (dropped 3, overlimits 3 requeues 0) \n\tbacklog 0b 0p requeues 0\n"
            ),
            "{text}"
        );
        let json = shown_json(&[f]);
        let action = &json[2]["options"]["actions"][0];
        assert_eq!(action["kind"], "police");
        assert_eq!(action["control_action"]["type"], "drop");
        assert_eq!(action["stats"]["drops"], 3);
    }

    #[test]
    fn an_ingress_redirect_prints_as_mirreds_action() {
        // sqm-scripts' `filter add dev r2 parent ffff: protocol all prio 10 u32 match u32 0 0
        // flowid 1:1 action mirred egress redirect dev ifb4r2`, as tc shows it back.
        let f = FilterInfo {
            redirect: Some("ifb4r2".parse().unwrap()),
            ..u32_to_1_1("r2", 0xffff, Protocol::All, 10)
        };
        let text = filters(std::slice::from_ref(&f), Style::default());
        assert!(
            text.ends_with(
                "filter parent ffff: protocol all pref 10 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 flowid 1:1 not_in_hw \n  match 00000000/00000000 at 0\n\n\taction order 1: mirred (Egress Redirect to device ifb4r2) stolen\n\tindex 1 ref 1 bind 1\n"
            ),
            "{text}"
        );
        let json = shown_json(&[f]);
        let action = &json[2]["options"]["actions"][0];
        assert_eq!(
            (&action["kind"], &action["to_dev"], &action["direction"]),
            (&json!("mirred"), &json!("ifb4r2"), &json!("egress"))
        );
    }
}
