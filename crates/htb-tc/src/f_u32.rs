//! u32 filters (iproute2 `tc/f_u32.c`): the `match ip|ip6|tcp|udp FIELD VALUE MASK`
//! selectors htbd classifies by, as typed matches; raw `u32|u16|u8 … at OFF` keys and the hash
//! tables (`divisor`, `ht`, `link`, `hashkey`, `sample`) are read in `u32_keys`.

use htb_ipc::{FilterHandle, FilterSpec, HashKey, PortRange, Protocol, U32Handle};

use crate::args::{Args, Result, UsageError, class_id, illegal, mask, matches, number, usage};
use crate::match_values::{port_range, prefix, tos_to_dscp};
use crate::u32_keys::{self, RawKeys};
use crate::usage::FILTER_USAGE;
use crate::words::{self, Words, WriteError};

fn set_once<T>(slot: &mut Option<T>, value: T, what: &str) -> Result<()> {
    if slot.is_some() {
        return usage(format!("Double \"{what}\" match: one per filter"));
    }
    *slot = Some(value);
    Ok(())
}

/// `parse_u32` / `parse_selector` / `parse_ip` / `parse_ip6`.
///
/// # Errors
/// tc's usage errors.
/// A filter's handle as the kernel's `u32_change` files it: a node written alone
/// (`handle 0x65`, or `::65`) goes into the bucket `ht` names (`htid | TC_U32_NODE(handle)`);
/// a handle naming another table or bucket is the kernel's "hash table address mismatch".
fn placed_handle(text: &str, table: Option<(u32, u32)>) -> Result<FilterHandle> {
    let handle = U32Handle(u32_keys::u32_handle(text, "handle")?);
    let placed = match table {
        Some((table, bucket)) => handle.in_bucket(table, bucket).ok_or_else(|| {
            UsageError(format!(
                "Illegal \"handle\": {handle} is not in hash table {table:x}: bucket {bucket:x} (ht names it)"
            ))
        })?,
        None => handle,
    };
    Ok(FilterHandle(placed.0))
}

