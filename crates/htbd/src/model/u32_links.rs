//! u32 hash tables and links flattened into the classifier's list, in the order
//! `u32_classify` (`net/sched/cls_u32.c`) walks them: a prio's root table by handle; a filter
//! that matches and links descends into the bucket its `hashkey` picks; when nothing there
//! matches, the linking filter's own class applies (the kernel's `check_terminal` after the
//! stack pops) and the walk goes on after it.
//!
//! Each linked filter becomes one plain filter whose match is the linking filter's AND its
//! own. Which bucket a packet reaches is decided by the hashed bits; a filter placed in a
//! bucket its own address can never hash to is left out (no packet reaches it there), and a
//! filter whose match does not fix the hashed bits is refused: htbd cannot tell which packets
//! reach it.

use std::collections::HashMap;

use htb_config::filter::{Family, Filter, Match};
use htb_ipc::{FilterHandle, HashKey};

use super::filter_entry::{FilterEntry, FilterKind};

/// `TC_U32_MAXDEPTH`: how deep links may nest.
const MAX_DEPTH: usize = 8;

/// Why a port's u32 tables cannot be flattened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// A link to a table that does not exist.
    #[error("filter {handle} links to hash table {table:x}:, which does not exist")]
    NoTable {
        /// The linking filter.
        handle: String,
        /// The missing table.
        table: u16,
    },
    /// Links nested deeper than the kernel allows (or a loop).
    #[error("u32 links nest deeper than {MAX_DEPTH} tables at filter {handle} (a loop?)")]
    TooDeep {
        /// The filter where the walk gave up.
        handle: String,
    },
    /// A hash key over bytes that are not an address.
    #[error(
        "filter {handle}: hashkey mask {mask:#010x} at {at} is not on an address of protocol {protocol} \
         (htbd hashes IPv4 source/destination at 12/16, IPv6 at 8-20/24-36)"
    )]
    HashOffset {
        /// The linking filter.
        handle: String,
        /// Its hash key.
        mask: u32,
        /// Its offset.
        at: u32,
        /// Its protocol.
        protocol: &'static str,
    },
    /// A filter in a hashed table whose match does not say which bucket its packets hash to.
    #[error(
        "filter {handle} sits in a table hashed on mask {mask:#010x} at {at}, but its match does \
         not fix those bits (match the hashed address, e.g. match ip dst A/32)"
    )]
    UnknownBucket {
        /// The filter.
        handle: String,
        /// The hash key.
        mask: u32,
        /// Its offset.
        at: u32,
    },
}

/// A hash table: its divisor and its filters (in bucket, then node order).
struct Table<'a> {
    divisor: u32,
    entries: Vec<&'a FilterEntry>,
}

struct Walk<'a> {
    tables: HashMap<u16, Table<'a>>,
    out: Vec<Filter>,
}

fn name(e: &FilterEntry) -> String {
    FilterHandle(e.handle).display(e.kind).to_string()
}

/// The bits of `m`'s address that the hash key reads, and whether `m` fixes all of them: by an
/// address prefix, or by a raw key on that word (a link out of a bucket, `match u8 1 0xff at
/// 18`, as the import's two-level tables have). `None`: the key is not on an address.
fn hashed_bits(m: &Match, key: HashKey, family: Family) -> Option<Result<u32, ()>> {
    if !matches!(
        (family, key.at),
        (Family::V4, 12 | 16) | (Family::V6, 8 | 12 | 16 | 20 | 24 | 28 | 32 | 36)
    ) {
        return None;
    }
    let at = u16::try_from(key.at).ok()?;
    let by_prefix = m
        .address_word(at)
        .filter(|&(_, fixed)| key.mask & !fixed == 0)
        .map(|(value, _)| value);
    let by_key = || {
        m.raw
            .as_slice()
            .iter()
            .find(|k| !k.nexthdr && k.at == at && key.mask & !k.mask == 0)
            .map(|k| k.value)
    };
    Some(by_prefix.or_else(by_key).ok_or(()))
}

impl<'a> Walk<'a> {
    /// `e` reached with the keys of the filters that linked to it, `context`.
    fn expand(
        &mut self,
        e: &'a FilterEntry,
        prio: u32,
        context: &Match,
        depth: usize,
    ) -> Result<(), LinkError> {
        let parts = e.u32();
        if parts.divisor.is_some() {
            return Ok(());
        }
        let Some(matcher) = context.intersect(&e.matcher()) else {
            return Ok(());
        };
        if let Some(link) = parts.link {
            if depth >= MAX_DEPTH {
                return Err(LinkError::TooDeep { handle: name(e) });
            }
            let Some(table) = self.tables.get(&link) else {
                return Err(LinkError::NoTable {
                    handle: name(e),
                    table: link,
                });
            };
            let (divisor, entries) = (table.divisor, table.entries.clone());
            let family = e.protocol.family();
            let hash_error = |key: HashKey| LinkError::HashOffset {
                handle: name(e),
                mask: key.mask,
                at: key.at,
                protocol: e.protocol.name(),
            };
            for f in entries {
                let bucket = match parts.hashkey {
                    Some(key) if key.mask != 0 && divisor > 1 => {
                        let family = family.ok_or_else(|| hash_error(key))?;
                        let Some(both) = matcher.intersect(&f.matcher()) else {
                            continue;
                        };
                        match hashed_bits(&both, key, family).ok_or_else(|| hash_error(key))? {
                            // u32_hash_fold, then `& ht->divisor` (which holds divisor - 1).
                            Ok(bits) => {
                                ((bits & key.mask) >> key.mask.trailing_zeros()) & (divisor - 1)
                            }
                            Err(()) => {
                                return Err(LinkError::UnknownBucket {
                                    handle: name(f),
                                    mask: key.mask,
                                    at: key.at,
                                });
                            }
                        }
                    }
                    _ => 0,
                };
                if f.bucket() == bucket {
                    self.expand(f, prio, &matcher, depth + 1)?;
                }
            }
        }
        // A link's keys that the filter's own addresses imply go (the classifier's fast path
        // takes plain address filters); a filter they contradict matches nothing.
        if let Some(class) = e.class
            && let Some(matcher) = matcher.without_implied_keys()
        {
            self.out.push(Filter {
                police: e.police().cloned(),
                prio,
                matcher,
                class,
            });
        }
        Ok(())
    }
}

