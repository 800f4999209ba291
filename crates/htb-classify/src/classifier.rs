//! The compiled filter list: tuple space search (Srinivasan, Suri, Varghese, SIGCOMM 1999; the
//! scheme Open vSwitch's megaflow classifier uses).
//!
//! Filters are grouped by *shape*: which keys they give and how long their prefixes are
//! (every subscriber filter `dst 10.1.2.3/32` has the shape "IPv4, destination /32"). Each
//! shape is one hash table from the filter's key values to the position of the first filter
//! with those values. A packet is masked to each shape in turn and looked up; the smallest
//! position found is the first matching filter, exactly as a walk of the list would find it.
//! Shapes are visited in the order of their first filter, so the walk stops as soon as no
//! later shape can hold an earlier filter.
//!
//! Cost per packet: one key built and one hash lookup per shape visited, plus a walk of the
//! filters a hash cannot hold (port *ranges*, which are few). It grows with the number of
//! shapes, not with the number of filters: 100 000 subscriber /32s cost what 10 do.

use alloc::vec::Vec;

use hashbrown::HashMap;
use htb_core::ClassId;

use crate::filter_list::FilterList;
use crate::matcher::{Match, masked};
use crate::packet::{Family, PacketInfo};
use crate::police::{ControlAction, Police};
use crate::raw_key::Headers;

/// A filter: match, priority, target class, and the policer its matches pass through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// Lower first.
    pub prio: u32,
    /// What to match.
    pub matcher: Match,
    /// Where matching packets go.
    pub class: ClassId,
    /// `action police …`: shared with every classifier built from the same filter, so that
    /// its bucket and counters outlive changes to other filters.
    pub police: Option<Police>,
}

/// What classifying a packet decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The filter at this position matched (and its policer, if any, let the packet pass).
    Filter(usize),
    /// No filter matched (or the last one's policer said `continue`).
    Unclassified,
    /// A policer dropped it.
    Drop,
}

/// Presence bits of [`Fields`].
const SRC: u8 = 1;
const DST: u8 = 1 << 1;
const PROTO: u8 = 1 << 2;
const SPORT: u8 = 1 << 3;
const DPORT: u8 = 1 << 4;
const DSCP: u8 = 1 << 5;
const VLAN: u8 = 1 << 6;
/// An ARP frame: a key without a value, so that `protocol arp` filters see only ARP.
const ARP: u8 = 1 << 7;

/// A packet's keys (or a filter's values) as numbers, and which of them it has: a packet is
/// turned into this once, then masked to each shape.
#[derive(Clone, Copy, Debug, Default)]
struct Fields {
    present: u8,
    family: Option<Family>,
    /// IPv4 in the low 32 bits.
    src: u128,
    dst: u128,
    proto: u8,
    sport: u16,
    dport: u16,
    dscp: u8,
    vlan: u16,
}

impl Fields {
    #[inline]
    fn of_packet(p: &PacketInfo) -> Self {
        let mut f = Self {
            family: p.family(),
            ..Self::default()
        };
        let bit = |present: bool, bit: u8| if present { bit } else { 0 };
        if let Some(ip) = p.src {
            f.src = masked(ip, Family::of(ip).bits());
        }
        if let Some(ip) = p.dst {
            f.dst = masked(ip, Family::of(ip).bits());
        }
        f.proto = p.proto.unwrap_or(0);
        f.sport = p.sport.unwrap_or(0);
        f.dport = p.dport.unwrap_or(0);
        f.dscp = p.dscp.unwrap_or(0);
        f.vlan = p.vlan.unwrap_or(0);
        f.present = bit(p.src.is_some(), SRC)
            | bit(p.dst.is_some(), DST)
            | bit(p.proto.is_some(), PROTO)
            | bit(p.sport.is_some(), SPORT)
            | bit(p.dport.is_some(), DPORT)
            | bit(p.dscp.is_some(), DSCP)
            | bit(p.vlan.is_some(), VLAN)
            | bit(p.arp, ARP);
        f
    }
}

