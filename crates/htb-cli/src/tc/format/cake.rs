//! `cake`'s printers (`q_cake.c`: `cake_print_opt`, `cake_print_xstats`): its options, and with
//! `-s` the memory and length figures and the per-tin table, text and JSON.

use std::fmt::Write as _;

use htb_core::units::DisplaySize;
use htb_core::{AckFilter, AtmMode, CakeConfig, CakeStats, CakeTinStats};
use serde_json::{Map, Value, json};

use super::{rate_text, time_text};

/// The options after `root ` or `parent 1:10 `.
pub(super) fn options_text(c: &CakeConfig) -> String {
    let mut out = String::new();
    let bits = c.bandwidth.bits_per_sec();
    if bits == 0 {
        out.push_str("bandwidth unlimited ");
    } else {
        let _ = write!(out, "bandwidth {} ", rate_text(bits, false));
    }
    if c.autorate_ingress {
        out.push_str("autorate-ingress ");
    }
    let _ = write!(out, "{} {} ", c.diffserv.name(), c.flow_mode.name());
    out.push_str(if c.nat { "nat " } else { "nonat " });
    out.push_str(if c.wash { "wash " } else { "nowash " });
    if c.ingress {
        out.push_str("ingress ");
    }
    let _ = write!(out, "{} ", c.ack_filter.name());
    out.push_str(if c.split_gso {
        "split-gso "
    } else {
        "no-split-gso "
    });
    let _ = write!(out, "rtt {} ", time_text(c.rtt.as_nanos() / 1000));
    let raw = !c.overhead_set;
    if raw {
        out.push_str("raw ");
    }
    match c.atm {
        AtmMode::Atm => out.push_str("atm "),
        AtmMode::Ptm => out.push_str("ptm "),
        _ if !raw => out.push_str("noatm "),
        _ => {}
    }
    let _ = write!(out, "overhead {} ", c.overhead);
    if c.mpu != 0 {
        let _ = write!(out, "mpu {} ", c.mpu);
    }
    if c.memlimit != 0 {
        let _ = write!(out, "memlimit {} ", DisplaySize(u64::from(c.memlimit)));
    }
    if c.fwmark != 0 {
        let _ = write!(out, "fwmark {:#x} ", c.fwmark);
    }
    out
}

/// The options object under `-j`, with tc's keys (the bandwidth in bytes per second).
pub(super) fn options_json(c: &CakeConfig) -> Value {
    let mut o = Map::new();
    let bytes = c.bandwidth.bytes_per_sec();
    o.insert(
        "bandwidth".into(),
        if bytes == 0 {
            json!("unlimited")
        } else {
            json!(bytes)
        },
    );
    if c.autorate_ingress {
        o.insert("autorate".into(), json!("autorate-ingress"));
    }
    o.insert("diffserv".into(), json!(c.diffserv.name()));
    o.insert("flowmode".into(), json!(c.flow_mode.name()));
    o.insert("nat".into(), json!(c.nat));
    o.insert("wash".into(), json!(c.wash));
    o.insert("ingress".into(), json!(c.ingress));
    let ack = match c.ack_filter {
        AckFilter::Aggressive => "aggressive",
        AckFilter::Filter => "enabled",
        _ => "disabled",
    };
    o.insert("ack-filter".into(), json!(ack));
    o.insert("split_gso".into(), json!(c.split_gso));
    o.insert("rtt".into(), json!(c.rtt.as_nanos() / 1000));
    let raw = !c.overhead_set;
    o.insert("raw".into(), json!(raw));
    match c.atm {
        AtmMode::Atm => {
            o.insert("atm".into(), json!("atm"));
        }
        AtmMode::Ptm => {
            o.insert("atm".into(), json!("ptm"));
        }
        _ if !raw => {
            o.insert("atm".into(), json!("noatm"));
        }
        _ => {}
    }
    o.insert("overhead".into(), json!(c.overhead));
    if c.mpu != 0 {
        o.insert("mpu".into(), json!(c.mpu));
    }
    if c.memlimit != 0 {
        o.insert("memlimit".into(), json!(c.memlimit));
    }
    o.insert("fwmark".into(), json!(format!("{:#x}", c.fwmark)));
    Value::Object(o)
}