/// The classifier's filters for `filters` (in `(prio, handle)` order), links flattened.
///
/// # Errors
/// A link to a missing table, links nested too deep, a hash key htbd cannot follow.
pub fn flatten<'a, I>(filters: I) -> Result<Vec<Filter>, LinkError>
where
    I: IntoIterator<Item = &'a FilterEntry> + Copy,
{
    let mut tables: HashMap<u16, Table<'a>> = filters
        .into_iter()
        .filter_map(|e| {
            e.u32().divisor.map(|d| {
                let table = Table {
                    divisor: u32::from(d),
                    entries: Vec::new(),
                };
                (e.table(), table)
            })
        })
        .collect();
    let mut roots = Vec::new();
    for e in filters {
        match tables.get_mut(&e.table()) {
            Some(table) if e.kind == FilterKind::U32 && !e.is_hash_table() => {
                table.entries.push(e);
            }
            Some(_) => {}
            None => roots.push(e),
        }
    }
    let mut walk = Walk {
        tables,
        out: Vec::with_capacity(filters.into_iter().size_hint().0),
    };
    for e in roots {
        walk.expand(e, e.prio, &Match::default(), 0)?;
    }
    Ok(walk.out)
}

#[cfg(test)]
mod tests {
    use htb_config::filter::{RawKey, RawKeys};
    use htb_core::ClassId;
    use htb_ipc::HashKey;

    use super::super::filter_entry::{FilterKind, Protocol, U32Parts};
    use super::*;

    fn u32_filter(handle: u32, matcher: Match, u32: U32Parts, class: Option<u32>) -> FilterEntry {
        let class = class.map(|minor| ClassId::new(1, minor));
        FilterEntry::new(10, Protocol::Ip, FilterKind::U32, handle, matcher, class).with_u32(u32)
    }

    /// u32's handle `table:bucket:node`.
    fn at(table: u32, bucket: u32, node: u32) -> u32 {
        table << 20 | bucket << 12 | node
    }

    fn table(id: u32) -> FilterEntry {
        let parts = U32Parts {
            divisor: Some(256),
            ..U32Parts::default()
        };
        u32_filter(id << 20, Match::default(), parts, None)
    }

    fn link(handle: u32, matcher: Match, mask: u32, to: u16) -> FilterEntry {
        let parts = U32Parts {
            link: Some(to),
            hashkey: Some(HashKey { mask, at: 16 }),
            ..U32Parts::default()
        };
        u32_filter(handle, matcher, parts, None)
    }

    fn host(handle: u32, dst: &str, minor: u32) -> FilterEntry {
        let matcher = Match {
            dst: Some(dst.parse().unwrap()),
            ..Match::default()
        };
        u32_filter(handle, matcher, U32Parts::default(), Some(minor))
    }

    /// The import's two-level layout: the root table links by the third byte to table 10,
    /// whose bucket 1 links (with a key fixing that byte) by the last byte to table 11. Its
    /// host flattens to a plain address filter; a host that cannot hash there (another
    /// third byte) matches nothing; a link whose match does not say its bucket is refused.
    #[test]
    fn two_levels_of_tables_flatten_to_plain_addresses() {
        let bucket_one = Match {
            raw: RawKeys::new(&[RawKey {
                at: 16,
                nexthdr: false,
                mask: 0x0000_ff00,
                value: 0x0000_0100,
            }])
            .unwrap(),
            ..Match::default()
        };
        let mut filters = vec![
            link(at(0x800, 0, 0x800), Match::default(), 0xff00, 0x10),
            table(0x10),
            table(0x11),
            link(at(0x10, 1, 0x800), bucket_one, 0xff, 0x11),
            host(at(0x11, 6, 0x800), "10.0.1.6/32", 5),
            host(at(0x11, 6, 0x801), "10.0.2.6/32", 6),
        ];
        filters.sort_by_key(FilterEntry::order);
        let out = flatten(&filters).unwrap();
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].class, ClassId::new(1, 5));
        assert_eq!(out[0].matcher.dst, Some("10.0.1.6/32".parse().unwrap()));
        assert!(out[0].matcher.raw.is_empty(), "the link's key is implied");

        filters.retain(|f| f.handle != at(0x10, 1, 0x800));
        filters.push(link(at(0x10, 1, 0x800), Match::default(), 0xff, 0x11));
        filters.sort_by_key(FilterEntry::order);
        assert!(matches!(
            flatten(&filters),
            Err(LinkError::UnknownBucket { .. })
        ));
    }
}
