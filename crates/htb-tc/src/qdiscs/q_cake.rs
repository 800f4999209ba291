//! `cake` (iproute2 `tc/q_cake.c`): its options (`cake_parse_opt`: keywords, the RTT presets
//! and the link-layer presets, sent as the netlink attributes tc sends, so that `qdisc change`
//! touches only what the command line names) and its printers (`cake_print_opt`,
//! `cake_print_xstats`: its options, and with `-s` the memory and length figures and the
//! per-tin table, text and JSON).

use std::fmt::Write as _;

use htb_core::units::{DisplaySize, parse_rate};
use htb_core::{
    AckFilter, AtmMode, CakeConfig, CakeSpec, CakeStats, CakeTinStats, DiffservMode, Duration,
    FlowMode, LeafSpec,
};
use serde_json::{Map, Value, json};

use crate::args::{Args, Result, size_arg, time_arg, usage};
use crate::units::{rate_text, time_text};
use crate::words::{self, RateWord, Words, WriteError};

/// Usage of `cake`.
pub(super) const USAGE: &str = "\
Usage: ... cake [ bandwidth RATE | unlimited* | autorate-ingress ]
                [ rtt TIME | datacentre | lan | metro | regional |
                  internet* | oceanic | satellite | interplanetary ]
                [ besteffort | diffserv8 | diffserv4 | diffserv3* ]
                [ flowblind | srchost | dsthost | hosts | flows |
                  dual-srchost | dual-dsthost | triple-isolate* ]
                [ nat | nonat* ]
                [ wash | nowash* ]
                [ split-gso* | no-split-gso ]
                [ ack-filter | ack-filter-aggressive | no-ack-filter* ]
                [ memlimit LIMIT ]
                [ fwmark MASK ]
                [ ptm | atm | noatm* ] [ overhead N | conservative | raw* ]
                [ mpu N ] [ ingress | egress* ]
                (* marks defaults)";

/// The RTT presets: name, target and interval in µs (`presets[]`).
const PRESETS: [(&str, u64, u64); 8] = [
    ("datacentre", 5, 100),
    ("lan", 50, 1000),
    ("metro", 500, 10_000),
    ("regional", 1500, 30_000),
    ("internet", 5000, 100_000),
    ("oceanic", 15_000, 300_000),
    ("satellite", 50_000, 1_000_000),
    ("interplanetary", 50_000_000, 1_000_000_000),
];

/// The framing presets that add to `overhead`: name, cell framing, bytes.
const FRAMING: [(&str, AtmMode, i32); 10] = [
    // ADSL, over ATM cells.
    ("ipoa-vcmux", AtmMode::Atm, 8),
    ("ipoa-llcsnap", AtmMode::Atm, 16),
    ("bridged-vcmux", AtmMode::Atm, 24),
    ("bridged-llcsnap", AtmMode::Atm, 32),
    ("pppoa-vcmux", AtmMode::Atm, 10),
    ("pppoa-llc", AtmMode::Atm, 14),
    ("pppoe-vcmux", AtmMode::Atm, 32),
    ("pppoe-llcsnap", AtmMode::Atm, 40),
    // VDSL2, over PTM: 2 PPP + 6 PPPoE + 14 Ethernet + 4 FCS + 2 framing + 2 TC-CRC; the
    // bridged one without PPP.
    ("pppoe-ptm", AtmMode::Ptm, 30),
    ("bridged-ptm", AtmMode::Ptm, 22),
];

/// A signed or unsigned number as `strtol(…, 10)` reads it, within `range`.
fn ranged(v: &str, what: &str, range: std::ops::RangeInclusive<i32>) -> Result<i32> {
    match v.parse::<i32>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => usage(format!(
            "Illegal \"{what}\", valid range is {} to {}",
            range.start(),
            range.end()
        )),
    }
}

