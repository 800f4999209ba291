//! The leaf qdiscs' own printers: `fq_codel_print_opt` / `fq_codel_print_xstats`
//! (`q_fq_codel.c`), `sfq_print_opt` (`q_sfq.c`), `fifo_print_opt` (`q_fifo.c`), as tc 6.1
//! prints them, text and JSON; `cake`'s are in module `cake`.

use std::fmt::Write as _;

use htb_core::LeafConfig;
use htb_core::units::DisplaySize;
use htb_ipc::LeafQdiscStats;
use serde_json::{Map, Value, json};

use super::{cake, time_text};

/// The options after `parent 1:10 ` (tc leaves a space after each of fq_codel's and sfq's).
pub(super) fn options_text(config: &LeafConfig, details: bool) -> String {
    let mut out = String::new();
    match config {
        LeafConfig::Pfifo { limit } => {
            let _ = write!(out, "limit {limit}p");
        }
        LeafConfig::Bfifo { limit } => {
            let _ = write!(out, "limit {}", DisplaySize(u64::from(*limit)));
        }
        LeafConfig::Sfq(c) => {
            let _ = write!(
                out,
                "limit {}p quantum {} depth {} ",
                c.limit,
                DisplaySize(u64::from(c.quantum)),
                c.depth
            );
            if c.headdrop {
                out.push_str("headdrop ");
            }
            if details {
                let _ = write!(out, "flows {} ", c.flows);
            }
            let _ = write!(out, "divisor {} ", c.divisor);
            if c.perturb != 0 {
                let _ = write!(out, "perturb {}sec ", c.perturb);
            }
        }
        LeafConfig::FqCodel(c) => {
            let _ = write!(
                out,
                "limit {}p flows {} quantum {} target {} ",
                c.limit,
                c.flows,
                c.quantum,
                time_text(c.target.as_nanos() / 1000)
            );
            if let Some(ce) = c.ce_threshold {
                let _ = write!(out, "ce_threshold {} ", time_text(ce.as_nanos() / 1000));
            }
            let _ = write!(
                out,
                "interval {} memory_limit {} ",
                time_text(c.interval.as_nanos() / 1000),
                DisplaySize(u64::from(c.memory_limit))
            );
            if c.ecn {
                out.push_str("ecn ");
            }
            let _ = write!(out, "drop_batch {} ", c.drop_batch);
        }
        LeafConfig::Cake(c) => out.push_str(&cake::options_text(c)),
    }
    out
}

/// The options object under `-j` (times in µs and sizes in bytes, as tc's JSON has them).
pub(super) fn options_json(config: &LeafConfig, details: bool) -> Value {
    let mut o = Map::new();
    match config {
        LeafConfig::Pfifo { limit } | LeafConfig::Bfifo { limit } => {
            o.insert("limit".into(), json!(limit));
        }
        LeafConfig::Sfq(c) => {
            o.insert("limit".into(), json!(c.limit));
            o.insert("quantum".into(), json!(c.quantum));
            o.insert("depth".into(), json!(c.depth));
            if c.headdrop {
                o.insert("headdrop".into(), json!(true));
            }
            if details {
                o.insert("flows".into(), json!(c.flows));
            }
            o.insert("divisor".into(), json!(c.divisor));
            if c.perturb != 0 {
                o.insert("perturb".into(), json!(c.perturb));
            }
        }
        LeafConfig::FqCodel(c) => {
            o.insert("limit".into(), json!(c.limit));
            o.insert("flows".into(), json!(c.flows));
            o.insert("quantum".into(), json!(c.quantum));
            o.insert("target".into(), json!(c.target.as_nanos() / 1000));
            if let Some(ce) = c.ce_threshold {
                o.insert("ce_threshold".into(), json!(ce.as_nanos() / 1000));
            }
            o.insert("interval".into(), json!(c.interval.as_nanos() / 1000));
            o.insert("memory_limit".into(), json!(c.memory_limit));
            if c.ecn {
                o.insert("ecn".into(), json!(true));
            }
            o.insert("drop_batch".into(), json!(c.drop_batch));
        }
        LeafConfig::Cake(c) => return cake::options_json(c),
    }
    Value::Object(o)
}

/// The kind's own statistics lines (`print_xstats`): fq_codel's and cake's; none for the
/// others.
pub(super) fn xstats_text(stats: &LeafQdiscStats) -> String {
    if let Some(c) = &stats.cake {
        return cake::xstats_text(c);
    }
    let Some(s) = &stats.fq_codel else {
        return String::new();
    };
    let mut out = format!(
        "  maxpacket {} drop_overlimit {} new_flow_count {} ecn_mark {}",
        s.maxpacket, s.drop_overlimit, s.new_flow_count, s.ecn_mark
    );
    if s.ce_mark != 0 {
        let _ = write!(out, " ce_mark {}", s.ce_mark);
    }
    if s.memory_usage != 0 {
        let _ = write!(out, " memory_used {}", s.memory_usage);
    }
    if s.drop_overmemory != 0 {
        let _ = write!(out, " drop_overmemory {}", s.drop_overmemory);
    }
    let _ = writeln!(
        out,
        "\n  new_flows_len {} old_flows_len {}",
        s.new_flows_len, s.old_flows_len
    );
    out
}

/// The same under `-j`: keys of the qdisc object, as tc prints them.
pub(super) fn xstats_json(stats: &LeafQdiscStats, o: &mut Map<String, Value>) {
    if let Some(c) = &stats.cake {
        cake::xstats_json(c, o);
    }
    let Some(s) = &stats.fq_codel else {
        return;
    };
    for (key, value, always) in [
        ("maxpacket", s.maxpacket, true),
        ("drop_overlimit", s.drop_overlimit, true),
        ("new_flow_count", s.new_flow_count, true),
        ("ecn_mark", s.ecn_mark, true),
        ("ce_mark", s.ce_mark, false),
        ("memory_used", s.memory_usage, false),
        ("drop_overmemory", s.drop_overmemory, false),
        ("new_flows_len", s.new_flows_len, true),
        ("old_flows_len", s.old_flows_len, true),
    ] {
        if always || value != 0 {
            o.insert(key.into(), json!(value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::{LeafSpec, SfqSpec};

    #[test]
    fn options_print_as_tc_6_1() {
        assert_eq!(
            options_text(&LeafConfig::default(), false),
            "limit 10240p flows 1024 quantum 1514 target 5ms interval 100ms memory_limit 32Mb ecn drop_batch 64 "
        );
        let sfq = LeafSpec::Sfq(SfqSpec {
            perturb: Some(10),
            ..SfqSpec::default()
        })
        .resolve()
        .unwrap();
        assert_eq!(
            options_text(&sfq, false),
            "limit 127p quantum 1514b depth 127 divisor 1024 perturb 10sec "
        );
        assert_eq!(
            options_text(&sfq, true),
            "limit 127p quantum 1514b depth 127 flows 128 divisor 1024 perturb 10sec "
        );
        assert_eq!(
            options_text(&LeafConfig::Pfifo { limit: 1000 }, false),
            "limit 1000p"
        );
        assert_eq!(
            options_text(&LeafConfig::Bfifo { limit: 30 * 1024 }, false),
            "limit 30Kb"
        );
        let j = options_json(&LeafConfig::default(), false);
        assert_eq!(j["target"], 5000);
        assert_eq!(j["memory_limit"], 33_554_432);
        assert_eq!(j["ecn"], true);
    }
}