/// A prefix length as a mask over [`Fields`]' address numbers.
fn prefix_mask(family: Family, len: u8) -> u128 {
    let width = u32::from(family.bits());
    let ones = if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    ones & !ones.checked_shr(u32::from(len)).unwrap_or(0)
}

/// Which keys a filter gives, its family and its prefix lengths (as masks): filters of one
/// shape share a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    family: Option<Family>,
    needs: u8,
    src_mask: u128,
    dst_mask: u128,
}

/// The key of an IPv6 shape: both addresses and the rest.
type WideKey = (u128, u128, u64);

impl Shape {
    /// The keys other than the addresses, packed (absent ones zero).
    #[inline]
    fn rest(&self, f: &Fields) -> u64 {
        let keep = |bit: u8, v: u64| if self.needs & bit != 0 { v } else { 0 };
        keep(PROTO, u64::from(f.proto))
            | keep(SPORT, u64::from(f.sport)) << 8
            | keep(DPORT, u64::from(f.dport)) << 24
            | keep(DSCP, u64::from(f.dscp)) << 40
            | keep(VLAN, u64::from(f.vlan)) << 46
    }

    /// Whether `f` has every key this shape looks at, in its family.
    #[inline]
    fn applies(&self, f: &Fields) -> bool {
        f.present & self.needs == self.needs && self.family.is_none_or(|w| f.family == Some(w))
    }

    /// IPv4 and family-less shapes: addresses of at most 32 bits and the rest in one number.
    #[inline]
    fn narrow_key(&self, f: &Fields) -> u128 {
        (f.src & self.src_mask) << 32 | (f.dst & self.dst_mask) | u128::from(self.rest(f)) << 64
    }

    /// A shape of at most an IPv4 destination (no source, no other key, not IPv6): its
    /// [`narrow_key`](Self::narrow_key) is the masked destination alone, under 2^32.
    #[inline]
    fn dst_key(&self, f: &Fields) -> u32 {
        debug_assert!(self.family != Some(Family::V6) && self.needs & !(DST | ARP) == 0);
        (f.dst & self.dst_mask) as u32
    }

    #[inline]
    fn wide_key(&self, f: &Fields) -> WideKey {
        (f.src & self.src_mask, f.dst & self.dst_mask, self.rest(f))
    }
}

enum Compiled {
    /// Its keys disagree (a v4 source with a v6 destination): it matches nothing.
    Never,
    /// A port range: checked one by one.
    Range,
    /// Held by the table of its shape, under these values.
    Exact(Shape, Fields),
}

fn compile(m: &Match) -> Compiled {
    let Ok(family) = m.fixed_family() else {
        return Compiled::Never;
    };
    if !m.raw.is_empty() {
        // Words at offsets: no hash holds them; walked, as port ranges are.
        return Compiled::Range;
    }
    let single = |r: Option<crate::PortRange>| match r {
        None => Ok(None),
        Some(r) => r.single().map(Some).ok_or(()),
    };
    let (Ok(sport), Ok(dport)) = (single(m.sport), single(m.dport)) else {
        return Compiled::Range;
    };
    let bit = |present: bool, bit: u8| if present { bit } else { 0 };
    let mask =
        |p: Option<crate::IpPrefix>| p.map_or(0, |p| prefix_mask(p.family(), p.prefix_len()));
    let shape = Shape {
        family,
        needs: bit(m.src.is_some(), SRC)
            | bit(m.dst.is_some(), DST)
            | bit(m.proto.is_some(), PROTO)
            | bit(sport.is_some(), SPORT)
            | bit(dport.is_some(), DPORT)
            | bit(m.dscp.is_some(), DSCP)
            | bit(m.vlan.is_some(), VLAN)
            | bit(m.arp, ARP),
        src_mask: mask(m.src),
        dst_mask: mask(m.dst),
    };
    let values = Fields {
        present: shape.needs,
        family,
        src: m.src.map_or(0, |p| p.network_bits()),
        dst: m.dst.map_or(0, |p| p.network_bits()),
        proto: m.proto.unwrap_or(0),
        sport: sport.unwrap_or(0),
        dport: dport.unwrap_or(0),
        dscp: m.dscp.unwrap_or(0),
        vlan: m.vlan.unwrap_or(0),
    };
    Compiled::Exact(shape, values)
}

