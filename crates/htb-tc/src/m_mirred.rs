//! `action mirred egress redirect dev IFB` (iproute2 `tc/m_mirred.c`): on a filter of an ingress
//! qdisc, it sends what the filter matches through an IFB's tree before the frame goes on to
//! its egress port, as sqm-scripts and wondershaper shape a download. Mirroring (a copy) and
//! redirects to an interface's ingress are refused, naming what htbd does instead.

use htb_ipc::InterfaceName;

use crate::args::{Args, Result, interface, usage};
use crate::words::{self, Words};

const MIRRED_USAGE: &str = "Usage: mirred <DIRECTION> <ACTION> [index INDEX] <dev DEVICENAME>
where:
\tDIRECTION := egress (htbd: egress only)
\tACTION := redirect (htbd: redirect only)
\tDEVICENAME is the IFB device to redirect to";

/// Reads the words after `mirred`; returns the device redirected to.
///
/// # Errors
/// What `m_mirred.c` refuses, and mirroring or ingress redirects.
pub(super) fn options(a: &mut Args<'_>) -> Result<InterfaceName> {
    let mut direction = None;
    let mut redirect = None;
    let mut dev = None;
    while let Some(w) = a.peek() {
        match w {
            "egress" | "ingress" if direction.is_none() => {
                direction = Some(w == "egress");
                a.next();
            }
            "redirect" | "mirror" if redirect.is_none() => {
                redirect = Some(w == "redirect");
                a.next();
            }
            "dev" => {
                a.next();
                dev = Some(interface(a.value()?)?);
            }
            "index" => {
                return usage(
                    "mirred index: shared actions are not supported (give each filter its own)",
                );
            }
            // What follows the action is the filter's again (flowid, a second action …).
            _ => break,
        }
    }
    match (direction, redirect, dev) {
        (Some(true), Some(true), Some(dev)) => Ok(dev),
        (Some(false), _, _) => usage(
            "mirred ingress (to a device's ingress) is not supported: htbd redirects to an IFB's egress (mirred egress redirect dev ifbN)",
        ),
        (_, Some(false), _) => usage(
            "mirred mirror (a copy) is not supported: htbd redirects the frame itself (mirred egress redirect dev ifbN)",
        ),
        (None, _, _) | (_, None, _) => usage(format!(
            "bad mirred: expected egress redirect\n{MIRRED_USAGE}"
        )),
        (_, _, None) => usage(format!(
            "mirred needs a device (dev DEVICENAME)\n{MIRRED_USAGE}"
        )),
    }
}

/// `action mirred …`'s words (after `mirred`): the one form htbd takes.
///
/// # Errors
/// A device name no tc line can carry.
pub(crate) fn write(dev: &str, w: &mut Words) -> words::Result<()> {
    w.word("egress");
    w.word("redirect");
    w.dev(dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> (Result<InterfaceName>, Vec<String>) {
        let words = words::split_words(line);
        let mut a = Args::new(&words);
        let r = options(&mut a);
        (r, a.rest().to_vec())
    }

    #[test]
    fn egress_redirect_names_the_ifb() {
        let (dev, rest) = parse("egress redirect dev ifb4eth0 flowid 1:1");
        assert_eq!(dev.unwrap(), "ifb4eth0");
        assert_eq!(rest, ["flowid", "1:1"]);
    }

    #[test]
    fn mirroring_and_ingress_redirects_are_refused_with_a_reason() {
        let error = |line: &str| parse(line).0.unwrap_err().0;
        assert!(error("egress mirror dev ifb0").contains("copy"));
        assert!(error("ingress redirect dev eth1").contains("IFB"));
        assert!(error("egress redirect").contains("needs a device"));
        assert!(error("redirect dev ifb0").contains("bad mirred"));
        assert!(error("egress redirect index 3 dev ifb0").contains("shared"));
    }
}
