//! tc's output for HTB: the text iproute2 6.1 prints (`print_qdisc`, `htb_print_opt`,
//! `htb_print_xstats`, `u32_print_opt`, `flower_print_opt`) and its JSON keys under `-j`.

use std::fmt::{self, Write as _};
use std::net::IpAddr;

use htb_core::Rate;
use htb_core::units::{DisplaySize, fmt_rate};
use htb_ipc::{ClassInfo, FilterInfo, MatchSpec, QdiscInfo};
use serde_json::{Map, Value, json};

/// How to print (tc's global options).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// `-s`.
    pub stats: bool,
    /// `-d`.
    pub details: bool,
    /// `-r`.
    pub raw: bool,
    /// `-iec`.
    pub iec: bool,
    /// `-j`.
    pub json: bool,
    /// `-p`.
    pub pretty: bool,
    /// Name the device on each line (no `dev` was given).
    pub show_dev: bool,
}

struct RateText(u64, bool);

impl fmt::Display for RateText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_rate(f, Rate::from_bits_per_sec(self.0), self.1)
    }
}

/// A rate in bit/s as tc prints it (`100Mbit`, `1500Kbit`).
#[must_use]
pub fn rate_text(bits: u64, iec: bool) -> String {
    RateText(bits, iec).to_string()
}

fn json_text(items: Vec<Value>, style: Style) -> String {
    let value = Value::Array(items);
    let mut text = if style.pretty {
        serde_json::to_string_pretty(&value)
    } else {
        serde_json::to_string(&value)
    }
    .unwrap_or_default();
    text.push('\n');
    text
}

/// The two statistics lines qdiscs and classes share (`print_tcstats2_attr`); HTB never
/// requeues, so both requeue counts are 0.
fn sent_lines(out: &mut String, [bytes, packets, drops, overlimits]: [u64; 4], backlog: [u64; 2]) {
    let _ = writeln!(
        out,
        " Sent {bytes} bytes {packets} pkt (dropped {drops}, overlimits {overlimits} requeues 0) \n \
         backlog {}b {}p requeues 0",
        backlog[0], backlog[1]
    );
}

/// `tc qdisc show`.
#[must_use]
pub fn qdiscs(list: &[QdiscInfo], style: Style) -> String {
    if style.json {
        let items = list
            .iter()
            .map(|q| {
                let mut o = Map::new();
                o.insert("kind".into(), json!("htb"));
                o.insert("handle".into(), json!(q.handle));
                if style.show_dev {
                    o.insert("dev".into(), json!(q.dev));
                }
                o.insert("root".into(), json!(true));
                let mut options = json!({
                    "r2q": q.r2q,
                    "default": format!("{:#x}", q.default_minor),
                    "direct_packets_stat": q.direct_packets,
                    "direct_qlen": q.direct_qlen,
                });
                if style.details {
                    options["version"] = json!("3.17");
                }
                o.insert("options".into(), options);
                if let Some(s) = q.stats {
                    for (k, v) in [
                        ("bytes", s.bytes),
                        ("packets", s.packets),
                        ("drops", s.drops),
                        ("overlimits", s.overlimits),
                        ("requeues", s.requeues),
                        ("backlog", s.backlog_bytes),
                        ("qlen", s.backlog_packets),
                    ] {
                        o.insert(k.into(), json!(v));
                    }
                }
                Value::Object(o)
            })
            .collect();
        return json_text(items, style);
    }
    let mut out = String::new();
    for q in list {
        let _ = write!(out, "qdisc htb {} ", q.handle);
        if style.show_dev {
            let _ = write!(out, "dev {} ", q.dev);
        }
        let default = if q.default_minor == 0 {
            "0".to_owned()
        } else {
            format!("{:#x}", q.default_minor)
        };
        let _ = write!(
            out,
            "root r2q {} default {default} direct_packets_stat {}",
            q.r2q, q.direct_packets
        );
        if style.details {
            out.push_str(" ver 3.17");
        }
        let _ = writeln!(out, " direct_qlen {}", q.direct_qlen);
        if let Some(s) = q.stats {
            sent_lines(
                &mut out,
                [s.bytes, s.packets, s.drops, s.overlimits],
                [s.backlog_bytes, s.backlog_packets],
            );
        }
    }
    out
}