/// Key values → position of the first filter with them.
#[derive(Clone, Debug)]
enum Positions {
    /// A shape whose key is at most an IPv4 destination (every subscriber's `dst A/32`): 8
    /// bytes an entry rather than [`Narrow`](Self::Narrow)'s 32.
    Dst(HashMap<u32, u32>),
    Narrow(HashMap<u128, u32>),
    Wide(HashMap<WideKey, u32>),
}

/// The filters of one shape.
#[derive(Clone, Debug)]
struct Table {
    shape: Shape,
    /// The position of its first filter: a packet whose best match so far comes earlier
    /// need not look here.
    first: u32,
    positions: Positions,
}

impl Table {
    fn new(shape: Shape, first: u32) -> Self {
        let positions = if shape.family == Some(Family::V6) {
            Positions::Wide(HashMap::default())
        } else if shape.needs & !(DST | ARP) == 0 {
            Positions::Dst(HashMap::default())
        } else {
            Positions::Narrow(HashMap::default())
        };
        Self {
            shape,
            first,
            positions,
        }
    }

    /// Records `position` under `values` unless an earlier filter has them.
    fn insert(&mut self, values: &Fields, position: u32) {
        match &mut self.positions {
            Positions::Dst(m) => m.entry(self.shape.dst_key(values)).or_insert(position),
            Positions::Narrow(m) => m.entry(self.shape.narrow_key(values)).or_insert(position),
            Positions::Wide(m) => m.entry(self.shape.wide_key(values)).or_insert(position),
        };
    }

    #[inline]
    fn lookup(&self, f: &Fields) -> Option<u32> {
        if !self.shape.applies(f) {
            return None;
        }
        match &self.positions {
            Positions::Dst(m) => m.get(&self.shape.dst_key(f)).copied(),
            Positions::Narrow(m) => m.get(&self.shape.narrow_key(f)).copied(),
            Positions::Wide(m) => m.get(&self.shape.wide_key(f)).copied(),
        }
    }
}

/// Filters in evaluation order, compiled for lookup (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Classifier {
    /// The filters, compact (a plain IPv4 host filter is 16 bytes).
    list: FilterList,
    /// By `first`, ascending.
    tables: Vec<Table>,
    /// Positions of the port-range filters, ascending.
    ranges: Vec<u32>,
}

impl PartialEq for Classifier {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list
    }
}

impl Eq for Classifier {}

impl Classifier {
    /// Orders `filters` by prio (stable: equal prios keep their order) and compiles them;
    /// `filters` is dropped once held compactly, before the tables are built.
    #[must_use]
    pub fn new(mut filters: Vec<Filter>) -> Self {
        filters.sort_by_key(|f| f.prio);
        let list = FilterList::new(filters);
        let mut tables: Vec<Table> = Vec::new();
        let mut ranges = Vec::new();
        for i in 0..list.len() {
            // More than 2^32 filters cannot be held in memory here.
            let position = u32::try_from(i).unwrap_or(u32::MAX);
            match list.with_match(i, compile).unwrap_or(Compiled::Never) {
                Compiled::Never => {}
                Compiled::Range => ranges.push(position),
                Compiled::Exact(shape, values) => {
                    let table = match tables.iter().position(|t| t.shape == shape) {
                        Some(i) => &mut tables[i],
                        None => {
                            tables.push(Table::new(shape, position));
                            let last = tables.len() - 1;
                            &mut tables[last]
                        }
                    };
                    table.insert(&values, position);
                }
            }
        }
        // Tables were created in the order of their first filter: already sorted by `first`.
        Self {
            list,
            tables,
            ranges,
        }
    }

    /// The class of the first matching filter.
    #[must_use]
    pub fn classify(&self, p: &PacketInfo) -> Option<ClassId> {
        self.classify_index(p).and_then(|i| self.list.class(i))
    }

