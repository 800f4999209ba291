//! `police …` on a u32 or flower filter, and `action police …` (iproute2 `tc/m_police.c`,
//! `act_parse_police`): a token bucket the filter's matches pass through.

use htb_core::units::{parse_rate, parse_size};
use htb_core::{LengthAdjust, Rate};
use htb_ipc::{ControlAction, PoliceConfig};

use crate::args::{Args, Result, illegal, link_layer, matches, usage};
use crate::words::{RateWord, Words};

/// `m_police.c`'s usage.
pub(super) const POLICE_USAGE: &str = "\
Usage: ... police [ rate BPS burst BYTES[/BYTES] ] [ mtu BYTES[/BYTES] ]
		[ peakrate BPS ] [ overhead BYTES ] [ mpu BYTES ]
		[ linklayer TYPE ] [ CONTROL ]
Where: CONTROL := conform-exceed <EXCEEDACT>[/NOTEXCEEDACT]
		  Define how to handle packets which exceed (<EXCEEDACT>)
		  or conform (<NOTEXCEEDACT>) the configured bandwidth limit.
       EXCEEDACT/NOTEXCEEDACT := { pipe | ok | reclassify | drop | continue }";

/// A verdict word (`parse_action_control`).
fn verdict(word: &str) -> Result<ControlAction> {
    if matches(word, "goto") || word == "jump" {
        return usage(format!(
            "police verdict \"{word}\" is not supported: htbd has one filter chain (use pipe, ok, reclassify, drop or continue)"
        ));
    }
    ControlAction::parse(word).map_or_else(
        || {
            usage(format!(
                "Illegal \"{word}\": a police verdict is pipe, ok, reclassify, drop or continue"
            ))
        },
        Ok,
    )
}

/// The options after `police` (the word itself read), up to the first word that is none of
/// them (`flowid …`, the next match).
///
/// # Errors
/// tc's usage errors, what `act_parse_police` refuses, and the forms htbd lacks (`index`,
/// `avrate`, `pkts_rate`) named.
pub(super) fn options(a: &mut Args<'_>) -> Result<PoliceConfig> {
    let mut p = PoliceConfig::default();
    let mut adjust = LengthAdjust::default();
    let mut given = 0;
    let size = |s: &str, what: &str| -> Result<u32> {
        // tc's "/CELL" (a rate table's cell size) is accepted and has no use here.
        let bytes = s.split('/').next().unwrap_or(s);
        parse_size(bytes)
            .ok()
            .and_then(|b| u32::try_from(b).ok())
            .map_or_else(|| illegal(what), Ok)
    };
    let rate = |s: &str, what: &str| -> Result<Rate> { parse_rate(s).or_else(|_| illegal(what)) };
    while let Some(w) = a.peek() {
        if matches(w, "burst") || w == "buffer" || w == "maxburst" {
            a.next();
            let v = a.value()?;
            if p.burst != 0 {
                return usage(format!(
                    "duplicate \"buffer/burst\": \"{v}\" is the second value."
                ));
            }
            p.burst = size(v, "buffer")?;
        } else if w == "mtu" || w == "minburst" {
            a.next();
            let v = a.value()?;
            if p.mtu != 0 {
                return usage(format!(
                    "duplicate \"mtu/minburst\": \"{v}\" is the second value."
                ));
            }
            p.mtu = size(v, "mtu")?;
        } else if w == "mpu" {
            a.next();
            let v = size(a.value()?, "mpu")?;
            adjust.mpu = u16::try_from(v).or_else(|_| illegal("mpu"))?;
        } else if w == "rate" {
            a.next();
            let v = a.value()?;
            if p.rate.is_some() {
                return usage(format!("duplicate \"rate\": \"{v}\" is the second value."));
            }
            p.rate = Some(rate(v, "rate")?);
        } else if matches(w, "peakrate") {
            a.next();
            let v = a.value()?;
            if p.peakrate.is_some() {
                return usage(format!(
                    "duplicate \"peakrate\": \"{v}\" is the second value."
                ));
            }
            p.peakrate = Some(rate(v, "peakrate")?);
        } else if matches(w, "overhead") {
            a.next();
            adjust.overhead = a.value()?.parse().or_else(|_| illegal("overhead"))?;
        } else if matches(w, "linklayer") {
            a.next();
            adjust.link_layer = link_layer(a.value()?)?;
        } else if w == "conform-exceed" {
            a.next();
            let v = a.value()?;
            // EXCEED[/CONFORM] (`parse_action_control_slash`).
            let (exceed, conform) = match v.split_once('/') {
                Some((e, c)) => (e, Some(c)),
                None => (v, None),
            };
            p.exceed = verdict(exceed)?;
            if let Some(c) = conform {
                p.conform = verdict(c)?;
            }
        } else if [
            "reclassify",
            "drop",
            "shot",
            "continue",
            "pass",
            "ok",
            "pipe",
            "goto",
        ]
        .iter()
        .any(|k| matches(w, k))
        {
            a.next();
            p.exceed = verdict(w)?;
        } else if w == "index" {
            return usage(
                "police index: shared policer instances (tc actions add) are not supported; give each filter its own police",
            );
        } else if w == "avrate" {
            return usage(
                "police avrate polices by a rate estimator, which htbd's filters do not keep: use rate and burst",
            );
        } else if matches(w, "pkts_rate") || matches(w, "pkts_burst") {
            return usage(
                "police pkts_rate/pkts_burst (packets per second) are not supported: use rate and burst",
            );
        } else if w == "help" {
            return usage(POLICE_USAGE);
        } else {
            break;
        }
        given += 1;
    }
    if given == 0 {
        return usage(POLICE_USAGE);
    }
    p.adjust = adjust;
    p.check()
        .map_err(|e| crate::args::UsageError(e.to_string()))?;
    Ok(p)
}

