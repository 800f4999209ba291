//! HTB's options (iproute2 `tc/q_htb.c`): the qdisc's (`htb_parse_opt`) and a class's
//! (`htb_parse_class_opt`).

use std::sync::LazyLock;

use htb_core::units::{UnitError, parse_rate_or_percent, parse_size};
use htb_ipc::{ClassId, ClassSpec, InterfaceName, QdiscSpec, Rate};

use crate::args::{Args, Result, illegal, link_layer, matches, u16_arg, u32_arg, usage};
use crate::link_speed::LinkSpeed;
use crate::words::{RateWord, Words};

/// `tc qdisc … htb` usage, the leaf kinds listed from their table (made once).
pub(super) fn qdisc_usage() -> &'static str {
    static USAGE: LazyLock<String> = LazyLock::new(|| {
        format!(
            "\
Usage: htb-cli qdisc [ add | del | replace | change | show ] dev STRING
       [ handle QHANDLE ] {{ root | parent MQ-CLASSID }} htb [ default MINOR-ID ] [ r2q N ]
       [ direct_qlen P ]
       htb-cli qdisc {{ add | replace }} dev STRING [ handle QHANDLE ] root mq
       htb-cli qdisc {{ add | change | replace | del }} dev STRING {{ parent CLASSID | root }}
       [ handle QHANDLE ] {{ {} }} [ OPTIONS ]
       htb-cli qdisc add dev STRING handle ffff: ingress
       htb-cli qdisc {{ show | list }} [ dev STRING ] [ invisible ]",
            crate::qdiscs::usage_list()
        )
    });
    &USAGE
}

/// `tc class … htb` usage.
pub(super) const CLASS_USAGE: &str = "\
Usage: htb-cli class [ add | del | change | replace | show ] dev STRING
       [ classid CLASSID ] [ root | parent CLASSID ] htb rate R1 [ burst B1 ] [ mpu B ]
       [ overhead O ] [ prio P ] [ ceil R2 ] [ cburst B2 ] [ mtu MTU ] [ quantum Q ]
       [ linklayer { ethernet | atm | adsl } ]
       htb-cli class label dev STRING classid CLASSID [ name TEXT ] ... (see class label help)
 rate     rate allocated to this class (class can still borrow)
 burst    max bytes burst which can be accumulated during idle period {computed}
 mpu      minimum packet size used in rate computations
 overhead per-packet size overhead used in rate computations
 linklay  adapting to a linklayer e.g. atm
 ceil     definite upper class rate (no borrows) {rate}
 cburst   burst but for ceil {computed}
 mtu      max packet size we create rate map for {1600}
 prio     priority of leaf; lower are served first {0}
 quantum  how much bytes to serve from leaf at once {use r2q}";

/// `htb_parse_opt`.
///
/// # Errors
/// tc's usage errors.
pub(super) fn qdisc_options(a: &mut Args<'_>, spec: &mut QdiscSpec) -> Result<()> {
    while let Some(w) = a.next() {
        if matches(w, "r2q") {
            spec.r2q = Some(u32_arg(a.value()?, "r2q", 10)?);
        } else if matches(w, "default") {
            spec.default_minor = Some(u32_arg(a.value()?, "default", 16)?);
        } else if matches(w, "debug") {
            let _ = a.value()?;
        } else if matches(w, "direct_qlen") {
            spec.direct_qlen = Some(u32_arg(a.value()?, "direct_qlen", 10)?);
        } else if matches(w, "offload") {
            return usage("\"offload\" is not supported: htbd shapes in software");
        } else if w == "help" {
            return usage(qdisc_usage());
        } else {
            return usage(format!("What is \"{w}\"?\n{}", qdisc_usage()));
        }
    }
    Ok(())
}