/// `cake_parse_opt`.
///
/// # Errors
/// tc's usage errors.
pub(super) fn options(a: &mut Args<'_>) -> Result<LeafSpec> {
    let mut s = CakeSpec::default();
    let mut preset_set: Option<&str> = None;
    let (mut overhead, mut overhead_set) = (0i32, false);
    let mut mpu = 0i32;
    let mut diffserv = DiffservMode::Diffserv3;
    let mut interval_us = 0u64;
    let mut target_us = 0u64;
    while let Some(w) = a.next() {
        match w {
            "bandwidth" => {
                let v = a.value()?;
                let rate = parse_rate(v).or_else(|_| usage("Illegal \"bandwidth\""))?;
                s.bandwidth = Some(rate);
                s.autorate_ingress = Some(false);
            }
            "unlimited" => {
                s.bandwidth = Some(htb_core::Rate::ZERO);
                s.autorate_ingress = Some(false);
            }
            "autorate-ingress" => s.autorate_ingress = Some(true),
            "rtt" => {
                let t = time_arg(a.value()?, "rtt")?;
                interval_us = t.as_nanos() / 1000;
                target_us = (interval_us / 20).max(1);
            }
            "besteffort" => diffserv = DiffservMode::Besteffort,
            "precedence" => diffserv = DiffservMode::Precedence,
            "diffserv8" => diffserv = DiffservMode::Diffserv8,
            "diffserv4" | "diffserv" => diffserv = DiffservMode::Diffserv4,
            "diffserv3" => diffserv = DiffservMode::Diffserv3,
            "nowash" => s.wash = Some(false),
            "wash" => s.wash = Some(true),
            "split-gso" => s.split_gso = Some(true),
            "no-split-gso" => s.split_gso = Some(false),
            "flowblind" => s.flow_mode = Some(FlowMode::Flowblind),
            "srchost" => s.flow_mode = Some(FlowMode::Srchost),
            "dsthost" => s.flow_mode = Some(FlowMode::Dsthost),
            "hosts" => s.flow_mode = Some(FlowMode::Hosts),
            "flows" => s.flow_mode = Some(FlowMode::Flows),
            "dual-srchost" => s.flow_mode = Some(FlowMode::DualSrchost),
            "dual-dsthost" => s.flow_mode = Some(FlowMode::DualDsthost),
            "triple-isolate" => s.flow_mode = Some(FlowMode::TripleIsolate),
            "nat" => s.nat = Some(true),
            "nonat" => s.nat = Some(false),
            "ptm" => s.atm = Some(AtmMode::Ptm),
            "atm" => s.atm = Some(AtmMode::Atm),
            "noatm" => s.atm = Some(AtmMode::None),
            "raw" => {
                s.atm = Some(AtmMode::None);
                overhead = 0;
                overhead_set = true;
                s.raw = true;
            }
            // One whole ATM cell plus ATM framing: safe when the real overhead is unknown.
            "conservative" => {
                s.atm = Some(AtmMode::Atm);
                overhead = 48;
                overhead_set = true;
            }
            // Ignored by the kernel now (it compensates for the Ethernet header itself).
            "via-ethernet" => {}
            // Preamble, inter-frame gap and FCS.
            "ethernet" => {
                overhead += 38;
                overhead_set = true;
                mpu = 84;
            }
            "ether-vlan" => {
                overhead += 4;
                overhead_set = true;
            }
            // DOCSIS shapers count the Ethernet frame with its FCS, not gap or preamble.
            "docsis" => {
                s.atm = Some(AtmMode::None);
                overhead += 18;
                overhead_set = true;
                mpu = 64;
            }
            "overhead" => {
                overhead = ranged(a.value()?, "overhead", -64..=256)?;
                overhead_set = true;
            }
            "mpu" => mpu = ranged(a.value()?, "mpu", 0..=256)?,
            "ingress" => s.ingress = Some(true),
            "egress" => s.ingress = Some(false),
            "no-ack-filter" => s.ack_filter = Some(AckFilter::Off),
            "ack-filter" => s.ack_filter = Some(AckFilter::Filter),
            "ack-filter-aggressive" => s.ack_filter = Some(AckFilter::Aggressive),
            "memlimit" => {
                let v = a.value()?;
                let limit = size_arg(v, "memlimit")
                    .or_else(|_| usage(format!("Illegal value for \"memlimit\": \"{v}\"")))?;
                s.memlimit = Some(limit).filter(|&l| l != 0);
            }
            "fwmark" => {
                let v = a.value()?;
                let mask = parse_u32_auto(v).ok_or_else(|| {
                    crate::args::UsageError(format!("Illegal value for \"fwmark\": \"{v}\""))
                })?;
                s.fwmark = Some(mask);
            }
            "help" => return usage(USAGE),
            w => {
                if let Some(&(name, target, interval)) = PRESETS.iter().find(|p| p.0 == w) {
                    if let Some(first) = preset_set {
                        return usage(format!(
                            "Error: duplicate \"{name}\": \"{first}\" is the second value."
                        ));
                    }
                    preset_set = Some(name);
                    target_us = target;
                    interval_us = interval;
                } else if let Some(&(_, atm, bytes)) = FRAMING.iter().find(|f| f.0 == w) {
                    s.atm = Some(atm);
                    overhead += bytes;
                    overhead_set = true;
                } else {
                    return usage(format!("What is \"{w}\"?\n{USAGE}"));
                }
            }
        }
    }
    // What cake_parse_opt sends: diffserv3 is 0, which it leaves out, as it leaves out a
    // zero mpu, rtt, target or memlimit.
    s.diffserv = (diffserv != DiffservMode::Diffserv3).then_some(diffserv);
    s.overhead = overhead_set.then_some(overhead);
    s.mpu = u32::try_from(mpu).ok().filter(|&m| m > 0);
    s.rtt = (interval_us != 0).then(|| Duration::from_micros(interval_us));
    s.target = (target_us != 0).then(|| Duration::from_micros(target_us));
    Ok(LeafSpec::Cake(s))
}

