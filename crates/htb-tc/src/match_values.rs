//! The values of a filter's match as tc writes them, read the same way by u32's selectors and
//! flower's keys: an address prefix of one family, a port value/mask as a range, a TOS
//! value/mask as a DSCP.

use htb_ipc::{IpPrefix, PortRange};

use crate::args::{Result, illegal, usage};

/// A value/mask pair on a port as an inclusive range (a mask of contiguous high bits).
pub(super) fn port_range(value: u32, mask: u32, what: &str) -> Result<PortRange> {
    let (Ok(value), Ok(mask)) = (u16::try_from(value), u16::try_from(mask)) else {
        return illegal(what);
    };
    // Contiguous high bits: !mask + 1 is a power of two (or mask is 0: any port).
    let span = u32::from(!mask) + 1;
    if !span.is_power_of_two() {
        return usage(format!(
            "Illegal \"{what}\": mask {mask:#06x} is not a prefix of the port, so it is not a port range"
        ));
    }
    let first = value & mask;
    Ok(PortRange {
        first,
        last: first | !mask,
    })
}

pub(super) fn tos_to_dscp(value: u32, mask: u32, what: &str) -> Result<u8> {
    match (u8::try_from(value), mask) {
        (Ok(v), 0xfc | 0xff) => Ok(v >> 2),
        _ => usage(format!(
            "Illegal \"{what}\": only the DSCP bits can be matched (mask 0xfc, or 0xff)"
        )),
    }
}

/// An address prefix of the family `v6` says (`get_prefix`), parsed once, as htbd keeps it.
pub(super) fn prefix(s: &str, v6: bool, what: &str) -> Result<IpPrefix> {
    match s.parse::<IpPrefix>() {
        Ok(p) if p.addr().is_ipv6() == v6 => Ok(p),
        _ => illegal(what),
    }
}
