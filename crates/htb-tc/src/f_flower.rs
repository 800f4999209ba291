//! flower filters (iproute2 `tc/f_flower.c`): the keys htbd classifies by.

use htb_ipc::{FilterSpec, PortRange, Protocol};

use crate::args::{Args, Result, class_id, illegal, matches, number, u16_arg, usage};
use crate::match_values::{prefix, tos_to_dscp};
use crate::usage::FILTER_USAGE;
use crate::words::{self, Words, WriteError};

/// `flower_parse_opt`.
///
/// # Errors
/// tc's usage errors.
pub(super) fn options(a: &mut Args<'_>, spec: &mut FilterSpec) -> Result<()> {
    let m = &mut spec.matcher;
    let ip = matches!(spec.protocol, Protocol::Ip | Protocol::Ipv6);
    while let Some(w) = a.next() {
        if matches(w, "classid") || matches(w, "flowid") {
            spec.class = Some(class_id(a.value()?, "classid")?);
        } else if w == "skip_hw" || w == "skip_sw" {
        } else if matches(w, "vlan_id") {
            if spec.protocol != Protocol::Dot1q {
                return usage("Can't set \"vlan_id\" if ethertype isn't 802.1Q or 802.1AD");
            }
            let v = u16_arg(a.value()?, "vlan_id")?;
            if v > htb_ipc::Match::MAX_VLAN {
                return illegal("vlan_id");
            }
            m.vlan = Some(v);
        } else if matches(w, "ip_proto") {
            if !ip {
                return usage("Illegal \"eth_type\" for ip proto");
            }
            let v = a.value()?;
            m.proto = Some(match v {
                "tcp" => 6,
                "udp" => 17,
                "sctp" => 132,
                "icmp" => 1,
                "icmpv6" => 58,
                n => u8::try_from(number(n, "ip_proto")?).or_else(|_| illegal("ip_proto"))?,
            });
        } else if matches(w, "ip_tos") {
            let v = a.value()?;
            let (value, mask) = v.split_once('/').unwrap_or((v, "0xff"));
            m.dscp = Some(tos_to_dscp(
                number(value, "ip_tos")?,
                number(mask, "ip_tos")?,
                "ip_tos",
            )?);
        } else if matches(w, "dst_ip") || matches(w, "src_ip") {
            if !ip {
                return usage(format!("Illegal \"eth_type\" for {w}"));
            }
            let p = prefix(a.value()?, spec.protocol == Protocol::Ipv6, w)?;
            if w.starts_with("dst") {
                m.dst = Some(p);
            } else {
                m.src = Some(p);
            }
        } else if matches(w, "dst_port") || matches(w, "src_port") {
            if !matches!(m.proto, Some(6 | 17 | 132)) {
                return usage(
                    "Illegal \"ip_proto\" for port: give ip_proto tcp, udp or sctp first",
                );
            }
            let v = a.value()?;
            let port = |s: &str| u16_arg(s, w);
            let (first, last) = match v.split_once('-') {
                Some((lo, hi)) => (port(lo)?, port(hi)?),
                None => (port(v)?, port(v)?),
            };
            if first > last {
                return illegal(w);
            }
            let range = PortRange { first, last };
            if w.starts_with("dst") {
                m.dport = Some(range);
            } else {
                m.sport = Some(range);
            }
        } else if w == "help" {
            return usage(FILTER_USAGE);
        } else if matches(w, "action") {
            crate::m_action::action(a, &mut spec.police, &mut spec.redirect)?;
        } else {
            return usage(format!("What is \"{w}\"?\n{FILTER_USAGE}"));
        }
    }
    Ok(())
}

/// `flower_parse_opt`'s words for `spec` (after `flower`; the class and actions are
/// `tc_filter`'s): `ip_proto` before the ports, which need it.
///
/// # Errors
/// What flower cannot say: u32's hash tables and general keys.
pub(crate) fn write(spec: &FilterSpec, w: &mut Words) -> words::Result<()> {
    let m = &spec.matcher;
    let refuse = |what| {
        Err(WriteError::NotInKind {
            kind: "flower",
            what,
        })
    };
    if !spec.hashing.is_empty() {
        return refuse("u32's hash tables (ht, link, hashkey, divisor)");
    }
    if !m.raw.as_slice().is_empty() {
        return refuse("u32's general keys (match u32 … at …)");
    }
    w.option("vlan_id", m.vlan);
    w.option("src_ip", m.src);
    w.option("dst_ip", m.dst);
    if let Some(p) = m.proto {
        match p {
            6 => w.pair("ip_proto", "tcp"),
            17 => w.pair("ip_proto", "udp"),
            132 => w.pair("ip_proto", "sctp"),
            1 => w.pair("ip_proto", "icmp"),
            58 => w.pair("ip_proto", "icmpv6"),
            n => w.pair("ip_proto", n),
        }
    }
    for (key, range) in [("src_port", m.sport), ("dst_port", m.dport)] {
        match range {
            Some(r) if r.first == r.last => w.pair(key, r.first),
            Some(r) => w.pair(key, format_args!("{}-{}", r.first, r.last)),
            None => {}
        }
    }
    if let Some(d) = m.dscp {
        w.pair("ip_tos", format_args!("{:#04x}/0xfc", u32::from(d) << 2));
    }
    Ok(())
}
