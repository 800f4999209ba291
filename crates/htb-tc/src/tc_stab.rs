//! `qdisc … stab …` (iproute2 `tc/tc_stab.c`): the size table that sets the length a qdisc
//! charges for each packet (sqm-scripts' link-layer adaptation).

use htb_core::SizeSpec;

use crate::words::Words;

use crate::args::{Args, Result, UsageError, illegal, link_layer, matches, u32_arg, usage};

/// `stab_help`.
pub(super) const STAB_USAGE: &str = "\
Usage: ... stab [ mtu BYTES ] [ tsize SLOTS ] [ mpu BYTES ]
                [ overhead BYTES ] [ linklayer TYPE ] ...
   mtu       : max packet size we create rate map for {2047}
   tsize     : how many slots should size table have {512}
   mpu       : minimum packet size used in rate computations
   overhead  : per-packet size overhead used in rate computations
   linklayer : adapting to a linklayer e.g. atm
Example: ... stab overhead 20 linklayer atm";

/// `parse_size_table`: the options after `stab`, up to the first word that is not one (the
/// qdisc's kind, as in `stab overhead 34 linklayer ethernet htb default 10`).
///
/// # Errors
/// tc's usage errors, and a table tc or the kernel would refuse (none of `overhead`, `mpu`
/// and `linklayer`, where tc fails without a word; too many slots; too large cells).
pub(super) fn options(a: &mut Args<'_>) -> Result<SizeSpec> {
    let mut s = SizeSpec::default();
    if a.peek().is_none_or(|w| matches(w, "help")) {
        return usage(STAB_USAGE);
    }
    let duplicate = |what: &str, v: &str| -> Result<()> {
        usage(format!(
            "duplicate \"{what}\": \"{v}\" is the second value."
        ))
    };
    while let Some(w) = a.peek() {
        // Each option takes a value; the first word that is none of them ends the table.
        let known = ["mtu", "mpu", "overhead", "tsize", "linklayer"]
            .into_iter()
            .find(|k| matches(w, k));
        let Some(option) = known else { break };
        a.next();
        let v = a.value()?;
        match option {
            "mtu" => {
                if s.mtu != 0 {
                    duplicate("mtu", v)?;
                }
                s.mtu = u32_arg(v, "mtu", 10)?;
            }
            "mpu" => {
                if s.mpu != 0 {
                    duplicate("mpu", v)?;
                }
                s.mpu = u32_arg(v, "mpu", 10)?;
            }
            "overhead" => {
                if s.overhead != 0 {
                    duplicate("overhead", v)?;
                }
                s.overhead = v.parse().or_else(|_| illegal("overhead"))?;
            }
            "tsize" => {
                if s.tsize != 0 {
                    duplicate("tsize", v)?;
                }
                s.tsize = u32_arg(v, "tsize", 10)?;
            }
            _ => {
                if s.link_layer.is_some() {
                    duplicate("linklayer", v)?;
                }
                s.link_layer = Some(link_layer(v)?);
            }
        }
    }
    // What the kernel would refuse, refused here with its reason.
    s.table().map_err(|e| UsageError(e.to_string()))?;
    Ok(s)
}

/// `stab …`'s words for `s` (the options given, nonzero: [`options`] reads 0 as not given).
pub(crate) fn write(s: &SizeSpec, w: &mut Words) {
    w.word("stab");
    let nonzero = |v: u32| (v != 0).then_some(v);
    w.option("mtu", nonzero(s.mtu));
    w.option("tsize", nonzero(s.tsize));
    w.option("mpu", nonzero(s.mpu));
    w.option("overhead", (s.overhead != 0).then_some(s.overhead));
    w.option("linklayer", s.link_layer);
}

#[cfg(test)]
mod tests {
    use htb_core::LinkLayer;

    use super::*;

    fn parse(line: &str) -> (Result<SizeSpec>, Vec<String>) {
        let words = crate::words::split_words(line);
        let mut a = Args::new(&words);
        let spec = options(&mut a);
        (spec, a.rest().to_vec())
    }

    #[test]
    fn the_options_end_at_the_qdisc_kind() {
        // sqm-scripts' get_stab_string for an Ethernet link with 34 bytes of overhead.
        let (spec, rest) =
            parse("mtu 2047 tsize 512 mpu 0 overhead 34 linklayer ethernet htb default 10");
        assert_eq!(
            spec.unwrap(),
            SizeSpec {
                overhead: 34,
                mtu: 2047,
                tsize: 512,
                link_layer: Some(LinkLayer::Ethernet),
                ..SizeSpec::default()
            }
        );
        assert_eq!(rest, ["htb", "default", "10"]);
        // simplest_vdsl: a negative overhead is a number too; `adsl` is ATM, by prefix.
        let (spec, _) = parse("overhead -4 mpu 64 link ad htb");
        assert_eq!(
            spec.unwrap(),
            SizeSpec {
                overhead: -4,
                mpu: 64,
                link_layer: Some(LinkLayer::Atm),
                ..SizeSpec::default()
            }
        );
    }

    #[test]
    fn what_tc_refuses() {
        let error = |line: &str| parse(line).0.unwrap_err().0;
        assert!(error("htb").contains("needs overhead, mpu or linklayer"));
        assert!(error("mtu 1500 tsize 64 htb").contains("needs overhead"));
        assert!(error("help").contains("Usage: ... stab"));
        assert!(error("overhead 4 overhead 5 htb").contains("duplicate \"overhead\""));
        assert!(error("linklayer foo htb").contains("Illegal \"linklayer\""));
        assert!(error("overhead x htb").contains("Illegal \"overhead\""));
        assert!(error("mpu 64 tsize 40000 htb").contains("at most"));
        assert!(error("overhead 4 mtu").contains("not complete"));
    }
}