/// `handle` is the text tc's generic part read before `u32` (or `None`): u32 may read its own
/// after, and places it in the table `ht` names.
pub(super) fn options(
    a: &mut Args<'_>,
    spec: &mut FilterSpec,
    mut handle: Option<String>,
) -> Result<()> {
    let mut raw_keys = RawKeys::default();
    let mut sample_bucket = None;
    let m = &mut spec.matcher;
    while let Some(w) = a.next() {
        if matches(w, "divisor") {
            let d = number(a.value()?, "divisor")?;
            if d == 0 || d > 0x100 || !d.is_power_of_two() {
                return illegal("divisor");
            }
            spec.hashing.divisor = Some(d);
        } else if w == "ht" {
            spec.hashing.table = Some(u32_keys::table(a.value()?)?);
        } else if matches(w, "link") {
            spec.hashing.link = Some(u32_keys::link(a.value()?)?);
        } else if matches(w, "hashkey") {
            if a.value()? != "mask" {
                return usage("Illegal \"hashkey\": hashkey mask MASK at OFFSET");
            }
            // tc reads the mask in hex (get_u32(…, 16)), the offset in any base.
            let mask = mask(a.value()?, "hashkey mask")?;
            if a.value()? != "at" {
                return usage("Illegal \"hashkey\": hashkey mask MASK at OFFSET");
            }
            let at = number(a.value()?, "hashkey at")?;
            if at % 4 != 0 {
                return usage("Illegal \"hashkey\": the offset must be a multiple of 4");
            }
            spec.hashing.hashkey = Some(HashKey { mask, at });
        } else if matches(w, "sample") {
            let key = match a.value()? {
                "ip" => match a.value()? {
                    field @ ("src" | "dst") => u32_keys::ip_key(field, a.value()?)?,
                    _ => return usage("Illegal \"sample\": sample ip src|dst PREFIX"),
                },
                width @ ("u32" | "u16" | "u8") => u32_keys::raw(a, width)?,
                _ => {
                    return usage(
                        "Illegal \"sample\": sample ip src|dst PREFIX, or sample u32|u16|u8 VALUE MASK at OFFSET",
                    );
                }
            };
            let mut divisor = 0x100;
            if a.rest().first().is_some_and(|w| w == "divisor") {
                a.next();
                divisor = number(a.value()?, "divisor")?;
                if divisor == 0 || divisor > 0x100 || !divisor.is_power_of_two() {
                    return usage("Illegal sample \"divisor\"");
                }
            }
            sample_bucket = Some(key.fold() % divisor);
        } else if matches(w, "offset") {
            return usage(
                "\"offset\" is not supported: htbd finds the transport header itself (IPv4 options and IPv6 included), so tcp/udp matches and nexthdr+ offsets need no offset",
            );
        } else if matches(w, "match") {
            let layer = a.value()?;
            if matches!(layer, "u32" | "u16" | "u8") {
                raw_keys.push(u32_keys::raw(a, layer)?);
                continue;
            }
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
                    let mask = mask(a.value()?, "match")?;
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
                    let mask = mask(a.value()?, "match")?;
                    match (u8::try_from(value), mask) {
                        // A zero mask matches every packet (sqm-scripts' catch-all
                        // `match ip protocol 0 0x00`): no constraint.
                        (Ok(_), 0) => {}
                        (Ok(p), 0xff) => set_once(&mut m.proto, p, "protocol")?,
                        _ => {
                            return usage(
                                "Illegal \"protocol\": value 0-255 with mask 0xff (or 0: any)",
                            );
                        }
                    }
                }
                ("ip", "tos" | "dsfield") | ("ip6", "priority") => {
                    let value = number(a.value()?, "match")?;
                    let mask = mask(a.value()?, "match")?;
                    set_once(&mut m.dscp, tos_to_dscp(value, mask, field)?, field)?;
                }
                _ => {
                    return usage(format!(
                        "Illegal \"match\": \"{layer} {field}\" is not supported"
                    ));
                }
            }
            if layer == "ip6" && spec.protocol == Protocol::All {
                spec.protocol = Protocol::Ipv6;
            }
            if layer == "ip" && spec.protocol == Protocol::All {
                spec.protocol = Protocol::Ip;
            }
        } else if w == "handle" {
            // f_u32.c reads `handle` among its own options too (`… u32 ht 3:2: handle 0x65`).
            handle = Some(a.value()?.to_owned());
        } else if matches(w, "classid") || matches(w, "flowid") {
            spec.class = Some(class_id(a.value()?, "classid")?);
        } else if w == "skip_hw" || w == "skip_sw" {
        } else if w == "help" {
            return usage(FILTER_USAGE);
        } else if matches(w, "action") {
            crate::m_action::action(a, &mut spec.police, &mut spec.redirect)?;
        } else if matches(w, "police") {
            // f_u32.c's own `police` (the legacy form, TCA_U32_POLICE).
            spec.police = Some(Box::new(crate::m_police::options(a)?));
        } else {
            return usage(format!("What is \"{w}\"?\n{FILTER_USAGE}"));
        }
    }
    if let Some(text) = handle {
        spec.handle = Some(placed_handle(&text, spec.hashing.table)?);
    }
    if let Some(bucket) = sample_bucket {
        let Some((table, _)) = spec.hashing.table else {
            return usage(
                "\"sample\" places the filter in a bucket of the table given by \"ht\": give ht too",
            );
        };
        spec.hashing.table = Some((table, bucket));
    }
    if !raw_keys.is_empty() {
        let v6 = spec.protocol == Protocol::Ipv6;
        raw_keys.into_match(v6, &mut spec.matcher)?;
        // Keys that became IPv4 header fields make it an IPv4 filter; keys that stay raw
        // (or, with a zero mask, match everything) keep tc's protocol, `all` included.
        let m = &spec.matcher;
        let fields = m.src.is_some()
            || m.dst.is_some()
            || m.proto.is_some()
            || m.sport.is_some()
            || m.dport.is_some()
            || m.dscp.is_some();
        if spec.protocol == Protocol::All && fields {
            spec.protocol = Protocol::Ip;
        }
    }
    if spec.hashing.divisor.is_some()
        && (spec.hashing.table.is_some()
            || spec.hashing.link.is_some()
            || !spec.matcher.is_empty()
            || spec.class.is_some())
    {
        return usage("\"divisor\" makes a hash table: it takes no match, ht, link or classid");
    }
    Ok(())
}

