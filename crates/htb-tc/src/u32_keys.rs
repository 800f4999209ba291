//! u32's raw selectors (`match u32|u16|u8 VALUE MASK at [nexthdr+]OFF`, iproute2's
//! `parse_u32`/`parse_u16`/`parse_u8` and `pack_key`) read as the header fields htbd classifies
//! by, and the hash-table words `ht`, `link`, `hashkey`, `sample` (`parse_u32` in `f_u32.c`).
//!
//! A raw key is a 32-bit word of the network header (or, with `nexthdr+`, of the transport
//! header), a mask and a value. Keys on the IPv4/IPv6 addresses (prefix masks), the protocol,
//! the DSCP bits or the ports (prefix masks) become those fields, which the compiled
//! classifier looks up by hash; any other key (wondershaper's "small ACK" filter reads the
//! header length, the total length and the TCP flags) stays a general key (`Match::raw`,
//! at most four words per filter, keys at one word merged as tc's `pack_key` merges them),
//! which htbd checks against the packet's bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use htb_ipc::{IpPrefix, Match, U32Handle};

use crate::args::{Args, Result, illegal, mask, number, usage};
use crate::match_values::{port_range, tos_to_dscp};

/// One 32-bit key, in host order, as `pack_key` builds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RawKey {
    /// Byte offset of the word (a multiple of 4).
    pub(super) at: u32,
    /// Whether `at` counts from the transport header (`nexthdr+`).
    pub(super) nexthdr: bool,
    pub(super) mask: u32,
    pub(super) value: u32,
}

impl RawKey {
    /// u32's hash fold of this key (iproute2's `u32_hash_fold`, as `sample` uses it).
    pub(super) fn fold(&self) -> u32 {
        let shift = if self.mask == 0 {
            0
        } else {
            self.mask.trailing_zeros()
        };
        (self.value & self.mask) >> shift
    }
}

/// `u32|u16|u8 VALUE MASK [at [nexthdr+]OFF]` after the width word; without `at` the offset
/// is 0, as tc's `parse_u32` has it (`match u32 0 0`, sqm-scripts' catch-all).
pub(super) fn raw(a: &mut Args<'_>, width: &str) -> Result<RawKey> {
    let value = number(a.value()?, "match")?;
    let mask = mask(a.value()?, "match")?;
    let off = if a.rest().first().is_some_and(|w| w == "at") {
        a.next();
        a.value()?
    } else {
        "0"
    };
    let (nexthdr, off) = match off.strip_prefix("nexthdr+") {
        Some(rest) => (true, rest),
        None => (false, off),
    };
    let off = number(off, "at")?;
    let (bits, align) = match width {
        "u32" => (32, 4),
        "u16" => (16, 2),
        _ => (8, 1),
    };
    if off % align != 0 {
        return usage(format!(
            "Illegal \"at {off}\": a {width} key must be {align}-byte aligned"
        ));
    }
    let limit = if bits == 32 {
        u32::MAX
    } else {
        (1 << bits) - 1
    };
    if value > limit || mask > limit {
        return usage(format!(
            "Illegal \"match {width}\": value or mask wider than {bits} bits"
        ));
    }
    // pack_key16 / pack_key8: the key's place within its 32-bit word, big-endian.
    let shift = 32 - bits - (off % 4) * 8;
    Ok(RawKey {
        at: off - off % 4,
        nexthdr,
        mask: mask << shift,
        value: (value & mask) << shift,
    })
}

/// The key `match ip src|dst PREFIX` makes (for `sample`).
pub(super) fn ip_key(field: &str, prefix: &str) -> Result<RawKey> {
    let (addr, len) = prefix.split_once('/').unwrap_or((prefix, "32"));
    let (Ok(addr), Ok(len)) = (addr.parse::<Ipv4Addr>(), len.parse::<u32>()) else {
        return illegal("sample");
    };
    if len > 32 {
        return illegal("sample");
    }
    let mask = !u32::MAX.checked_shr(len).unwrap_or(0);
    Ok(RawKey {
        at: if field == "src" { 12 } else { 16 },
        nexthdr: false,
        mask,
        value: u32::from(addr) & mask,
    })
}

/// Keys gathered for one filter, then read as fields.
#[derive(Debug, Default)]
pub(super) struct RawKeys(Vec<RawKey>);

/// A 128-bit address being built from its words.
#[derive(Default)]
struct Address {
    mask: u128,
    value: u128,
}

impl Address {
    fn add(&mut self, word: u32, k: &RawKey) {
        let shift = 96 - 32 * word;
        self.mask |= u128::from(k.mask) << shift;
        self.value |= u128::from(k.value) << shift;
    }

