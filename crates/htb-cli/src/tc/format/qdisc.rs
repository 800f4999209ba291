//! `tc qdisc show`: an `mq` root (in `mq`), the HTB qdiscs (`print_qdisc`, `htb_print_opt`) and
//! the leaf qdiscs of their classes after each.

use std::fmt::Write as _;

use htb_core::ClassId;
use htb_ipc::{IngressInfo, LeafQdiscInfo, QdiscInfo, Shown};
use serde_json::{Map, Value, json};

use super::{Style, counters_json, json_text, mq, queue_json, sent_lines, stab};
use htb_tc::qdiscs;

/// The leaf qdiscs of HTB qdisc `q`'s classes.
fn leaves_of<'a>(
    q: &'a QdiscInfo,
    leaves: &'a [LeafQdiscInfo],
) -> impl Iterator<Item = &'a LeafQdiscInfo> {
    let major = Some(q.handle.major());
    leaves
        .iter()
        .filter(move |l| l.dev == q.dev && l.parent.map(ClassId::major) == major)
}

/// `tc qdisc show`: per interface its `mq` root if it has one, then each HTB qdisc followed by
/// its classes' leaf qdiscs.
#[must_use]
pub fn qdiscs(shown: &Shown, style: Style) -> String {
    let (list, leaves) = (&shown.qdiscs, &shown.leaf_qdiscs);
    let mq_of = |dev: &str| shown.mq.iter().find(|m| m.dev == dev);
    // An mq comes before the first HTB qdisc of its interface (or alone, with no trees).
    let first_of_dev = |i: usize| list[..i].iter().all(|o| o.dev != list[i].dev);
    let bare_mq = shown
        .mq
        .iter()
        .filter(|m| !list.iter().any(|q| q.dev == m.dev));
    // Classless qdiscs at a root (cake, fq_codel …): alone on their interface.
    let roots = leaves.iter().filter(|l| l.parent.is_none());
    if style.json {
        let mut items: Vec<Value> = bare_mq.map(|m| mq::qdisc_json(m, style)).collect();
        items.extend(roots.map(|l| leaf_json(l, style)));
        items.extend(list.iter().enumerate().flat_map(|(i, q)| {
            let mut items = Vec::new();
            if let Some(m) = mq_of(&q.dev).filter(|_| first_of_dev(i)) {
                items.push(mq::qdisc_json(m, style));
            }
            items.push(htb_json(q, style));
            items.extend(leaves_of(q, leaves).map(|l| leaf_json(l, style)));
            items
        }));
        items.extend(shown.ingress.iter().map(|i| ingress_json(i, style)));
        return json_text(items, style);
    }
    let mut out = String::new();
    for m in bare_mq {
        mq::qdisc_text(&mut out, m, style);
    }
    for l in roots {
        leaf_text(&mut out, l, style);
    }
    for (i, q) in list.iter().enumerate() {
        if let Some(m) = mq_of(&q.dev).filter(|_| first_of_dev(i)) {
            mq::qdisc_text(&mut out, m, style);
        }
        let _ = write!(out, "qdisc htb {} ", q.handle);
        if style.show_dev {
            let _ = write!(out, "dev {} ", q.dev);
        }
        let default = if q.default_minor == 0 {
            "0".to_owned()
        } else {
            format!("{:#x}", q.default_minor)
        };
        match q.parent {
            Some(p) => {
                let _ = write!(out, "parent {p} ");
            }
            None => out.push_str("root "),
        }
        let _ = write!(
            out,
            "r2q {} default {default} direct_packets_stat {}",
            q.r2q, q.direct_packets
        );
        if style.details {
            out.push_str(" ver 3.17");
        }
        let _ = writeln!(out, " direct_qlen {}", q.direct_qlen);
        if let Some(s) = q.stab.as_ref().filter(|_| style.details) {
            stab::text(&mut out, s);
        }
        if let Some(s) = q.stats {
            sent_lines(
                &mut out,
                [s.bytes, s.packets, s.drops, s.overlimits],
                [s.backlog_bytes, s.backlog_packets],
            );
        }
        for l in leaves_of(q, leaves) {
            leaf_text(&mut out, l, style);
        }
    }
    for i in &shown.ingress {
        ingress_text(&mut out, i, style);
    }
    out
}

/// An ingress qdisc as `tc qdisc show` prints it (`ingress_print_opt` has nothing to print:
/// tc's dashes stand for the missing options).
fn ingress_text(out: &mut String, i: &IngressInfo, style: Style) {
    out.push_str("qdisc ingress ffff: ");
    if style.show_dev {
        let _ = write!(out, "dev {} ", i.dev);
    }
    out.push_str("parent ffff:fff1 ----------------\n");
    if let Some(s) = i.stats {
        sent_lines(
            out,
            [s.bytes, s.packets, s.drops, s.overlimits],
            [s.backlog_bytes, s.backlog_packets],
        );
    }
}