    /// The position (in [`filters`](Self::filters)) of the first matching filter, for a
    /// packet whose bytes are not at hand: filters with general keys ([`RawKeys`](crate::RawKeys)) never
    /// match it.
    #[must_use]
    #[inline]
    pub fn classify_index(&self, p: &PacketInfo) -> Option<usize> {
        self.first(p, |m| m.raw.is_empty() && m.matches(p))
    }

    /// The position of the first matching filter, general keys read from `h`.
    #[must_use]
    #[inline]
    pub fn classify_index_headers(&self, p: &PacketInfo, h: &Headers<'_>) -> Option<usize> {
        self.first(p, |m| m.matches_headers(p, h))
    }

    /// The first matching filter, general keys read from `h`, through its policer
    /// (`tcf_exts_exec` after the match): `ok` and `pipe` keep the filter's class, `drop` and
    /// `reclassify` drop the packet, `continue` goes on to the next matching filter. `len` is
    /// the frame's length, `now` the data plane's clock.
    #[must_use]
    #[inline]
    pub fn classify_policed(
        &self,
        p: &PacketInfo,
        h: &Headers<'_>,
        now: htb_core::Instant,
        len: u32,
    ) -> Verdict {
        let Some(mut i) = self.classify_index_headers(p, h) else {
            return Verdict::Unclassified;
        };
        loop {
            let Some(police) = self.list.police(i) else {
                return Verdict::Filter(i);
            };
            match police.act(now, len) {
                ControlAction::Ok | ControlAction::Pipe => return Verdict::Filter(i),
                ControlAction::Drop | ControlAction::Reclassify => return Verdict::Drop,
                ControlAction::Continue => {
                    // Rare (a policer over its rate): the walk of the rest of the list.
                    match (i + 1..self.list.len()).find(|&j| {
                        self.list.with_match(j, |m| m.matches_headers(p, h)) == Some(true)
                    }) {
                        Some(j) => i = j,
                        None => return Verdict::Unclassified,
                    }
                }
            }
        }
    }

    /// The first filter the tables hold or, among the walked ones before it, the first
    /// `walked` accepts.
    #[inline]
    fn first(&self, p: &PacketInfo, walked: impl Fn(&Match) -> bool) -> Option<usize> {
        let fields = Fields::of_packet(p);
        let mut best = u32::MAX;
        for table in &self.tables {
            if table.first >= best {
                break;
            }
            if let Some(position) = table.lookup(&fields) {
                best = best.min(position);
            }
        }
        for &position in &self.ranges {
            if position >= best {
                break;
            }
            if self.list.with_match(position as usize, &walked) == Some(true) {
                best = position;
                break;
            }
        }
        (best != u32::MAX).then_some(best as usize)
    }

    /// The filters in evaluation order, as they were given (made anew from the compact form:
    /// a copy, for inspection; [`filter`](Self::filter) and [`class`](Self::class) read one).
    #[must_use]
    pub fn filters(&self) -> Vec<Filter> {
        (0..self.list.len())
            .filter_map(|i| self.list.get(i))
            .collect()
    }

    /// How many filters it holds (the positions [`Verdict::Filter`] and
    /// [`classify_index`](Self::classify_index) give are below it).
    #[must_use]
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether it holds no filter.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.list.len() == 0
    }

    /// The filter at position `i`, as it was given.
    #[must_use]
    pub fn filter(&self, i: usize) -> Option<Filter> {
        self.list.get(i)
    }

    /// The class of the filter at position `i`.
    #[must_use]
    #[inline]
    pub fn class(&self, i: usize) -> Option<ClassId> {
        self.list.class(i)
    }

    /// How many hash tables a packet may be looked up in (the distinct filter shapes) and how
    /// many filters are walked one by one (port ranges): the per-packet cost's two terms.
    #[must_use]
    pub fn cost(&self) -> (usize, usize) {
        (self.tables.len(), self.ranges.len())
    }
}

#[cfg(test)]
mod tests;
