//! `tc qdisc show` and `tc class show` for an `mq` root (`q_mq.c` prints no options;
//! `mq_dump_class` makes each class `root` with its queue's qdisc as `leaf`).

use std::fmt::Write as _;

use htb_ipc::{MqInfo, QueueStats};
use serde_json::{Map, Value, json};

use super::{Style, queue_json, sent_lines};

fn stats_lines(out: &mut String, s: &QueueStats) {
    sent_lines(
        out,
        [s.bytes, s.packets, s.drops, s.overlimits],
        [s.backlog_bytes, s.backlog_packets],
    );
}

/// `qdisc mq 7fff: root` and, with `-s`, the sum of its queues' counters.
pub(super) fn qdisc_text(out: &mut String, mq: &MqInfo, style: Style) {
    let _ = write!(out, "qdisc mq {} ", mq.handle);
    if style.show_dev {
        let _ = write!(out, "dev {} ", mq.dev);
    }
    out.push_str("root \n");
    if let Some(s) = &mq.stats {
        stats_lines(out, s);
    }
}

/// `{"kind":"mq","handle":"7fff:","root":true,"options":{}}`.
pub(super) fn qdisc_json(mq: &MqInfo, style: Style) -> Value {
    let mut o = Map::new();
    o.insert("kind".into(), json!("mq"));
    o.insert("handle".into(), json!(mq.handle.to_string()));
    if style.show_dev {
        o.insert("dev".into(), json!(mq.dev));
    }
    o.insert("root".into(), json!(true));
    o.insert("options".into(), json!({}));
    if let Some(s) = &mq.stats {
        queue_json(&mut o, s);
    }
    Value::Object(o)
}

/// `class mq 7fff:1 root leaf 1: ` per class, with its queue's counters under `-s`.
pub(super) fn classes_text(out: &mut String, mq: &MqInfo, style: Style) {
    for c in &mq.classes {
        let _ = write!(out, "class mq {} ", c.id);
        if style.show_dev {
            let _ = write!(out, "dev {} ", mq.dev);
        }
        out.push_str("root ");
        if let Some(leaf) = c.leaf {
            let _ = write!(out, "leaf {leaf} ");
        }
        out.push('\n');
        if style.stats {
            stats_lines(out, &c.stats.unwrap_or_default());
        }
    }
}

/// The classes as `-j` lists them.
pub(super) fn classes_json(mq: &MqInfo, style: Style) -> Vec<Value> {
    mq.classes
        .iter()
        .map(|c| {
            let mut o = Map::new();
            o.insert("class".into(), json!("mq"));
            o.insert("handle".into(), json!(c.id.to_string()));
            if style.show_dev {
                o.insert("dev".into(), json!(mq.dev));
            }
            o.insert("root".into(), json!(true));
            if let Some(leaf) = c.leaf {
                o.insert("leaf".into(), json!(leaf.to_string()));
            }
            if style.stats {
                let mut s = Map::new();
                queue_json(&mut s, &c.stats.unwrap_or_default());
                o.insert("stats".into(), Value::Object(s));
            }
            Value::Object(o)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use htb_core::ClassId;
    use htb_ipc::{MqClassInfo, QdiscInfo, Shown};

    use super::*;
    use crate::tc::format::{classes, qdiscs};

    fn shown(stats: bool) -> Shown {
        let s = stats.then(|| QueueStats {
            bytes: 3000,
            packets: 2,
            ..QueueStats::default()
        });
        let tree = |major: u16| QdiscInfo {
            stab: None,
            dev: "eth1".parse().unwrap(),
            handle: ClassId::new(major, 0),
            parent: Some(ClassId::new(0x7fff, u32::from(major))),
            default_minor: 2,
            r2q: 10,
            direct_qlen: 1000,
            direct_packets: 0,
            stats: s,
        };
        Shown {
            qdiscs: vec![tree(1), tree(2)],
            mq: vec![MqInfo {
                dev: "eth1".parse().unwrap(),
                handle: ClassId::new(0x7fff, 0),
                classes: [1, 2]
                    .map(|m| MqClassInfo {
                        id: ClassId::new(0x7fff, m),
                        leaf: Some(ClassId::new(u16::try_from(m).unwrap(), 0)),
                        stats: s,
                    })
                    .to_vec(),
                stats: s.map(|s| QueueStats {
                    bytes: 2 * s.bytes,
                    packets: 2 * s.packets,
                    ..s
                }),
            }],
            ..Shown::default()
        }
    }

    /// The lines `tc qdisc show` and `tc class show` print for LibreQoS's layout on this
    /// machine's kernel (iproute2 6.1), checked against it.
    #[test]
    fn mq_prints_as_tc_does() {
        assert_eq!(
            qdiscs(&shown(false), Style::default()),
            "qdisc mq 7fff: root \n\
             qdisc htb 1: parent 7fff:1 r2q 10 default 0x2 direct_packets_stat 0 direct_qlen 1000\n\
             qdisc htb 2: parent 7fff:2 r2q 10 default 0x2 direct_packets_stat 0 direct_qlen 1000\n"
        );
        assert_eq!(
            classes(&shown(false), Style::default()),
            "class mq 7fff:1 root leaf 1: \nclass mq 7fff:2 root leaf 2: \n"
        );
        let stats = Style {
            stats: true,
            ..Style::default()
        };
        let text = qdiscs(&shown(true), stats);
        assert!(
            text.starts_with(
                "qdisc mq 7fff: root \n Sent 6000 bytes 4 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\n"
            ),
            "{text}"
        );
        assert!(
            classes(&shown(true), stats).starts_with(
                "class mq 7fff:1 root leaf 1: \n Sent 3000 bytes 2 pkt (dropped 0, overlimits 0 requeues 0) \n"
            )
        );
        let json: Value = serde_json::from_str(&qdiscs(
            &shown(false),
            Style {
                json: true,
                ..Style::default()
            },
        ))
        .unwrap();
        assert_eq!(json[0]["kind"], "mq");
        assert_eq!(json[0]["root"], true);
        assert_eq!(json[1]["parent"], "7fff:1");
        assert!(json[1].get("root").is_none());
    }
}