/// An ingress qdisc as `-j` lists it.
fn ingress_json(i: &IngressInfo, style: Style) -> Value {
    let mut o = json!({
        "kind": "ingress",
        "handle": "ffff:",
        "parent": "ffff:fff1",
        "options": {},
    });
    if style.show_dev {
        o["dev"] = json!(i.dev);
    }
    o
}

/// One HTB qdisc as `-j` lists it.
fn htb_json(q: &QdiscInfo, style: Style) -> Value {
    let mut o = Map::new();
    o.insert("kind".into(), json!("htb"));
    o.insert("handle".into(), json!(q.handle));
    if style.show_dev {
        o.insert("dev".into(), json!(q.dev));
    }
    match q.parent {
        Some(p) => o.insert("parent".into(), json!(p.to_string())),
        None => o.insert("root".into(), json!(true)),
    };
    let mut options = json!({
        "r2q": q.r2q,
        "default": format!("{:#x}", q.default_minor),
        "direct_packets_stat": q.direct_packets,
        "direct_qlen": q.direct_qlen,
    });
    if style.details {
        options["ver"] = json!("3.17");
    }
    o.insert("options".into(), options);
    if let Some(s) = q.stab.as_ref().filter(|_| style.details) {
        stab::json(&mut o, s);
    }
    if let Some(s) = &q.stats {
        queue_json(&mut o, s);
    }
    Value::Object(o)
}

/// tc shows a class's default leaf (no handle) as `0:`.
fn handle_text(l: &LeafQdiscInfo) -> String {
    l.handle.map_or_else(|| "0:".to_owned(), |h| h.to_string())
}

/// `qdisc fq_codel 10: parent 1:10 limit 10240p …` and, with `-s`, its statistics.
fn leaf_text(out: &mut String, l: &LeafQdiscInfo, style: Style) {
    let _ = write!(out, "qdisc {} {} ", l.config.kind(), handle_text(l));
    if style.show_dev {
        let _ = write!(out, "dev {} ", l.dev);
    }
    match l.parent {
        Some(p) => {
            let _ = write!(out, "parent {p} ");
        }
        None => out.push_str("root "),
    }
    let _ = writeln!(out, "{}", qdiscs::options_text(&l.config, style.details));
    if let Some(s) = l.stab.as_ref().filter(|_| style.details) {
        stab::text(out, s);
    }
    if let Some(s) = &l.stats {
        sent_lines(
            out,
            [
                s.queue.bytes,
                s.queue.packets,
                s.queue.drops,
                s.queue.overlimits,
            ],
            [s.queue.backlog_bytes, s.queue.backlog_packets],
        );
        out.push_str(&qdiscs::xstats_text(s));
    }
}