/// `htb_parse_class_opt`; `link_speed` answers tc's sysfs read for `N%` rates.
///
/// # Errors
/// tc's usage errors.
pub(crate) fn class_options(
    a: &mut Args<'_>,
    dev: &InterfaceName,
    link_speed: LinkSpeed<'_>,
) -> Result<ClassSpec> {
    // The id and rate are set once all the words are read.
    let mut spec = ClassSpec::new(dev.clone(), ClassId::default(), Rate::default());
    let mut rate = None;
    let rate_arg = |s: &str, what: &str| -> Result<Rate> {
        let speed = if s.ends_with('%') {
            link_speed(dev)
        } else {
            None
        };
        match parse_rate_or_percent(s, speed) {
            Ok(r) => Ok(r),
            Err(UnitError::PercentWithoutLinkSpeed) => usage(format!(
                "Illegal \"{what}\": cannot read the speed of {dev} for \"{s}\""
            )),
            Err(_) => illegal(what),
        }
    };
    // Sizes may carry tc's "/CELL" (legacy rate tables): accepted, ignored.
    let size_arg = |s: &str, what: &str| -> Result<u64> {
        let size = s.split('/').next().unwrap_or(s);
        parse_size(size).or_else(|_| illegal(what))
    };
    while let Some(w) = a.next() {
        if matches(w, "prio") {
            spec.prio = Some(u32_arg(a.value()?, "prio", 10)?);
        } else if matches(w, "mtu") {
            spec.mtu = Some(u32_arg(a.value()?, "mtu", 10)?);
        } else if matches(w, "mpu") {
            spec.mpu = Some(u16_arg(a.value()?, "mpu")?);
        } else if matches(w, "overhead") {
            spec.overhead = Some(u16_arg(a.value()?, "overhead")?);
        } else if matches(w, "linklayer") {
            spec.linklayer = Some(link_layer(a.value()?)?);
        } else if matches(w, "quantum") {
            spec.quantum = Some(u32_arg(a.value()?, "quantum", 10)?);
        } else if matches(w, "burst") || w == "buffer" || w == "maxburst" {
            spec.burst = Some(size_arg(a.value()?, "buffer")?);
        } else if matches(w, "cburst") || w == "cbuffer" || w == "cmaxburst" {
            spec.cburst = Some(size_arg(a.value()?, "cbuffer")?);
        } else if w == "ceil" {
            if spec.ceil.is_some() {
                return usage("Double \"ceil\" spec");
            }
            spec.ceil = Some(rate_arg(a.value()?, "ceil")?);
        } else if w == "rate" {
            if rate.is_some() {
                return usage("Double \"rate\" spec");
            }
            rate = Some(rate_arg(a.value()?, "rate")?);
        } else if w == "help" {
            return usage(CLASS_USAGE);
        } else {
            return usage(format!("What is \"{w}\"?\n{CLASS_USAGE}"));
        }
    }
    let Some(rate) = rate else {
        return usage("\"rate\" is required.");
    };
    spec.rate = rate;
    Ok(spec)
}

/// `htb_parse_opt`'s words for `spec` (its options only; the qdisc's place is `tc_qdisc`'s).
pub(crate) fn write_qdisc(spec: &QdiscSpec, w: &mut Words) {
    // tc reads `default` in hex.
    w.option("default", spec.default_minor.map(|m| format!("{m:x}")));
    w.option("r2q", spec.r2q);
    w.option("direct_qlen", spec.direct_qlen);
}

/// `htb_parse_class_opt`'s words for `spec`: rates exact, sizes in bytes.
pub(crate) fn write_class(spec: &ClassSpec, w: &mut Words) {
    w.pair("rate", RateWord(spec.rate));
    w.option("ceil", spec.ceil.map(RateWord));
    w.option("burst", spec.burst);
    w.option("cburst", spec.cburst);
    w.option("prio", spec.prio);
    w.option("quantum", spec.quantum);
    w.option("mtu", spec.mtu);
    w.option("overhead", spec.overhead);
    w.option("mpu", spec.mpu);
    w.option("linklayer", spec.linklayer);
}