/// The `match ip|ip6 …` layer of a filter's typed fields: `ip6` for an IPv6 filter or
/// addresses, `ip` otherwise (an `ip` match makes a filter of protocol `all` an `ip` one, as
/// [`options`] reads it).
fn layer(spec: &FilterSpec) -> &'static str {
    let m = &spec.matcher;
    let v6 = spec.protocol == Protocol::Ipv6
        || [m.src, m.dst]
            .into_iter()
            .flatten()
            .any(|p| p.addr().is_ipv6());
    if v6 { "ip6" } else { "ip" }
}

/// A port range as u32's value and mask (a block of contiguous low bits).
fn port_words(range: PortRange) -> words::Result<(u16, u16)> {
    let span = u32::from(range.last - range.first) + 1;
    if range.first > range.last || !span.is_power_of_two() || u32::from(range.first) % span != 0 {
        return Err(WriteError::PortRange(range));
    }
    // `span` is at most 65536: its complement's low half is the mask.
    let mask = u16::try_from(0x1_0000 - span).unwrap_or(0);
    Ok((range.first, mask))
}

/// `parse_u32`'s words for `spec` (after `u32`; the handle is `tc_filter`'s, the class and
/// actions too): the hash-table parts, then the matches, typed fields as `match ip|ip6 …` and
/// general keys as `match u32 VALUE MASK at [nexthdr+]OFF`.
///
/// # Errors
/// What u32 cannot say: a VLAN, a port range that is no value/mask block.
pub(crate) fn write(spec: &FilterSpec, w: &mut Words) -> words::Result<()> {
    let h = &spec.hashing;
    w.option("divisor", h.divisor);
    if let Some((table, bucket)) = h.table {
        w.pair("ht", format_args!("{table:x}:{bucket:x}:"));
    }
    let m = &spec.matcher;
    if m.vlan.is_some() {
        return Err(WriteError::NotInKind {
            kind: "u32",
            what: "a VLAN id (flower's vlan_id does)",
        });
    }
    let layer = layer(spec);
    for (field, prefix) in [("src", m.src), ("dst", m.dst)] {
        if let Some(p) = prefix {
            let l = if p.addr().is_ipv6() { "ip6" } else { "ip" };
            w.word("match");
            w.pair(l, field);
            w.word(p);
        }
    }
    for (field, range) in [("sport", m.sport), ("dport", m.dport)] {
        if let Some(r) = range {
            let (value, mask) = port_words(r)?;
            w.word("match");
            w.pair(layer, field);
            w.word(value);
            w.word(format_args!("{mask:#06x}"));
        }
    }
    if let Some(p) = m.proto {
        w.word("match");
        w.pair(layer, "protocol");
        w.word(p);
        w.word("0xff");
    }
    if let Some(d) = m.dscp {
        w.word("match");
        w.pair(layer, if layer == "ip6" { "priority" } else { "tos" });
        w.word(format_args!("{:#04x}", u32::from(d) << 2));
        w.word("0xfc");
    }
    for k in m.raw.as_slice() {
        w.word("match");
        w.word("u32");
        w.word(format_args!("{:#010x}", k.value));
        w.word(format_args!("{:#010x}", k.mask));
        w.pair(
            "at",
            format_args!("{}{}", if k.nexthdr { "nexthdr+" } else { "" }, k.at),
        );
    }
    let keyless = m.src.is_none()
        && m.dst.is_none()
        && m.sport.is_none()
        && m.dport.is_none()
        && m.proto.is_none()
        && m.dscp.is_none()
        && m.raw.is_empty();
    if keyless && h.divisor.is_none() {
        // tc's `parse_u32` sends a selector (TCA_U32_SEL) only when a `match` is given, and
        // the kernel's `u32_change` refuses a filter without one ("Selector not specified"):
        // a filter matching everything says so with a key of zero mask, which reads back as
        // no key.
        w.word("match");
        w.word("u32");
        w.word(0);
        w.word(0);
    }
    if let Some(link) = h.link {
        w.pair("link", format_args!("{link:x}:"));
    }
    if let Some(k) = h.hashkey {
        w.word("hashkey");
        w.pair("mask", format_args!("{:#010x}", k.mask));
        w.pair("at", k.at);
    }
    Ok(())
}
