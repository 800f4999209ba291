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
use htb_ipc::HashKey;

use super::filter_entry::FilterHandles as _;
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
    e.kind.format_handle(e.handle)
}

/// The bits of `m`'s address that the hash key reads, and whether `m` fixes all of them.
fn hashed_bits(m: &Match, key: HashKey, family: Family) -> Option<Result<u32, ()>> {
    let (prefix, word) = match (family, key.at) {
        (Family::V4, 12) => (m.src, 0),
        (Family::V4, 16) => (m.dst, 0),
        (Family::V6, 8 | 12 | 16 | 20) => (m.src, (key.at - 8) / 4),
        (Family::V6, 24 | 28 | 32 | 36) => (m.dst, (key.at - 24) / 4),
        _ => return None,
    };
    let Some(prefix) = prefix else {
        return Some(Err(()));
    };
    let (value, covered) = match family {
        Family::V4 => (prefix.network_bits() as u32, u32::from(prefix.prefix_len())),
        Family::V6 => (
            (prefix.network_bits() >> (96 - 32 * word)) as u32,
            u32::from(prefix.prefix_len())
                .saturating_sub(32 * word)
                .min(32),
        ),
    };
    let fixed = !u32::MAX.checked_shr(covered).unwrap_or(0);
    Some(if key.mask & !fixed == 0 {
        Ok(value)
    } else {
        Err(())
    })
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
        if e.u32.divisor.is_some() {
            return Ok(());
        }
        let Some(matcher) = context.intersect(&e.matcher) else {
            return Ok(());
        };
        if let Some(link) = e.u32.link {
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
                let bucket = match e.u32.hashkey {
                    Some(key) if key.mask != 0 && divisor > 1 => {
                        let family = family.ok_or_else(|| hash_error(key))?;
                        let Some(both) = matcher.intersect(&f.matcher) else {
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
        if let Some(class) = e.class {
            self.out.push(Filter {
                police: e.police.clone(),
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
            e.u32.divisor.map(|d| {
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
            Some(table) if e.kind == FilterKind::U32 && e.u32.divisor.is_none() => {
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