/// `tc class show`.
#[must_use]
pub fn classes(list: &[ClassInfo], style: Style) -> String {
    if style.json {
        return json_text(list.iter().map(|c| class_json(c, style)).collect(), style);
    }
    let mut out = String::new();
    for c in list {
        let _ = write!(out, "class htb {} ", c.id);
        if style.show_dev {
            let _ = write!(out, "dev {} ", c.dev);
        }
        match &c.parent {
            Some(p) => {
                let _ = write!(out, "parent {p} ");
            }
            None => out.push_str("root "),
        }
        if c.leaf {
            let _ = write!(out, "prio {} ", c.prio);
            if style.details {
                let _ = write!(out, "quantum {} ", c.quantum);
            }
        }
        let _ = write!(out, "rate {} ", RateText(c.rate, style.iec));
        if c.overhead != 0 {
            let _ = write!(out, "overhead {} ", c.overhead);
        }
        let _ = write!(out, "ceil {} ", RateText(c.ceil, style.iec));
        if c.linklayer == "atm" || style.details {
            let _ = write!(out, "linklayer {} ", c.linklayer);
        }
        if style.details {
            let _ = write!(
                out,
                "burst {}/1 mpu {} cburst {}/1 mpu {} level {} ",
                DisplaySize(c.burst),
                DisplaySize(u64::from(c.mpu)),
                DisplaySize(c.cburst),
                DisplaySize(u64::from(c.mpu)),
                c.level
            );
        } else {
            let _ = write!(
                out,
                "burst {} cburst {} ",
                DisplaySize(c.burst),
                DisplaySize(c.cburst)
            );
        }
        if style.raw {
            let _ = write!(
                out,
                "buffer [{:08x}] cbuffer [{:08x}] ",
                c.buffer_ns / 64,
                c.cbuffer_ns / 64
            );
        }
        out.push('\n');
        if let Some(s) = c.stats {
            sent_lines(
                &mut out,
                [s.bytes, s.packets, s.drops, s.overlimits],
                [s.backlog_bytes, s.backlog_packets],
            );
            let _ = write!(
                out,
                " lended: {} borrowed: {} giants: {}\n tokens: {} ctokens: {}\n\n",
                s.lended, s.borrowed, s.giants, s.tokens, s.ctokens
            );
        }
    }
    out
}

fn class_json(c: &ClassInfo, style: Style) -> Value {
    let mut o = Map::new();
    o.insert("class".into(), json!("htb"));
    o.insert("handle".into(), json!(c.id));
    if style.show_dev {
        o.insert("dev".into(), json!(c.dev));
    }
    match &c.parent {
        Some(p) => o.insert("parent".into(), json!(p)),
        None => o.insert("root".into(), json!(true)),
    };
    if c.leaf {
        o.insert("prio".into(), json!(c.prio));
        if style.details {
            o.insert("quantum".into(), json!(c.quantum));
        }
    }
    // As tc: rates in bytes per second.
    o.insert("rate".into(), json!(c.rate / 8));
    if c.overhead != 0 {
        o.insert("overhead".into(), json!(c.overhead));
    }
    o.insert("ceil".into(), json!(c.ceil / 8));
    if c.linklayer == "atm" || style.details {
        o.insert("linklayer".into(), json!(c.linklayer));
    }
    o.insert("burst".into(), json!(c.burst));
    if style.details {
        o.insert("burst_cell".into(), json!(1));
        o.insert("mpu_rate".into(), json!(c.mpu));
    }
    o.insert("cburst".into(), json!(c.cburst));
    if style.details {
        o.insert("cburst_cell".into(), json!(1));
        o.insert("mpu_ceil".into(), json!(c.mpu));
        o.insert("level".into(), json!(c.level));
    }
    if let Some(s) = c.stats {
        o.insert(
            "stats".into(),
            json!({
                "bytes": s.bytes,
                "packets": s.packets,
                "drops": s.drops,
                "overlimits": s.overlimits,
                "requeues": s.requeues,
                "backlog": s.backlog_bytes,
                "qlen": s.backlog_packets,
                "lended": s.lended,
                "borrowed": s.borrowed,
                "giants": s.giants,
                "tokens": s.tokens,
                "ctokens": s.ctokens,
            }),
        );
    }
    Value::Object(o)
}