/// `get_u32(…, 0)`: decimal, `0x` hexadecimal or leading-zero octal.
fn parse_u32_auto(v: &str) -> Option<u32> {
    if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16).ok()
    } else if v.len() > 1 && v.starts_with('0') {
        u32::from_str_radix(&v[1..], 8).ok()
    } else {
        v.parse().ok()
    }
}

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
    let time = |d: Duration| time_text(d.as_nanos() / 1000);
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
    let us = |d: Duration| d.as_nanos() / 1000;
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

/// `cake_parse_opt`'s words for the options given. The grammar sets some options together,
/// so a spec is written the way [`options`] makes it: `bandwidth` (or `unlimited`) sets
/// `autorate_ingress` off, `raw` sets the ATM mode off and the overhead to 0 (both written
/// after it), and the target follows the RTT (a preset's, or `rtt`'s twentieth).
///
/// # Errors
/// A target that neither a preset nor `rtt` gives, or options set apart that the grammar
/// sets together.
pub(super) fn write(s: &CakeSpec, w: &mut Words) -> words::Result<()> {
    let refuse = |what| Err(WriteError::LeafOptions { kind: "cake", what });
    match (s.bandwidth, s.autorate_ingress) {
        (Some(r), _) if r == htb_core::Rate::ZERO => w.word("unlimited"),
        (Some(r), _) => w.pair("bandwidth", RateWord(r)),
        (None, Some(false)) => return refuse("autorate-ingress off is said by a bandwidth"),
        (None, _) => {}
    }
    if s.autorate_ingress == Some(true) {
        w.word("autorate-ingress");
    }
    let us = |d: Duration| d.as_nanos() / 1000;
    match (s.rtt, s.target) {
        (None, None) => {}
        (Some(rtt), Some(target)) => {
            if let Some(p) = PRESETS.iter().find(|p| p.2 == us(rtt) && p.1 == us(target)) {
                w.word(p.0);
            } else if rtt.as_nanos() % 1000 == 0 && us(target) == (us(rtt) / 20).max(1) {
                w.pair("rtt", rtt);
            } else {
                return refuse("its target is neither a preset's nor its rtt's twentieth");
            }
        }
        _ => return refuse("rtt and target are set together"),
    }
    if let Some(d) = s.diffserv {
        if d == DiffservMode::Diffserv3 {
            return refuse("diffserv3 is the default, which tc leaves out");
        }
        w.word(d.name());
    }
    if let Some(m) = s.flow_mode {
        w.word(m.name());
    }
    for (flag, on, off) in [
        (s.nat, "nat", "nonat"),
        (s.wash, "wash", "nowash"),
        (s.split_gso, "split-gso", "no-split-gso"),
        (s.ingress, "ingress", "egress"),
    ] {
        match flag {
            Some(true) => w.word(on),
            Some(false) => w.word(off),
            None => {}
        }
    }
    if let Some(a) = s.ack_filter {
        w.word(a.name());
    }
    w.option("memlimit", s.memlimit);
    w.option("fwmark", s.fwmark.map(|m| format!("{m:#x}")));
    if s.raw {
        if s.overhead.is_none() || s.atm.is_none() {
            return refuse("raw sets the overhead (to 0) and the ATM mode (off)");
        }
        w.word("raw");
    }
    if let Some(a) = s.atm {
        w.word(a.name());
    }
    w.option("overhead", s.overhead);
    w.option("mpu", s.mpu);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::{CakeConfig, LeafConfig, Rate};

    fn parse(line: &str) -> Result<CakeSpec> {
        let words = words::split_words(line);
        match options(&mut Args::new(&words))? {
            LeafSpec::Cake(s) => Ok(s),
            _ => unreachable!(),
        }
    }

    fn resolved(line: &str) -> CakeConfig {
        match LeafSpec::Cake(parse(line).unwrap()).resolve().unwrap() {
            LeafConfig::Cake(c) => c,
            _ => unreachable!(),
        }
    }

    #[test]
    fn keywords_and_presets_send_what_tc_sends() {
        let s = parse("bandwidth 20mbit diffserv4 dual-dsthost nat ack-filter").unwrap();
        assert_eq!(s.bandwidth, Some(Rate::from_mbit(20)));
        assert_eq!(
            s.autorate_ingress,
            Some(false),
            "bandwidth turns autorate off"
        );
        assert_eq!(s.diffserv, Some(DiffservMode::Diffserv4));
        assert_eq!(s.flow_mode, Some(FlowMode::DualDsthost));
        assert_eq!(s.ack_filter, Some(AckFilter::Filter));
        assert_eq!(s.rtt, None);
        assert_eq!(parse("diffserv3").unwrap().diffserv, None, "0 is not sent");
        // rtt: target is a twentieth.
        let c = resolved("rtt 200");
        assert_eq!(
            (c.rtt, c.target),
            (Duration::from_micros(200), Duration::from_micros(10))
        );
        let c = resolved("satellite");
        assert_eq!(
            (c.rtt, c.target),
            (Duration::from_secs(1), Duration::from_millis(50))
        );
        assert!(parse("lan metro").unwrap_err().0.contains("duplicate"));
    }

    #[test]
    fn framing_presets_add_up() {
        let c = resolved("pppoe-ptm ether-vlan");
        assert_eq!(
            (c.atm, c.overhead, c.overhead_set),
            (AtmMode::Ptm, 34, true)
        );
        let c = resolved("ethernet");
        assert_eq!((c.overhead, c.mpu), (38, 84));
        let c = resolved("docsis");
        assert_eq!((c.atm, c.overhead, c.mpu), (AtmMode::None, 18, 64));
        let c = resolved("conservative");
        assert_eq!((c.atm, c.overhead), (AtmMode::Atm, 48));
        let c = resolved("overhead 18 raw");
        assert_eq!((c.overhead, c.overhead_set), (0, false), "raw wins");
        assert_eq!(resolved("fwmark 0x8").fwmark, 8);
        assert_eq!(resolved("memlimit 10000").memlimit, 10_000);
    }

    #[test]
    fn bad_values_say_what_tc_says() {
        assert_eq!(
            parse("overhead 300").unwrap_err().0,
            "Illegal \"overhead\", valid range is -64 to 256"
        );
        assert_eq!(
            parse("mpu -1").unwrap_err().0,
            "Illegal \"mpu\", valid range is 0 to 256"
        );
        assert_eq!(
            parse("bandwidth fast").unwrap_err().0,
            "Illegal \"bandwidth\""
        );
        assert!(
            parse("fwmark x")
                .unwrap_err()
                .0
                .contains("Illegal value for \"fwmark\"")
        );
        assert!(
            parse("diffserv5")
                .unwrap_err()
                .0
                .starts_with("What is \"diffserv5\"?")
        );
        assert!(parse("rtt").unwrap_err().0.contains("not complete"));
    }
}

#[cfg(test)]
mod print_tests {
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
