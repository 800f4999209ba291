//! `cake` options (iproute2 `tc/q_cake.c`, `cake_parse_opt`): keywords, the RTT presets and the
//! link-layer presets, sent as the netlink attributes tc sends, so that `qdisc change` touches
//! only what the command line names.

use htb_core::units::parse_rate;
use htb_core::{AckFilter, AtmMode, CakeSpec, DiffservMode, Duration, FlowMode, LeafSpec};

use super::args::{Args, Result, size_arg, time_arg, usage};

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
                    super::args::UsageError(format!("Illegal value for \"fwmark\": \"{v}\""))
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

#[cfg(test)]
mod tests {
    use super::*;
    use htb_core::{CakeConfig, LeafConfig, Rate};

    fn parse(line: &str) -> Result<CakeSpec> {
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
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