/// One row of the tin table: a 10-character name, then each tin's value right-aligned in 12.
fn row(
    out: &mut String,
    name: &str,
    tins: &[CakeTinStats],
    value: impl Fn(&CakeTinStats) -> String,
) {
    out.push_str(name);
    for t in tins {
        let _ = write!(out, " {:>12}", value(t));
    }
    out.push('\n');
}

/// `cake_print_xstats`: memory, capacity and length figures, then a column per tin.
pub(super) fn xstats_text(s: &CakeStats) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        " memory used: {} of {}",
        DisplaySize(u64::from(s.memory_used)),
        DisplaySize(u64::from(s.memory_limit))
    );
    let _ = writeln!(
        out,
        " capacity estimate: {}",
        rate_text(s.capacity_estimate.bits_per_sec(), false)
    );
    let _ = writeln!(
        out,
        " min/max network layer size: {:>12} /{:>8}",
        s.min_network_size, s.max_network_size
    );
    let _ = writeln!(
        out,
        " min/max overhead-adjusted size: {:>8} /{:>8}",
        s.min_adj_size, s.max_adj_size
    );
    let _ = writeln!(
        out,
        " average network hdr offset: {:>12}\n",
        s.avg_hdr_offset
    );
    let tins = &s.tins;
    match tins.len() {
        3 => out.push_str("                   Bulk  Best Effort        Voice\n"),
        4 => out.push_str("                   Bulk  Best Effort        Video        Voice\n"),
        n => {
            out.push_str("          ");
            for i in 0..n {
                let _ = write!(out, "        Tin {i}");
            }
            out.push('\n');
        }
    }
    let time = |d: htb_core::Duration| time_text(d.as_nanos() / 1000);
    row(&mut out, "  thresh  ", tins, |t| {
        rate_text(t.threshold_rate.bits_per_sec(), false)
    });
    row(&mut out, "  target  ", tins, |t| time(t.target));
    row(&mut out, "  interval", tins, |t| time(t.interval));
    row(&mut out, "  pk_delay", tins, |t| time(t.peak_delay));
    row(&mut out, "  av_delay", tins, |t| time(t.avg_delay));
    row(&mut out, "  sp_delay", tins, |t| time(t.base_delay));
    row(&mut out, "  backlog ", tins, |t| {
        DisplaySize(u64::from(t.backlog_bytes)).to_string()
    });
    row(&mut out, "  pkts    ", tins, |t| t.sent_packets.to_string());
    row(&mut out, "  bytes   ", tins, |t| t.sent_bytes.to_string());
    row(&mut out, "  way_inds", tins, |t| {
        t.way_indirect_hits.to_string()
    });
    row(&mut out, "  way_miss", tins, |t| t.way_misses.to_string());
    row(&mut out, "  way_cols", tins, |t| {
        t.way_collisions.to_string()
    });
    row(&mut out, "  drops   ", tins, |t| t.drops.to_string());
    row(&mut out, "  marks   ", tins, |t| t.ecn_marks.to_string());
    row(&mut out, "  ack_drop", tins, |t| t.ack_drops.to_string());
    row(&mut out, "  sp_flows", tins, |t| t.sparse_flows.to_string());
    row(&mut out, "  bk_flows", tins, |t| t.bulk_flows.to_string());
    row(&mut out, "  un_flows", tins, |t| {
        t.unresponsive_flows.to_string()
    });
    row(&mut out, "  max_len ", tins, |t| t.max_pkt_len.to_string());
    row(&mut out, "  quantum ", tins, |t| t.flow_quantum.to_string());
    out
}

