//! The import's u32 hash tables: where each address's filter goes, laid out as the LARTC
//! HOWTO hashes many subscribers (the kernel's `cls_u32.c` holds 2048 filters per bucket):
//! per prio a table of 256 buckets, linked from the prio's root table by the address's last
//! byte (IPv4; byte 5 of an IPv6 address, which every prefix of /48 or longer fixes); each
//! host address (prefix) in its bucket, shorter prefixes in the root table after the link.
//! Past half of what one table holds, a first level hashed on the byte before links to a
//! second-level table per value of that byte. The tables already running are found and
//! extended; new ones take free table ids.

use std::collections::{BTreeMap, BTreeSet};

use htb_config::filter::{Family, IpPrefix};
use htb_core::ClassId;
use htb_ipc::{
    Command, FilterHandle, FilterKind, FilterSpec, HashKey, InterfaceName, Match, Protocol, RawKey,
    U32Hashing,
};

use super::batch::{Batch, Origin, dev};
use super::circuits::Direction;
use super::running::{AddressKey, Running};

/// Where an address's filter goes: the hash table's bucket, or the prio's root table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hashing {
    /// `hashkey mask … at …`: the word and bits that pick the bucket.
    mask: u32,
    at: u32,
    /// The shortest prefix whose hashed bits are fixed.
    min_len: u8,
    /// The address's byte those bits are.
    byte: usize,
}

/// The hash of `family`'s addresses in `direction` (`dst` towards the subscribers, `src` from
/// them): IPv4's last byte (offset 16 or 12), IPv6's byte 5 (offset 29 or 13).
fn hashing(family: Family, direction: Direction) -> Hashing {
    let (mask, min_len, byte) = match family {
        Family::V4 => (0xff, 32, 3),
        Family::V6 => (0x00ff_0000, 48, 5),
    };
    let at = match (family, direction) {
        (Family::V4, Direction::Download) => 16,
        (Family::V6, Direction::Download) => 28,
        (_, Direction::Upload) => 12,
    };
    Hashing {
        mask,
        at,
        min_len,
        byte,
    }
}

/// The first level of the two-level layout (more addresses of a family than one table holds):
/// the byte before [`hashing`]'s — IPv4's third, IPv6's byte 4 — picks a second-level table.
fn first_level(family: Family, direction: Direction) -> Hashing {
    let last = hashing(family, direction);
    Hashing {
        mask: last.mask << 8,
        byte: last.byte - 1,
        ..last
    }
}

/// One hash table holds 256 buckets of 2 048 filters (`u32`'s node ids); past half of that a
/// family's addresses get the two-level layout, so that no bucket overflows for any but
/// pathological address plans.
pub(super) const ONE_TABLE_MAX: usize = 256 * 2048 / 2;

impl Hashing {
    /// The bucket of `p` (`None`: too short a prefix, the root table).
    fn bucket(self, p: &IpPrefix) -> Option<u32> {
        if p.prefix_len() < self.min_len {
            return None;
        }
        let byte = match p.addr() {
            std::net::IpAddr::V4(a) => a.octets().get(self.byte).copied(),
            std::net::IpAddr::V6(a) => a.octets().get(self.byte).copied(),
        };
        byte.map(u32::from)
    }

    /// As a filter's `hashkey mask … at …`.
    fn key(self) -> HashKey {
        HashKey {
            mask: self.mask,
            at: self.at,
        }
    }
}

impl Running {
    /// The table linked from `prio`'s root table by `h`, if there is one.
    fn linked_table(&self, prio: u32, h: Hashing) -> Option<u32> {
        self.filters.iter().find_map(|f| {
            let key = f.hashing.hashkey?;
            (f.prio == prio && key.mask == h.mask && key.at == h.at)
                .then_some(f.hashing.link)
                .flatten()
        })
    }

    /// The tables linked from the buckets of `table` (the two-level layout's second level), by
    /// bucket.
    fn bucket_links(&self, prio: u32, table: u32) -> BTreeMap<u32, u32> {
        self.filters
            .iter()
            .filter(|f| f.prio == prio && f.kind == FilterKind::U32)
            .filter_map(|f| {
                let link = f.hashing.link?;
                let handle = f.handle.u32();
                (handle.table() == table).then_some((handle.bucket(), link))
            })
            .collect()
    }

    /// The u32 table ids in use (tables, and the tables filters live in, and the tables links
    /// lead to).
    fn tables(&self) -> BTreeSet<u32> {
        let u32s = self.filters.iter().filter(|f| f.kind == FilterKind::U32);
        u32s.clone()
            .map(|f| f.handle.u32().table())
            .chain(u32s.filter_map(|f| f.hashing.link))
            .collect()
    }
}

/// Where a family's filters go: one hash table, or a first-level table linking to one
/// second-level table per value of its byte (by that value).
enum Layout {
    One(u32),
    Two { l1: u32, l2: BTreeMap<u32, u32> },
}

/// Where the import's filters go on one port: its interface and qdisc, the direction its
/// addresses are matched in, and the IPv4 prio (IPv6 takes the next).
pub(super) struct Port<'a> {
    pub(super) dev: &'a InterfaceName,
    pub(super) qdisc: ClassId,
    pub(super) direction: Direction,
    pub(super) prio: u32,
}

