//! u32 filters (iproute2 `tc/f_u32.c`): the `match ip|ip6|tcp|udp FIELD VALUE MASK`
//! selectors htbd classifies by, as typed matches.

use std::net::IpAddr;

use htb_ipc::FilterSpec;

use super::args::{Args, Result, class_id, illegal, matches, number, usage};
use super::usage::FILTER_USAGE;

/// A value/mask pair on a port as an inclusive range (a mask of contiguous high bits).
pub(super) fn port_range(value: u32, mask: u32, what: &str) -> Result<(u16, u16)> {
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
    Ok((first, first | !mask))
}

pub(super) fn tos_to_dscp(value: u32, mask: u32, what: &str) -> Result<u8> {
    match (u8::try_from(value), mask) {
        (Ok(v), 0xfc | 0xff) => Ok(v >> 2),
        _ => usage(format!(
            "Illegal \"{what}\": only the DSCP bits can be matched (mask 0xfc, or 0xff)"
        )),
    }
}

fn set_once<T>(slot: &mut Option<T>, value: T, what: &str) -> Result<()> {
    if slot.is_some() {
        return usage(format!("Double \"{what}\" match: one per filter"));
    }
    *slot = Some(value);
    Ok(())
}

pub(super) fn prefix(s: &str, v6: bool, what: &str) -> Result<String> {
    let addr = s.split('/').next().unwrap_or(s);
    match addr.parse::<IpAddr>() {
        Ok(ip) if ip.is_ipv6() == v6 => Ok(s.to_owned()),
        _ => illegal(what),
    }
}

/// `parse_u32` / `parse_selector` / `parse_ip` / `parse_ip6`.
///
/// # Errors
/// tc's usage errors.
pub(super) fn options(a: &mut Args<'_>, spec: &mut FilterSpec) -> Result<()> {
    let m = &mut spec.matcher;
    while let Some(w) = a.next() {
        if matches(w, "match") {
            let layer = a.value()?;
            let field = a.value()?;
            match (layer, field) {
                ("ip" | "ip6", "src" | "dst") => {
                    let v6 = layer == "ip6";
                    let p = prefix(a.value()?, v6, "match")?;
                    let slot = if field == "src" {
                        &mut m.src
                    } else {
                        &mut m.dst
                    };
                    set_once(slot, p, field)?;
                }
                ("ip" | "ip6", "sport" | "dport") | ("tcp" | "udp", "src" | "dst") => {
                    let value = number(a.value()?, "match")?;
                    let mask = number(a.value()?, "match")?;
                    let range = port_range(value, mask, field)?;
                    let slot = if matches!(field, "sport" | "src") {
                        &mut m.sport
                    } else {
                        &mut m.dport
                    };
                    set_once(slot, range, field)?;
                }
                ("ip" | "ip6", "protocol") => {
                    let value = number(a.value()?, "match")?;
                    let mask = number(a.value()?, "match")?;
                    let (Ok(p), 0xff) = (u8::try_from(value), mask) else {
                        return usage("Illegal \"protocol\": value 0-255 with mask 0xff");
                    };
                    set_once(&mut m.proto, p, "protocol")?;
                }
                ("ip", "tos" | "dsfield") | ("ip6", "priority") => {
                    let value = number(a.value()?, "match")?;
                    let mask = number(a.value()?, "match")?;
                    set_once(&mut m.dscp, tos_to_dscp(value, mask, field)?, field)?;
                }
                ("u32" | "u16" | "u8", _) => {
                    return usage(format!(
                        "raw \"match {layer}\" offsets are not supported: use match ip/ip6/tcp/udp fields"
                    ));
                }
                _ => {
                    return usage(format!(
                        "Illegal \"match\": \"{layer} {field}\" is not supported"
                    ));
                }
            }
            if layer == "ip6" && spec.protocol == "all" {
                spec.protocol = "ipv6".into();
            }
            if layer == "ip" && spec.protocol == "all" {
                spec.protocol = "ip".into();
            }
        } else if matches(w, "classid") || matches(w, "flowid") {
            spec.class = class_id(a.value()?, "classid")?.to_string();
        } else if w == "skip_hw" || w == "skip_sw" {
        } else if w == "help" {
            return usage(FILTER_USAGE);
        } else if matches(w, "action") || matches(w, "police") {
            return usage(format!(
                "\"{w}\" is not supported: htbd filters only classify"
            ));
        } else {
            return usage(format!("What is \"{w}\"?\n{FILTER_USAGE}"));
        }
    }
    Ok(())
}
