//! `tc class show` for HTB classes (`print_class`, `htb_print_opt`, `htb_print_xstats`).

use std::fmt::Write as _;

use htb_core::units::DisplaySize;
use htb_ipc::{ClassInfo, LinkLayer, Shown};
use serde_json::{Map, Value, json};

use super::{RateText, Style, json_text, mq, sent_lines, time_text};

/// `tc class show`: `mq`'s classes, then the HTB classes.
#[must_use]
pub fn classes(shown: &Shown, style: Style) -> String {
    let list = &shown.classes;
    if style.json {
        let mut items: Vec<Value> = shown
            .mq
            .iter()
            .flat_map(|m| mq::classes_json(m, style))
            .collect();
        items.extend(list.iter().map(|c| class_json(c, style)));
        return json_text(items, style);
    }
    let mut out = String::new();
    for m in &shown.mq {
        mq::classes_text(&mut out, m, style);
    }
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
        if let Some(h) = c.leaf_qdisc {
            let _ = write!(out, "leaf {h} ");
        }
        if c.leaf {
            let _ = write!(out, "prio {} ", c.prio);
            if style.details {
                let _ = write!(out, "quantum {} ", c.quantum);
            }
        }
        let _ = write!(out, "rate {} ", RateText(c.rate.bits_per_sec(), style.iec));
        if c.overhead != 0 {
            let _ = write!(out, "overhead {} ", c.overhead);
        }
        let _ = write!(out, "ceil {} ", RateText(c.ceil.bits_per_sec(), style.iec));
        if c.linklayer == LinkLayer::Atm || style.details {
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
        // htbd's own line: who the class shapes, in `class label`'s words.
        if let Some(label) = c.label.as_ref().filter(|_| style.details) {
            // A text with both kinds of quote is shown as a batch line could carry it.
            let words = label
                .quotable()
                .and_then(|q| q.words())
                .unwrap_or_else(|| format!("name {}", label.title()));
            let _ = writeln!(out, " label {words}");
        }
        if let Some(s) = c.stats {
            sent_lines(
                &mut out,
                [
                    s.queue.bytes,
                    s.queue.packets,
                    s.queue.drops,
                    s.queue.overlimits,
                ],
                [s.queue.backlog_bytes, s.queue.backlog_packets],
            );
            let _ = write!(
                out,
                " lended: {} borrowed: {} giants: {}\n tokens: {} ctokens: {}\n",
                s.lended, s.borrowed, s.giants, s.tokens, s.ctokens
            );
            // htbd's own line: TCP round trips, where the port measures them.
            if let Some(r) = s.rtt {
                let time =
                    |us: Option<u32>| us.map_or_else(|| "-".into(), |us| time_text(u64::from(us)));
                let _ = writeln!(
                    out,
                    " rtt p50 {} p95 {} samples {} retransmits {}",
                    time(r.p50_us),
                    time(r.p95_us),
                    r.samples,
                    r.retransmits
                );
            }
            out.push('\n');
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
    if let Some(h) = c.leaf_qdisc {
        o.insert("leaf".into(), json!(h.to_string()));
    }
    if c.leaf {
        o.insert("prio".into(), json!(c.prio));
        if style.details {
            o.insert("quantum".into(), json!(c.quantum));
        }
    }
    // As tc: rates in bytes per second.
    o.insert("rate".into(), json!(c.rate.bytes_per_sec()));
    if c.overhead != 0 {
        o.insert("overhead".into(), json!(c.overhead));
    }
    o.insert("ceil".into(), json!(c.ceil.bytes_per_sec()));
    if c.linklayer == LinkLayer::Atm || style.details {
        o.insert("linklayer".into(), json!(c.linklayer.name()));
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
    if let Some(label) = &c.label {
        o.insert("label".into(), json!(label));
    }
    if let Some(s) = c.stats {
        o.insert(
            "stats".into(),
            json!({
                "bytes": s.queue.bytes,
                "packets": s.queue.packets,
                "drops": s.queue.drops,
                "overlimits": s.queue.overlimits,
                "requeues": s.queue.requeues,
                "backlog": s.queue.backlog_bytes,
                "qlen": s.queue.backlog_packets,
                "lended": s.lended,
                "borrowed": s.borrowed,
                "giants": s.giants,
                "tokens": s.tokens,
                "ctokens": s.ctokens,
            }),
        );
        if let (Some(r), Some(Value::Object(stats))) = (s.rtt, o.get_mut("stats")) {
            stats.insert("rtt".into(), json!(r));
        }
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_ipc::{ClassStats, QueueStats, Rate};

    fn class(id: &str, parent: Option<&str>, leaf: bool) -> ClassInfo {
        ClassInfo {
            dev: "v0".parse().unwrap(),
            id: id.parse().unwrap(),
            parent: parent.map(|p| p.parse().unwrap()),
            level: if leaf { 0 } else { 7 },
            leaf,
            prio: 1,
            quantum: 1514,
            rate: Rate::from_mbit(8),
            ceil: Rate::from_mbit(8),
            burst: 1600,
            cburst: 1600,
            label: None,
            buffer_ns: 1_280_000,
            cbuffer_ns: 1_280_000,
            overhead: 0,
            mpu: 0,
            linklayer: LinkLayer::Ethernet,
            leaf_qdisc: None,
            stats: None,
        }
    }

    fn shown(classes: Vec<ClassInfo>) -> Shown {
        Shown {
            classes,
            ..Shown::default()
        }
    }

    #[test]
    fn class_text_is_tc_6_1s() {
        let mut root = class("1:1", None, false);
        root.stats = Some(ClassStats {
            queue: QueueStats {
                bytes: 1_020_260,
                packets: 1008,
                overlimits: 23,
                ..QueueStats::default()
            },
            lended: 502,
            tokens: 9156,
            ctokens: 9156,
            ..ClassStats::default()
        });
        let mut leaf = class("1:20", Some("1:1"), true);
        leaf.rate = Rate::from_mbit(2);
        leaf.ceil = Rate::from_mbit(4);
        leaf.stats = Some(ClassStats {
            queue: QueueStats {
                bytes: 1_020_260,
                packets: 1008,
                drops: 3257,
                overlimits: 993,
                requeues: 0,
                backlog_bytes: 30420,
                backlog_packets: 30,
            },
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
            classes(&shown(vec![root, leaf.clone()]), style),
            "class htb 1:1 root rate 8Mbit ceil 8Mbit burst 1600b cburst 1600b \n \
             Sent 1020260 bytes 1008 pkt (dropped 0, overlimits 23 requeues 0) \n \
             backlog 0b 0p requeues 0\n lended: 502 borrowed: 0 giants: 0\n tokens: 9156 ctokens: 9156\n\n\
             class htb 1:20 parent 1:1 prio 1 rate 2Mbit ceil 4Mbit burst 1600b cburst 1600b \n \
             Sent 1020260 bytes 1008 pkt (dropped 3257, overlimits 993 requeues 0) \n \
             backlog 30420b 30p requeues 0\n lended: 506 borrowed: 502 giants: 0\n tokens: -36055 ctokens: -31588\n\n"
        );
        let mut atm = class("1:40", Some("1:1"), true);
        atm.prio = 0;
        atm.rate = Rate::from_kbit(1500);
        atm.ceil = Rate::from_kbit(1500);
        atm.overhead = 24;
        atm.linklayer = LinkLayer::Atm;
        atm.burst = 15 * 1024;
        atm.cburst = 3000;
        atm.mpu = 64;
        let details = Style {
            details: true,
            ..Style::default()
        };
        assert_eq!(
            classes(&shown(vec![atm]), details),
            "class htb 1:40 parent 1:1 prio 0 quantum 1514 rate 1500Kbit overhead 24 ceil 1500Kbit linklayer atm burst 15Kb/1 mpu 64b cburst 3000b/1 mpu 64b level 0 \n"
        );
        let json: Value = serde_json::from_str(&classes(
            &shown(vec![leaf]),
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
}