/// `action police …`'s words for `p` (after `police`): what differs from tc's defaults.
pub(crate) fn write(p: &PoliceConfig, w: &mut Words) {
    w.option("rate", p.rate.map(RateWord));
    w.option("burst", (p.burst != 0).then_some(p.burst));
    w.option("mtu", (p.mtu != 0).then_some(p.mtu));
    w.option("peakrate", p.peakrate.map(RateWord));
    let a = p.adjust;
    w.option("overhead", (a.overhead != 0).then_some(a.overhead));
    w.option("mpu", (a.mpu != 0).then_some(a.mpu));
    if a.link_layer != htb_core::LinkLayer::default() {
        w.pair("linklayer", a.link_layer);
    }
    let default = PoliceConfig::default();
    if p.conform != default.conform {
        w.pair(
            "conform-exceed",
            format_args!("{}/{}", p.exceed.name(), p.conform.name()),
        );
    } else if p.exceed != default.exceed {
        w.pair("conform-exceed", p.exceed.name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> (Result<PoliceConfig>, Vec<String>) {
        let words = crate::words::split_words(line);
        let mut a = Args::new(&words);
        let p = options(&mut a);
        (p, a.rest().to_vec())
    }

    #[test]
    fn the_options_m_police_reads() {
        // wondershaper 1.1a's ingress policer, and its flowid after it.
        let (p, rest) = parse("rate 2048kbit burst 10k drop flowid :1");
        let p = p.unwrap();
        assert_eq!(p.rate, Some(Rate::from_kbit(2048)));
        assert_eq!(
            (p.burst, p.exceed, p.conform),
            (10 * 1024, ControlAction::Drop, ControlAction::Ok)
        );
        assert_eq!(rest, ["flowid", ":1"]);
        // Everything at once; conform-exceed's two verdicts in one word.
        let (p, _) = parse(
            "rate 10mbit burst 20k/8 mtu 9000 peakrate 20mbit overhead 4 mpu 64 linklayer atm conform-exceed continue/pipe",
        );
        let p = p.unwrap();
        assert_eq!((p.mtu, p.peakrate), (9000, Some(Rate::from_mbit(20))));
        assert_eq!((p.adjust.overhead, p.adjust.mpu), (4, 64));
        assert_eq!(p.adjust.link_layer, htb_core::LinkLayer::Atm);
        assert_eq!(
            (p.exceed, p.conform),
            (ControlAction::Continue, ControlAction::Pipe)
        );
        // tc's default exceed verdict is reclassify.
        let (p, _) = parse("rate 1mbit burst 10k");
        assert_eq!(p.unwrap().exceed, ControlAction::Reclassify);
    }

    #[test]
    fn what_tc_refuses_and_what_htbd_lacks() {
        let error = |line: &str| parse(line).0.unwrap_err().0;
        assert!(error("rate 1mbit").contains("'burst' requires 'rate'"));
        assert!(error("burst 10k").contains("MUST be specified"));
        assert!(error("rate 1mbit burst 10k peakrate 2mbit").contains("'mtu' is required"));
        assert!(error("rate 1mbit burst 10k rate 2mbit").contains("duplicate \"rate\""));
        assert!(
            error("rate 1mbit burst 10k conform-exceed goto chain 1").contains("one filter chain")
        );
        assert!(error("index 3").contains("shared policer"));
        assert!(error("avrate 1mbit").contains("rate estimator"));
        assert!(error("rate fast burst 10k").contains("Illegal \"rate\""));
        assert!(error("flowid 1:1").contains("Usage: ... police"));
    }
}