    /// The keys as a prefix: `None` without keys, `Some(None)` when the mask is not leading
    /// ones (those keys stay general keys).
    fn prefix(&self, v6: bool) -> Option<Option<IpPrefix>> {
        if self.mask == 0 {
            return None;
        }
        let len = self.mask.leading_ones();
        if self.mask.checked_shl(len).unwrap_or(0) != 0 {
            return Some(None);
        }
        let addr = if v6 {
            IpAddr::V6(Ipv6Addr::from(self.value))
        } else {
            IpAddr::V4(Ipv4Addr::from((self.value >> 96) as u32))
        };
        Some(IpPrefix::new(addr, u8::try_from(len).unwrap_or(u8::MAX)))
    }
}

impl RawKeys {
    pub(super) fn push(&mut self, k: RawKey) {
        self.0.push(k);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Writes the keys into `m` as fields of the IPv4 (or, `v6`, IPv6) header where they are
    /// fields, and as general keys otherwise.
    ///
    /// # Errors
    /// A field also given another way, more general keys than a filter holds, or two keys on
    /// one word that no packet can match both of.
    pub(super) fn into_match(self, v6: bool, m: &mut Match) -> Result<()> {
        let (mut src, mut dst) = (Address::default(), Address::default());
        let (mut src_keys, mut dst_keys) = (Vec::new(), Vec::new());
        let transport = |k: &RawKey| k.nexthdr || (!v6 && k.at == 20) || (v6 && k.at == 40);
        for k in &self.0 {
            if k.mask == 0 {
                continue;
            }
            let general = |m: &mut Match| general_key(m, k);
            if transport(k) {
                let (sport, dport) = (k.mask >> 16, k.mask & 0xffff);
                let ports = (
                    (sport != 0).then(|| port_range(k.value >> 16, sport, "sport")),
                    (dport != 0).then(|| port_range(k.value & 0xffff, dport, "dport")),
                );
                let fields = (k.at == 0 || !k.nexthdr)
                    && !matches!(ports.0, Some(Err(_)))
                    && !matches!(ports.1, Some(Err(_)))
                    && (sport == 0 || m.sport.is_none())
                    && (dport == 0 || m.dport.is_none());
                if !fields {
                    general(m)?;
                    continue;
                }
                if let Some(Ok(range)) = ports.0 {
                    set(&mut m.sport, range, "sport")?;
                }
                if let Some(Ok(range)) = ports.1 {
                    set(&mut m.dport, range, "dport")?;
                }
                continue;
            }
            match (v6, k.at) {
                // The TOS / traffic-class byte with the DSCP's mask is the DSCP; other bits of
                // it (wondershaper's IPv6 copy of its IPv4 header-length key reads the version
                // nibble and the top of the traffic class) stay a general key, matched
                // literally as the kernel matches them.
                (false, 0) if k.mask & !0x00ff_0000 == 0 && dscp_mask(k.mask >> 16) => {
                    let dscp = tos_to_dscp((k.value >> 16) & 0xff, (k.mask >> 16) & 0xff, "tos")?;
                    set(&mut m.dscp, dscp, "tos")?;
                }
                (false, 8) if k.mask == 0x00ff_0000 => {
                    set(&mut m.proto, ((k.value >> 16) & 0xff) as u8, "protocol")?;
                }
                (false, 12) => {
                    src.add(0, k);
                    src_keys.push(k);
                }
                (false, 16) => {
                    dst.add(0, k);
                    dst_keys.push(k);
                }
                (true, 0) if k.mask & !0x0ff0_0000 == 0 && dscp_mask(k.mask >> 20) => {
                    let dscp =
                        tos_to_dscp((k.value >> 20) & 0xff, (k.mask >> 20) & 0xff, "priority")?;
                    set(&mut m.dscp, dscp, "priority")?;
                }
                (true, 4) if k.mask == 0x0000_ff00 => {
                    set(&mut m.proto, ((k.value >> 8) & 0xff) as u8, "protocol")?;
                }
                (true, 8..=20) => {
                    src.add((k.at - 8) / 4, k);
                    src_keys.push(k);
                }
                (true, 24..=36) => {
                    dst.add((k.at - 24) / 4, k);
                    dst_keys.push(k);
                }
                _ => general(m)?,
            }
        }
        for (address, keys, what) in [(src, src_keys, "src"), (dst, dst_keys, "dst")] {
            match address.prefix(v6) {
                Some(Some(p)) => set(
                    if what == "src" {
                        &mut m.src
                    } else {
                        &mut m.dst
                    },
                    p,
                    what,
                )?,
                None => {}
                // Bits of an address that are not a prefix (a hash bucket's byte, `match u8 1
                // 0xff at 18`): tc matches them literally, and so does htbd, as general keys.
                Some(None) => {
                    for k in keys {
                        general_key(m, k)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether a TOS / traffic-class byte's `mask` picks the DSCP (all six bits, the ECN bits
/// with them or not).
fn dscp_mask(mask: u32) -> bool {
    matches!(mask & 0xff, 0xfc | 0xff)
}

/// Adds `k` to `m`'s general keys, merged with a key on the same word (`pack_key`).
fn general_key(m: &mut Match, k: &RawKey) -> Result<()> {
    let at = u16::try_from(k.at).or_else(|_| {
        usage(format!(
            "u32 key at {}{}: offsets stop at 65535",
            if k.nexthdr { "nexthdr+" } else { "" },
            k.at
        ))
    })?;
    let mut keys = m.raw.as_slice().to_vec();
    if let Some(same) = keys
        .iter_mut()
        .find(|r| r.at == at && r.nexthdr == k.nexthdr)
    {
        if (same.value ^ k.value) & same.mask & k.mask != 0 {
            return usage(format!(
                "two matches at {}{} disagree on bits {:#010x}: no packet matches both",
                if k.nexthdr { "nexthdr+" } else { "" },
                k.at,
                same.mask & k.mask
            ));
        }
        same.value |= k.value;
        same.mask |= k.mask;
    } else {
        keys.push(htb_ipc::RawKey {
            at,
            nexthdr: k.nexthdr,
            mask: k.mask,
            value: k.value,
        });
    }
    match htb_classify::RawKeys::new(&keys) {
        Some(raw) => m.raw = raw,
        None => {
            return usage(format!(
                "more than {MAX} u32 keys at offsets htbd does not read as header fields: a filter holds at most {MAX}",
                MAX = htb_classify::MAX_RAW_KEYS,
            ));
        }
    }
    Ok(())
}

fn set<T>(slot: &mut Option<T>, value: T, what: &str) -> Result<()> {
    if slot.is_some() {
        return usage(format!("Double \"{what}\" match: one per filter"));
    }
    *slot = Some(value);
    Ok(())
}

/// `ht X:Y:` (`get_u32_handle`, a table and bucket, no node).
pub(super) fn table(s: &str) -> Result<(u32, u32)> {
    let h = u32_handle(s, "ht")?;
    if h & 0xfff != 0 {
        return illegal("ht");
    }
    Ok((h >> 20, (h >> 12) & 0xff))
}

/// `link X:` (a table, no bucket or node).
pub(super) fn link(s: &str) -> Result<u32> {
    let h = u32_handle(s, "link")?;
    if h & 0xfffff != 0 || h == 0 {
        return illegal("link");
    }
    Ok(h >> 20)
}

/// tc's `get_u32_handle` (the one parser: [`U32Handle`]): `X:Y:Z` in hex, each part
/// optional, or `0x…`.
pub(super) fn u32_handle(s: &str, what: &str) -> Result<u32> {
    s.parse::<U32Handle>()
        .map(|h| h.0)
        .or_else(|e| usage(format!("Illegal \"{what}\": {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::split_words as words;
    use htb_ipc::PortRange;

    fn read(s: &str, v6: bool) -> Result<Match> {
        let w = words(s);
        let mut a = Args::new(&w);
        let mut keys = RawKeys::default();
        while let Some(width) = a.next() {
            keys.push(raw(&mut a, width)?);
        }
        let mut m = Match::default();
        keys.into_match(v6, &mut m)?;
        Ok(m)
    }

    #[test]
    fn raw_keys_become_fields() {
        let m = read(
            "u32 0x0a00002a 0xffffffff at 16 u8 6 0xff at 9 u16 80 0xffff at 22",
            false,
        )
        .unwrap();
        assert_eq!(
            m.dst.map(|p| p.to_string()).as_deref(),
            Some("10.0.0.42/32")
        );
        assert_eq!(m.proto, Some(6));
        assert_eq!(
            m.dport,
            Some(PortRange {
                first: 80,
                last: 80
            })
        );
        let m = read(
            "u32 0xc0a80000 0xffff0000 at 12 u16 0x0035 0xffff at nexthdr+0",
            false,
        )
        .unwrap();
        assert_eq!(
            m.src.map(|p| p.to_string()).as_deref(),
            Some("192.168.0.0/16")
        );
        assert_eq!(
            m.sport,
            Some(PortRange {
                first: 53,
                last: 53
            })
        );
        let m = read(
            "u32 0x20010db8 0xffffffff at 24 u32 0 0xffff0000 at 28",
            true,
        )
        .unwrap();
        assert_eq!(
            m.dst.map(|p| p.to_string()).as_deref(),
            Some("2001:db8::/48")
        );
        let m = read("u8 0xb8 0xfc at 1", false).unwrap();
        assert_eq!(m.dscp, Some(46));
        // A word that is no field (the IPv4 fragment id) stays a general key.
        let m = read("u32 0 0xffff0000 at 4", false).unwrap();
        assert_eq!(
            m.raw.as_slice(),
            [htb_ipc::RawKey {
                at: 4,
                nexthdr: false,
                mask: 0xffff_0000,
                value: 0
            }]
        );
        // Address bits that are not a prefix are matched literally, as tc does.
        let m = read("u32 0x0a000000 0xff00ff00 at 16", false).unwrap();
        assert_eq!(m.dst, None);
        assert_eq!(
            m.raw.as_slice(),
            [htb_ipc::RawKey {
                at: 16,
                nexthdr: false,
                mask: 0xff00_ff00,
                value: 0x0a00_0000
            }]
        );
        assert!(read("u16 1 0xffff at 3", false).is_err(), "misaligned");
    }

    #[test]
    fn wondershapers_small_ack_filter_keeps_its_general_keys() {
        // tc's pack_key merges the u8 at 0 and the u16 at 2 into one word, as here.
        let m = read(
            "u8 6 0xff at 9 u8 0x05 0x0f at 0 u16 0x0000 0xffc0 at 2 u8 0x10 0xff at 33",
            false,
        )
        .unwrap();
        assert_eq!(m.proto, Some(6));
        let keys: Vec<(u16, u32, u32)> = m
            .raw
            .as_slice()
            .iter()
            .map(|k| (k.at, k.mask, k.value))
            .collect();
        assert_eq!(
            keys,
            [
                (0, 0x0f00_ffc0, 0x0500_0000),
                (32, 0x00ff_0000, 0x0010_0000)
            ]
        );
        // Two keys on one word that contradict each other, and a fifth word, are refused.
        assert!(
            read("u8 5 0xff at 0 u8 6 0xff at 0", false)
                .unwrap_err()
                .0
                .contains("disagree")
        );
        let five = "u32 1 1 at 4 u32 1 1 at 24 u32 1 1 at 28 u32 1 1 at 32 u32 1 1 at 36";
        assert!(read(five, false).unwrap_err().0.contains("at most 4"));
        // Ports with a mask that is no range, or nexthdr+ offsets past the ports: general.
        let m = read("u32 0x00500000 0x00f0f000 at nexthdr+0", false).unwrap();
        assert!(m.sport.is_none() && m.raw.as_slice().len() == 1 && m.raw.as_slice()[0].nexthdr);
        let m = read("u8 0x10 0xff at nexthdr+13", false).unwrap();
        assert_eq!(
            (m.raw.as_slice()[0].at, m.raw.as_slice()[0].mask),
            (12, 0x00ff_0000)
        );

        // wondershaper's IPv6 copy of the IPv4 key reads the version nibble and the traffic
        // class's top: no DSCP, a general key matched as the kernel matches it.
        let m = read("u8 0x05 0x0f at 0 u16 0x0000 0xffc0 at 2", true).unwrap();
        assert!(m.dscp.is_none());
        assert_eq!(
            (
                m.raw.as_slice()[0].at,
                m.raw.as_slice()[0].mask,
                m.raw.as_slice()[0].value
            ),
            (0, 0x0f00_ffc0, 0x0500_0000)
        );
        let m = read("u8 0x05 0x0f at 0", true).unwrap();
        assert_eq!(
            (m.raw.as_slice()[0].mask, m.raw.as_slice()[0].value),
            (0x0f00_0000, 0x0500_0000)
        );
        // With the DSCP's mask it is the DSCP.
        assert_eq!(read("u8 0xb8 0xfc at 1", false).unwrap().dscp, Some(46));
    }

    #[test]
    fn handles_and_sample_fold() {
        assert_eq!(table("2:7b:").unwrap(), (2, 0x7b));
        assert_eq!(table("800::").unwrap(), (0x800, 0));
        assert!(table("2:7b:1").is_err());
        assert_eq!(link("2:").unwrap(), 2);
        assert!(link("2:1:").is_err());
        assert_eq!(
            u32_handle("0x1:0x3:0x800", "handle").unwrap(),
            1 << 20 | 3 << 12 | 0x800
        );
        assert_eq!(ip_key("dst", "10.0.0.42").unwrap().fold() % 256, 0x2a);
        let w = words("0x2a 0xff at 16");
        let k = raw(&mut Args::new(&w), "u32").unwrap();
        assert_eq!(k.fold(), 0x2a);
    }
}