/// A u32 key: value and mask in host order, at a byte offset of the IP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    value: u32,
    mask: u32,
    off: u32,
}

fn prefix_words(prefix: &str) -> Option<(IpAddr, Vec<(u32, u32)>)> {
    let (addr, len) = prefix.split_once('/').unwrap_or((prefix, ""));
    let addr: IpAddr = addr.parse().ok()?;
    let bits = match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let max = bits.len() * 8;
    let len: usize = if len.is_empty() {
        max
    } else {
        len.parse().ok()?
    };
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
fn port_key(range: (u16, u16)) -> Option<(u32, u32)> {
    let span = u32::from(range.1 - range.0) + 1;
    let first = u32::from(range.0);
    (span.is_power_of_two() && first % span == 0).then(|| (first, 0xffff & !(span - 1)))
}

/// The keys `tc filter add … u32 match ip…` would have built (`pack_key`, merging keys at the
/// same offset), and what cannot be expressed as one.
fn u32_keys(protocol: &str, m: &MatchSpec) -> (Vec<Key>, Vec<String>) {
    let v6 = protocol == "ipv6"
        || m.src
            .as_deref()
            .or(m.dst.as_deref())
            .is_some_and(|p| p.contains(':'));
    let mut keys: Vec<Key> = Vec::new();
    let mut other = Vec::new();
    let mut add = |value: u32, mask: u32, off: u32| {
        if mask == 0 {
            return;
        }
        match keys.iter_mut().find(|k| k.off == off) {
            Some(k) => {
                k.value |= value & mask;
                k.mask |= mask;
            }
            None => keys.push(Key {
                value: value & mask,
                mask,
                off,
            }),
        }
    };
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
        (&m.src, if v6 { 8 } else { 12 }),
        (&m.dst, if v6 { 24 } else { 16 }),
    ] {
        if let Some((_, words)) = prefix.as_deref().and_then(prefix_words) {
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
            None => other.push(format!("{name} {}-{}", range.0, range.1)),
        }
    }
    if let Some(v) = m.vlan {
        other.push(format!("vlan {v}"));
    }
    keys.sort_by_key(|k| k.off);
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

fn ports_text(r: (u16, u16)) -> String {
    if r.0 == r.1 {
        r.0.to_string()
    } else {
        format!("{}-{}", r.0, r.1)
    }
}

/// flower's key lines (`flower_print_opt`).
fn flower_keys(f: &FilterInfo) -> Vec<(String, Value)> {
    let m = &f.matcher;
    let mut keys = Vec::new();
    match f.protocol.as_str() {
        "ip" => keys.push(("eth_type".into(), json!("ipv4"))),
        "ipv6" => keys.push(("eth_type".into(), json!("ipv6"))),
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
    if let Some(p) = &m.dst {
        keys.push(("dst_ip".into(), json!(p)));
    }
    if let Some(p) = &m.src {
        keys.push(("src_ip".into(), json!(p)));
    }
    if let Some(r) = m.dport {
        keys.push(("dst_port".into(), json!(ports_text(r))));
    }
    if let Some(r) = m.sport {
        keys.push(("src_port".into(), json!(ports_text(r))));
    }
    keys
}

/// `tc filter show`.
#[must_use]
pub fn filters(list: &[FilterInfo], style: Style) -> String {
    let mut out = String::new();
    let mut items = Vec::new();
    let mut previous: Option<(&str, u32)> = None;
    for f in list {
        let mut head = String::from("filter ");
        if style.show_dev {
            let _ = write!(head, "dev {} ", f.dev);
        }
        let _ = write!(
            head,
            "parent {} protocol {} pref {} {} chain 0 ",
            f.parent, f.protocol, f.prio, f.kind
        );
        let base = || {
            let mut o = Map::new();
            if style.show_dev {
                o.insert("dev".into(), json!(f.dev));
            }
            o.insert("parent".into(), json!(f.parent));
            o.insert("protocol".into(), json!(f.protocol));
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
            if f.kind == "u32" {
                let ht = f.handle.split(':').next().unwrap_or("800");
                let _ = writeln!(out, "{head}fh {ht}: ht divisor 1 ");
                let mut o = base();
                o.insert(
                    "options".into(),
                    json!({"fh": format!("{ht}:"), "ht_divisor": 1}),
                );
                items.push(Value::Object(o));
            }
        }
        let mut o = base();
        if f.kind == "u32" {
            let mut parts = f.handle.split(':');
            let ht = parts.next().unwrap_or("800");
            let node = parts.nth(1).unwrap_or("800");
            let order = u32::from_str_radix(node, 16).unwrap_or(0);
            let _ = writeln!(
                out,
                "{head}fh {} order {order} key ht {ht} bkt 0 flowid {} not_in_hw ",
                f.handle, f.class
            );
            let (keys, other) = u32_keys(&f.protocol, &f.matcher);
            let mut matches = Vec::new();
            for k in &keys {
                let _ = writeln!(out, "  match {:08x}/{:08x} at {}", k.value, k.mask, k.off);
                matches.push(json!({
                    "value": format!("{:x}", k.value),
                    "mask": format!("{:x}", k.mask),
                    "offmask": "",
                    "off": k.off,
                }));
            }
            for o in &other {
                let _ = writeln!(out, "  match {o} (not expressible as a u32 key)");
            }
            o.insert(
                "options".into(),
                json!({
                    "fh": f.handle,
                    "order": order,
                    "key_ht": ht,
                    "bkt": "0",
                    "flowid": f.class,
                    "not_in_hw": true,
                    "match": matches,
                }),
            );
        } else {
            let _ = writeln!(out, "{head}handle {} classid {} ", f.handle, f.class);
            let keys = flower_keys(f);
            let mut map = Map::new();
            for (k, v) in keys {
                let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                let _ = writeln!(out, "  {k} {text}");
                map.insert(k, v);
            }
            let _ = writeln!(out, "  not_in_hw");
            let handle = u32::from_str_radix(f.handle.trim_start_matches("0x"), 16).unwrap_or(0);
            o.insert(
                "options".into(),
                json!({"handle": handle, "classid": f.class, "keys": map, "not_in_hw": true}),
            );
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
    use htb_ipc::{ClassStats, QueueStats};

    fn class(id: &str, parent: Option<&str>, leaf: bool) -> ClassInfo {
        ClassInfo {
            dev: "v0".into(),
            id: id.into(),
            parent: parent.map(str::to_owned),
            level: if leaf { 0 } else { 7 },
            leaf,
            prio: 1,
            quantum: 1514,
            rate: 8_000_000,
            ceil: 8_000_000,
            burst: 1600,
            cburst: 1600,
            buffer_ns: 1_280_000,
            cbuffer_ns: 1_280_000,
            overhead: 0,
            mpu: 0,
            linklayer: "ethernet".into(),
            limit: 1000,
            stats: None,
        }
    }

    #[test]
    fn class_text_is_tc_6_1s() {
        let mut root = class("1:1", None, false);
        root.stats = Some(ClassStats {
            bytes: 1_020_260,
            packets: 1008,
            overlimits: 23,
            lended: 502,
            tokens: 9156,
            ctokens: 9156,
            ..ClassStats::default()
        });
        let mut leaf = class("1:20", Some("1:1"), true);
        leaf.rate = 2_000_000;
        leaf.ceil = 4_000_000;
        leaf.stats = Some(ClassStats {
            bytes: 1_020_260,
            packets: 1008,
            drops: 3257,
            overlimits: 993,
            backlog_bytes: 30420,
            backlog_packets: 30,
            lended: 506,
            borrowed: 502,
            tokens: -36055,
            ctokens: -31588,
            ..ClassStats::default()
        });
        let style = Style {
            stats: true,
            ..Style::default()
        };
        assert_eq!(
            classes(&[root, leaf.clone()], style),
            "class htb 1:1 root rate 8Mbit ceil 8Mbit burst 1600b cburst 1600b \n \
             Sent 1020260 bytes 1008 pkt (dropped 0, overlimits 23 requeues 0) \n \
             backlog 0b 0p requeues 0\n lended: 502 borrowed: 0 giants: 0\n tokens: 9156 ctokens: 9156\n\n\
             class htb 1:20 parent 1:1 prio 1 rate 2Mbit ceil 4Mbit burst 1600b cburst 1600b \n \
             Sent 1020260 bytes 1008 pkt (dropped 3257, overlimits 993 requeues 0) \n \
             backlog 30420b 30p requeues 0\n lended: 506 borrowed: 502 giants: 0\n tokens: -36055 ctokens: -31588\n\n"
        );
        let mut atm = class("1:40", Some("1:1"), true);
        atm.prio = 0;
        atm.rate = 1_500_000;
        atm.ceil = 1_500_000;
        atm.overhead = 24;
        atm.linklayer = "atm".into();
        atm.burst = 15 * 1024;
        atm.cburst = 3000;
        atm.mpu = 64;
        let details = Style {
            details: true,
            ..Style::default()
        };
        assert_eq!(
            classes(&[atm], details),
            "class htb 1:40 parent 1:1 prio 0 quantum 1514 rate 1500Kbit overhead 24 ceil 1500Kbit linklayer atm burst 15Kb/1 mpu 64b cburst 3000b/1 mpu 64b level 0 \n"
        );
        let json: Value = serde_json::from_str(&classes(
            &[leaf],
            Style {
                json: true,
                stats: true,
                ..Style::default()
            },
        ))
        .unwrap();
        assert_eq!(json[0]["handle"], "1:20");
        assert_eq!(json[0]["rate"], 250_000, "bytes per second, as tc");
        assert_eq!(json[0]["stats"]["lended"], 506);
        assert_eq!(json[0]["stats"]["qlen"], 30);
    }

    #[test]
    fn qdisc_text_and_json() {
        let q = QdiscInfo {
            dev: "v0".into(),
            handle: "1:".into(),
            default_minor: 0x20,
            r2q: 10,
            direct_qlen: 1000,
            direct_packets: 1,
            stats: Some(QueueStats {
                bytes: 10,
                packets: 1,
                ..QueueStats::default()
            }),
        };
        assert_eq!(
            qdiscs(std::slice::from_ref(&q), Style::default()),
            "qdisc htb 1: root r2q 10 default 0x20 direct_packets_stat 1 direct_qlen 1000\n \
             Sent 10 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\n"
        );
        let json: Value = serde_json::from_str(&qdiscs(
            &[q],
            Style {
                json: true,
                ..Style::default()
            },
        ))
        .unwrap();
        assert_eq!(json[0]["options"]["default"], "0x20");
        assert_eq!(json[0]["bytes"], 10);
    }

    #[test]
    fn filters_print_u32_keys_and_flower_lines() {
        let u32_filter = FilterInfo {
            dev: "v0".into(),
            parent: "1:".into(),
            protocol: "ip".into(),
            prio: 1,
            kind: "u32".into(),
            handle: "800::800".into(),
            class: "1:10".into(),
            matcher: MatchSpec {
                dst: Some("10.201.2.0/24".into()),
                proto: Some(17),
                sport: Some((5200, 5215)),
                dport: Some((5201, 5201)),
                ..MatchSpec::default()
            },
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
            kind: "flower".into(),
            handle: "0x1".into(),
            prio: 2,
            matcher: MatchSpec {
                dst: Some("10.201.2.0/24".into()),
                proto: Some(17),
                dport: Some((5000, 5100)),
                ..MatchSpec::default()
            },
            ..u32_filter
        };
        assert_eq!(
            filters(std::slice::from_ref(&flower), Style::default()),
            "filter parent 1: protocol ip pref 2 flower chain 0 \n\
             filter parent 1: protocol ip pref 2 flower chain 0 handle 0x1 classid 1:10 \n  \
             eth_type ipv4\n  ip_proto udp\n  dst_ip 10.201.2.0/24\n  dst_port 5000-5100\n  not_in_hw\n"
        );
        let json: Value = serde_json::from_str(&filters(
            &[flower],
            Style {
                json: true,
                ..Style::default()
            },
        ))
        .unwrap();
        assert_eq!(json[1]["options"]["keys"]["dst_port"], "5000-5100");
    }
}