impl Port<'_> {
    /// A u32 filter of the import's at `family`'s prio, for its protocol.
    fn filter(&self, family: Family) -> FilterSpec {
        let (protocol, prio) = match family {
            Family::V4 => (Protocol::Ip, self.prio),
            Family::V6 => (Protocol::Ipv6, self.prio + 1),
        };
        FilterSpec {
            parent: Some(self.qdisc),
            protocol,
            prio: Some(prio),
            kind: FilterKind::U32,
            ..FilterSpec::new(dev(self.dev))
        }
    }

    /// Hash table `t` (256 buckets), and the filter that links to it from `from` (`None`: the
    /// prio's root table; else a table's bucket) when a packet's word matches `key`, by the
    /// bucket `link` hashes.
    fn add_table(
        &self,
        out: &mut Batch,
        family: Family,
        t: u32,
        from: Option<(u32, u32)>,
        key: Option<RawKey>,
        link: Hashing,
    ) {
        let table = FilterSpec {
            // tc's `handle T:` (`get_u32_handle`): the table id in the handle's top 12 bits.
            handle: Some(FilterHandle(t << 20)),
            hashing: U32Hashing {
                divisor: Some(256),
                ..U32Hashing::default()
            },
            ..self.filter(family)
        };
        out.push(Origin::Running, Command::FilterAdd(Box::new(table)));
        let mut matcher = Match::default();
        if let Some(k) = key {
            matcher.raw = matcher.raw.with(k).unwrap_or_default();
        }
        let linking = FilterSpec {
            matcher,
            hashing: U32Hashing {
                table: from,
                link: Some(t),
                hashkey: Some(link.key()),
                ..U32Hashing::default()
            },
            ..self.filter(family)
        };
        out.push(Origin::Running, Command::FilterAdd(Box::new(linking)));
    }

    /// The filters of `want` (address → its prefix, class and CSV line) not in `kept`, each
    /// in its bucket of the tables running on `r` or new ones, with those tables.
    pub(super) fn add_filters(
        &self,
        r: &Running,
        want: &BTreeMap<AddressKey, (IpPrefix, ClassId, u64)>,
        kept: &BTreeSet<AddressKey>,
        out: &mut Batch,
    ) {
        let direction = self.direction;
        // Each family's hash tables: the ones linked already, else new ones (ids from 0x10:
        // below the root tables the kernel numbers from 0x800). One table hashed on the
        // address's last byte, or, for more addresses than it holds, a first level hashed on
        // the byte before that links to a second-level table per value of that byte.
        let mut in_use = r.tables();
        let mut new_table = move || {
            let t = (0x10..0x800).find(|t| !in_use.contains(t)).unwrap_or(0x7ff);
            in_use.insert(t);
            t
        };
        let mut hashed = BTreeMap::<bool, usize>::new();
        for &(address, _, _) in want.values() {
            let family = address.family();
            if hashing(family, direction).bucket(&address).is_some() {
                *hashed.entry(family == Family::V6).or_default() += 1;
            }
        }
        let mut layouts: BTreeMap<bool, Layout> = BTreeMap::new();
        for (&v6, &count) in &hashed {
            let family = if v6 { Family::V6 } else { Family::V4 };
            let (h, h1) = (hashing(family, direction), first_level(family, direction));
            let prio = self.prio + u32::from(v6);
            let layout = if let Some(l1) = r.linked_table(prio, h1) {
                Layout::Two {
                    l1,
                    l2: r.bucket_links(prio, l1),
                }
            } else if let Some(t) = r.linked_table(prio, h) {
                Layout::One(t)
            } else {
                let two = count > ONE_TABLE_MAX;
                let t = new_table();
                self.add_table(out, family, t, None, None, if two { h1 } else { h });
                if two {
                    Layout::Two {
                        l1: t,
                        l2: BTreeMap::new(),
                    }
                } else {
                    Layout::One(t)
                }
            };
            layouts.insert(v6, layout);
        }
        for (k, &(address, class, line)) in want {
            if kept.contains(k) {
                continue;
            }
            let family = address.family();
            let bucket = hashing(family, direction).bucket(&address);
            let table = match (bucket, layouts.get_mut(&(family == Family::V6))) {
                (Some(bucket), Some(Layout::One(table))) => Some((*table, bucket)),
                (Some(bucket), Some(Layout::Two { l1, l2 })) => {
                    let h1 = first_level(family, direction);
                    let first = h1.bucket(&address).unwrap_or(0);
                    let table = match l2.get(&first) {
                        Some(&t) => t,
                        None => {
                            let t = new_table();
                            l2.insert(first, t);
                            // The link fixes the byte its first-level bucket hashed (what the
                            // bucket implies; htbd wants every filter of a hashed table to
                            // say it).
                            let fixed = RawKey {
                                at: u16::try_from(h1.at).unwrap_or(u16::MAX),
                                nexthdr: false,
                                mask: h1.mask,
                                value: first << h1.mask.trailing_zeros(),
                            };
                            let from = Some((*l1, first));
                            let h = hashing(family, direction);
                            self.add_table(out, family, t, from, Some(fixed), h);
                            t
                        }
                    };
                    Some((table, bucket))
                }
                _ => None,
            };
            let mut matcher = Match::default();
            match direction {
                Direction::Download => matcher.dst = Some(address),
                Direction::Upload => matcher.src = Some(address),
            }
            let filter = FilterSpec {
                matcher,
                class: Some(class),
                hashing: U32Hashing {
                    table,
                    ..U32Hashing::default()
                },
                ..self.filter(family)
            };
            out.push(Origin::Csv(line), Command::FilterAdd(Box::new(filter)));
            out.changes.filters_added += 1;
        }
    }
}