/// The same under `-j`: keys of the qdisc object and a `tins` array.
pub(super) fn xstats_json(s: &CakeStats, o: &mut Map<String, Value>) {
    o.insert("memory_used".into(), json!(s.memory_used));
    o.insert("memory_limit".into(), json!(s.memory_limit));
    o.insert(
        "capacity_estimate".into(),
        json!(s.capacity_estimate.bytes_per_sec()),
    );
    o.insert("min_network_size".into(), json!(s.min_network_size));
    o.insert("max_network_size".into(), json!(s.max_network_size));
    o.insert("min_adj_size".into(), json!(s.min_adj_size));
    o.insert("max_adj_size".into(), json!(s.max_adj_size));
    o.insert("avg_hdr_offset".into(), json!(s.avg_hdr_offset));
    let us = |d: htb_core::Duration| d.as_nanos() / 1000;
    let tins: Vec<Value> = s
        .tins
        .iter()
        .map(|t| {
            json!({
                "threshold_rate": t.threshold_rate.bytes_per_sec(),
                "sent_bytes": t.sent_bytes,
                "backlog_bytes": t.backlog_bytes,
                "target_us": us(t.target),
                "interval_us": us(t.interval),
                "peak_delay_us": us(t.peak_delay),
                "avg_delay_us": us(t.avg_delay),
                "base_delay_us": us(t.base_delay),
                "sent_packets": t.sent_packets,
                "way_indirect_hits": t.way_indirect_hits,
                "way_misses": t.way_misses,
                "way_collisions": t.way_collisions,
                "drops": t.drops,
                "ecn_mark": t.ecn_marks,
                "ack_drops": t.ack_drops,
                "sparse_flows": t.sparse_flows,
                "bulk_flows": t.bulk_flows,
                "unresponsive_flows": t.unresponsive_flows,
                "max_pkt_len": t.max_pkt_len,
                "flow_quantum": t.flow_quantum,
            })
        })
        .collect();
    o.insert("tins".into(), Value::Array(tins));
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::{CakeSpec, Duration, LeafConfig, LeafSpec, Rate};

    fn config(spec: CakeSpec) -> CakeConfig {
        match LeafSpec::Cake(spec).resolve().unwrap() {
            LeafConfig::Cake(c) => c,
            _ => unreachable!(),
        }
    }

    #[test]
    fn options_print_as_tc_testing_expects() {
        // tc-testing 1212: the defaults.
        assert_eq!(
            options_text(&CakeConfig::default()),
            "bandwidth unlimited diffserv3 triple-isolate nonat nowash no-ack-filter split-gso \
             rtt 100ms raw overhead 0 "
        );
        // 3281, 6572, 2436, 3984.
        let c = config(CakeSpec {
            bandwidth: Some(Rate::from_bits_per_sec(1000)),
            ..CakeSpec::default()
        });
        assert!(options_text(&c).starts_with("bandwidth 1Kbit diffserv3"));
        let c = config(CakeSpec {
            memlimit: Some(10_000),
            atm: Some(AtmMode::Ptm),
            ..CakeSpec::default()
        });
        assert!(options_text(&c).ends_with("rtt 100ms raw ptm overhead 0 memlimit 10000b "));
        let c = config(CakeSpec {
            fwmark: Some(8),
            atm: Some(AtmMode::Atm),
            ..CakeSpec::default()
        });
        assert!(options_text(&c).ends_with("raw atm overhead 0 fwmark 0x8 "));
        let c = config(CakeSpec {
            overhead: Some(128),
            mpu: Some(256),
            rtt: Some(Duration::from_micros(200)),
            ..CakeSpec::default()
        });
        assert!(options_text(&c).ends_with("rtt 200us noatm overhead 128 mpu 256 "));
        let j = options_json(&c);
        assert_eq!(
            (j["overhead"].clone(), j["raw"].clone()),
            (json!(128), json!(false))
        );
        assert_eq!(j["bandwidth"], "unlimited");
    }

    #[test]
    fn the_tin_table_lines_up_under_its_header() {
        let s = CakeStats {
            memory_limit: 4 << 20,
            tins: vec![CakeTinStats::default(); 3],
            ..CakeStats::default()
        };
        let text = xstats_text(&s);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], " memory used: 0b of 4Mb");
        assert_eq!(
            lines[6],
            "                   Bulk  Best Effort        Voice"
        );
        assert_eq!(
            lines[7],
            "  thresh           0bit         0bit         0bit"
        );
        assert_eq!(lines[6].len(), lines[7].len());
        assert!(lines.iter().any(|l| l.starts_with("  ack_drop")));
    }
}