fn leaf_json(l: &LeafQdiscInfo, style: Style) -> Value {
    let mut o = Map::new();
    o.insert("kind".into(), json!(l.config.kind().name()));
    o.insert("handle".into(), json!(handle_text(l)));
    if style.show_dev {
        o.insert("dev".into(), json!(l.dev));
    }
    match l.parent {
        Some(p) => o.insert("parent".into(), json!(p.to_string())),
        None => o.insert("root".into(), json!(true)),
    };
    o.insert(
        "options".into(),
        qdiscs::options_json(&l.config, style.details),
    );
    if let Some(s) = l.stab.as_ref().filter(|_| style.details) {
        stab::json(&mut o, s);
    }
    if let Some(s) = &l.stats {
        counters_json(
            &mut o,
            [
                s.queue.bytes,
                s.queue.packets,
                s.queue.drops,
                s.queue.overlimits,
                s.queue.requeues,
                s.queue.backlog_bytes,
                s.queue.backlog_packets,
            ],
        );
        qdiscs::xstats_json(s, &mut o);
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::{FqCodelStats, LeafConfig};
    use htb_ipc::{LeafQdiscStats, QueueStats};

    fn shown(qdiscs: Vec<QdiscInfo>, leaf_qdiscs: Vec<LeafQdiscInfo>) -> Shown {
        Shown {
            qdiscs,
            leaf_qdiscs,
            ..Shown::default()
        }
    }

    #[test]
    fn qdisc_text_and_json() {
        let q = QdiscInfo {
            stab: None,
            dev: "v0".parse().unwrap(),
            handle: ClassId::new(1, 0),
            parent: None,
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
            qdiscs(&shown(vec![q.clone()], Vec::new()), Style::default()),
            "qdisc htb 1: root r2q 10 default 0x20 direct_packets_stat 1 direct_qlen 1000\n \
             Sent 10 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\n"
        );
        let json: Value = serde_json::from_str(&qdiscs(
            &shown(vec![q], Vec::new()),
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
    fn a_size_table_shows_with_details_as_tc_prints_it() {
        // `tc -s -d qdisc show` and `tc -d -j qdisc show` of this kernel, for `stab overhead
        // 34 linklayer ethernet` and `stab overhead 40 linklayer atm` on `htb default 10`.
        let ethernet = htb_core::SizeSpec {
            overhead: 34,
            link_layer: Some(htb_core::LinkLayer::Ethernet),
            ..htb_core::SizeSpec::default()
        };
        let q = QdiscInfo {
            dev: "v0".parse().unwrap(),
            handle: ClassId::new(1, 0),
            parent: None,
            default_minor: 0x10,
            r2q: 10,
            direct_qlen: 1000,
            direct_packets: 0,
            stab: Some(ethernet.table().unwrap().spec()),
            stats: Some(QueueStats::default()),
        };
        let details = Style {
            details: true,
            ..Style::default()
        };
        assert_eq!(
            qdiscs(&shown(vec![q.clone()], Vec::new()), details),
            "qdisc htb 1: root r2q 10 default 0x10 direct_packets_stat 0 ver 3.17 direct_qlen 1000\n \
             linklayer ethernet overhead 34 \n \
             Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\n"
        );
        // Without -d, tc leaves it out.
        assert!(
            !qdiscs(&shown(vec![q.clone()], Vec::new()), Style::default()).contains("linklayer")
        );
        let atm = htb_core::SizeSpec {
            overhead: 40,
            link_layer: Some(htb_core::LinkLayer::Atm),
            ..htb_core::SizeSpec::default()
        };
        let q = QdiscInfo {
            stab: Some(atm.table().unwrap().spec()),
            stats: None,
            ..q
        };
        let json: Value = serde_json::from_str(&qdiscs(
            &shown(vec![q], Vec::new()),
            Style {
                json: true,
                ..details
            },
        ))
        .unwrap();
        assert_eq!(
            json[0]["stab"],
            json!({"linklayer": "atm", "overhead": 40, "mtu": 2047, "tsize": 512})
        );
        assert_eq!(json[0]["options"]["ver"], "3.17");
    }

    #[test]
    fn leaf_qdiscs_follow_their_htb_qdisc() {
        let q = QdiscInfo {
            stab: None,
            dev: "v0".parse().unwrap(),
            handle: ClassId::new(1, 0),
            parent: None,
            default_minor: 0,
            r2q: 10,
            direct_qlen: 1000,
            direct_packets: 0,
            stats: None,
        };
        let leaf = LeafQdiscInfo {
            stab: None,
            dev: "v0".parse().unwrap(),
            handle: Some(ClassId::new(0x10, 0)),
            parent: Some(ClassId::new(1, 0x10)),
            config: LeafConfig::default(),
            stats: Some(LeafQdiscStats {
                queue: QueueStats {
                    bytes: 3000,
                    packets: 2,
                    drops: 1,
                    backlog_bytes: 1500,
                    backlog_packets: 1,
                    ..QueueStats::default()
                },
                fq_codel: Some(FqCodelStats {
                    maxpacket: 1514,
                    new_flow_count: 2,
                    ecn_mark: 5,
                    new_flows_len: 1,
                    ..FqCodelStats::default()
                }),
                ..LeafQdiscStats::default()
            }),
        };
        let text = qdiscs(
            &shown(vec![q.clone()], vec![leaf.clone()]),
            Style::default(),
        );
        assert_eq!(
            text,
            "qdisc htb 1: root r2q 10 default 0 direct_packets_stat 0 direct_qlen 1000\n\
             qdisc fq_codel 10: parent 1:10 limit 10240p flows 1024 quantum 1514 target 5ms interval 100ms memory_limit 32Mb ecn drop_batch 64 \n \
             Sent 3000 bytes 2 pkt (dropped 1, overlimits 0 requeues 0) \n \
             backlog 1500b 1p requeues 0\n  \
             maxpacket 1514 drop_overlimit 0 new_flow_count 2 ecn_mark 5\n  \
             new_flows_len 1 old_flows_len 0\n"
        );
        let json: Value = serde_json::from_str(&qdiscs(
            &shown(vec![q], vec![leaf]),
            Style {
                json: true,
                ..Style::default()
            },
        ))
        .unwrap();
        assert_eq!(json[1]["kind"], "fq_codel");
        assert_eq!(json[1]["parent"], "1:10");
        assert_eq!(json[1]["options"]["flows"], 1024);
        assert_eq!(json[1]["ecn_mark"], 5);
        assert_eq!(json[1]["drops"], 1);
    }
}
