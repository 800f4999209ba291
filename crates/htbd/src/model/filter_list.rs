//! A qdisc's filters: kept in (prio, handle) order, tc's evaluation order, in sorted chunks,
//! with the per-prio index its commands need, so that each `filter add` or `filter del` of a
//! 100 000-line batch costs O(log n), not O(n). (A sorted `Vec` made such batches quadratic:
//! inserting into hash-table buckets moved half the list each time, and a per-prio protocol
//! check walked it: 75 s for a 100 000-subscriber import.) How many filters send packets to a
//! class is counted in the class's record ([`ClassTable`](super::ClassTable)), where `class
//! del` looks.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use super::filter_entry::{FilterEntry, FilterKind, NoNodeId, Protocol, U32_FIRST_ID, U32_LAST_ID};
use super::sorted_chunks::{Iter, SortedChunks};

/// A qdisc's filters in evaluation order.
#[derive(Clone, Debug, Default)]
pub struct FilterList {
    entries: SortedChunks<FilterEntry>,
    /// Per prio, how many of its filters carry each protocol (one IP protocol per prio).
    protocols: BTreeMap<u32, Vec<(Protocol, u32)>>,
}

impl PartialEq for FilterList {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for FilterList {}

impl FromIterator<FilterEntry> for FilterList {
    fn from_iter<I: IntoIterator<Item = FilterEntry>>(iter: I) -> Self {
        let mut list = Self::default();
        for entry in iter {
            list.insert(entry);
        }
        list
    }
}

impl<'a> IntoIterator for &'a FilterList {
    type Item = &'a FilterEntry;
    type IntoIter = Iter<'a, FilterEntry>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

impl FilterList {
    /// How many filters.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The filters in evaluation order.
    pub fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = &FilterEntry> + ExactSizeIterator + Clone {
        self.entries.iter()
    }

    /// Whether it holds exactly `filters`, in this order (a config file's list, in
    /// evaluation order).
    #[must_use]
    pub fn holds_exactly(&self, filters: &[FilterEntry]) -> bool {
        self.len() == filters.len() && self.iter().eq(filters)
    }

    /// The first filter (lowest prio).
    #[must_use]
    pub fn first(&self) -> Option<&FilterEntry> {
        self.entries.first()
    }

    /// The last filter (highest prio).
    #[must_use]
    pub fn last(&self) -> Option<&FilterEntry> {
        self.entries.last()
    }

    /// The filter at `prio` with `handle`.
    #[must_use]
    pub fn get(&self, prio: u32, handle: u32) -> Option<&FilterEntry> {
        self.entries.get((prio, handle))
    }

    /// Puts `entry` in its place; returns the filter it replaces (same prio and handle).
    /// (Through [`QdiscModel`](super::QdiscModel), which counts the filters of each class.)
    pub(super) fn insert(&mut self, entry: FilterEntry) -> Option<FilterEntry> {
        self.count(&entry, true);
        let old = self.entries.insert(entry);
        if let Some(old) = &old {
            self.count(old, false);
        }
        old
    }

    /// Takes out the filter at `order` (prio, handle).
    pub(super) fn remove(&mut self, order: (u32, u32)) -> Option<FilterEntry> {
        let old = self.entries.remove(order)?;
        self.count(&old, false);
        Some(old)
    }

    /// Takes out the filters `remove` picks among `prio`'s (every prio's with `None`);
    /// returns them.
    pub(super) fn remove_where(
        &mut self,
        prio: Option<u32>,
        mut remove: impl FnMut(&FilterEntry) -> bool,
    ) -> Vec<FilterEntry> {
        let range = prio.map_or((0, 0)..=(u32::MAX, u32::MAX), |p| (p, 0)..=(p, u32::MAX));
        let orders: Vec<(u32, u32)> = self
            .entries
            .range(range)
            .filter(|e| remove(e))
            .map(FilterEntry::order)
            .collect();
        orders.into_iter().filter_map(|o| self.remove(o)).collect()
    }

    fn count(&mut self, entry: &FilterEntry, add: bool) {
        let step = |n: &mut u32| {
            if add {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
            }
        };
        let protocols = self.protocols.entry(entry.prio).or_default();
        match protocols.iter_mut().find(|(p, _)| *p == entry.protocol) {
            Some((_, n)) => step(n),
            None if add => protocols.push((entry.protocol, 1)),
            None => {}
        }
        protocols.retain(|&(_, n)| n > 0);
        if protocols.is_empty() {
            self.protocols.remove(&entry.prio);
        }
    }

    /// A protocol of `prio`'s filters that a filter of `protocol` may not join: one IP
    /// protocol per prio (`all` joins any, as htb-cli reads `match ip` under `all` as IPv4).
    #[must_use]
    pub fn protocol_clash(&self, prio: u32, protocol: Protocol) -> Option<Protocol> {
        if protocol == Protocol::All {
            return None;
        }
        self.protocols
            .get(&prio)?
            .iter()
            .map(|&(p, _)| p)
            .find(|&p| p != protocol && p != Protocol::All)
    }

    /// `prio`'s filters.
    pub fn in_prio(&self, prio: u32) -> impl DoubleEndedIterator<Item = &FilterEntry> + Clone {
        self.within(prio, 0..=u32::MAX)
    }

    /// The distinct prios, in order.
    pub fn prios(&self) -> impl Iterator<Item = u32> + '_ {
        self.protocols.keys().copied()
    }

    /// `prio`'s filters with handles in `handles` (inclusive).
    fn within(
        &self,
        prio: u32,
        handles: RangeInclusive<u32>,
    ) -> impl DoubleEndedIterator<Item = &FilterEntry> + Clone {
        self.entries
            .range((prio, *handles.start())..=(prio, *handles.end()))
    }

    /// The filters with `handle`, one prio after the other (u32 table and node ids are the
    /// qdisc's, not a prio's).
    pub fn with_handle(&self, handle: u32) -> impl Iterator<Item = &FilterEntry> {
        self.prios()
            .flat_map(move |p| self.entries.get((p, handle)))
    }

    /// The hash table `table`'s declaration (made with `divisor`: it has the table's own
    /// handle).
    #[must_use]
    pub fn hash_table(&self, table: u32) -> Option<&FilterEntry> {
        self.with_handle(table << 20).find(|e| e.is_hash_table())
    }

    /// Whether `table` was made with `divisor`.
    #[must_use]
    pub fn is_hash_table(&self, table: u32) -> bool {
        self.hash_table(table).is_some()
    }

    /// Whether any u32 filter sits in `table`.
    #[must_use]
    pub fn table_used(&self, table: u32) -> bool {
        self.prios().any(|p| {
            self.within(p, table << 20..=(table << 20) | 0xf_ffff)
                .any(|e| e.kind == FilterKind::U32)
        })
    }

    /// The next free node id of `table`'s `bucket` (`gen_new_kid`: one above the highest,
    /// from 0x800), over every prio.
    #[must_use]
    pub fn next_node(&self, table: u32, bucket: u32) -> u32 {
        let base = table << 20 | bucket << 12;
        self.prios()
            .filter_map(|p| {
                self.within(p, base..=base | 0xfff)
                    .rev()
                    .find(|e| e.kind == FilterKind::U32)
                    .map(|e| (e.handle & 0xfff) + 1)
            })
            .max()
            .unwrap_or(U32_FIRST_ID)
            .max(U32_FIRST_ID)
    }

    /// The id of a new u32 table (`gen_new_htid`: above every table in use, from 0x800).
    #[must_use]
    pub fn next_table(&self) -> u32 {
        // Per prio, its highest u32 handle holds its highest table.
        let above = self
            .prios()
            .filter_map(|p| {
                self.in_prio(p)
                    .rev()
                    .find(|e| e.kind == FilterKind::U32)
                    .map(|e| (e.handle >> 20) + 1)
            })
            .max()
            .unwrap_or(U32_FIRST_ID)
            .max(U32_FIRST_ID);
        // A prio whose u32 filters all live in hash tables still has its root table (the
        // kernel's `u32_init` gives every prio one), which no handle shows: each takes an id
        // too.
        let rootless = self
            .prios()
            .filter(|&p| {
                let mut any = false;
                let all_hashed = self.tables(p).all(|table| {
                    any = true;
                    self.is_hash_table(table)
                });
                any && all_hashed
            })
            .count();
        above + u32::try_from(rootless).unwrap_or(0)
    }

    /// The u32 tables `prio`'s filters sit in, in order: one lookup per table.
    fn tables(&self, prio: u32) -> impl Iterator<Item = u32> + '_ {
        let mut from = Some(0u32);
        std::iter::from_fn(move || {
            let e = self
                .within(prio, from?..=u32::MAX)
                .find(|e| e.kind == FilterKind::U32)?;
            let table = u32::from(e.table());
            // Table ids are 12 bits: after `fff` there is none.
            from = (table < 0xfff).then(|| (table + 1) << 20);
            Some(table)
        })
    }

    /// The handle the kernel would give a new `kind` filter in `prio` without one (what
    /// [`assign_handles`](super::filter_entry::assign_handles) gives the last of a list): u32
    /// filters share the prio's root table (a new one, `800:` then `801:` …, for the prio's
    /// first) and take its next node; flower filters count from 1.
    ///
    /// # Errors
    /// The root table has no node id left.
    pub fn next_handle(&self, prio: u32, kind: FilterKind) -> Result<u32, NoNodeId> {
        match kind {
            FilterKind::Flower => Ok(self
                .in_prio(prio)
                .rev()
                .find(|e| e.kind == kind)
                .map_or(1, |e| e.handle + 1)),
            FilterKind::U32 => {
                // The prio's root table: the first table of its u32 filters that is not a
                // hash table.
                for table in self.tables(prio) {
                    if self.is_hash_table(table) {
                        continue;
                    }
                    if let Some(last) = self
                        .within(prio, table << 20..=(table << 20) | 0xf_ffff)
                        .rev()
                        .find(|f| f.kind == kind)
                    {
                        let node = (last.handle & 0xfff) + 1;
                        if node > U32_LAST_ID {
                            return Err(NoNodeId { prio, table });
                        }
                        return Ok(table << 20 | node.max(U32_FIRST_ID));
                    }
                }
                Ok(self.next_table() << 20 | U32_FIRST_ID)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::filter_entry::{Protocol, U32Parts, assign_handles};
    use super::*;

    fn entry(prio: u32, kind: FilterKind, handle: u32, divisor: bool) -> FilterEntry {
        FilterEntry::new(
            prio,
            Protocol::All,
            kind,
            handle,
            htb_config::filter::Match::default(),
            None,
        )
        .with_u32(U32Parts {
            divisor: divisor.then_some(256),
            ..U32Parts::default()
        })
    }

    /// A list as batches build it: filters added one by one with the kernel's handles, some
    /// hash tables with filters in their buckets.
    fn build(steps: &[(u32, bool, u8)]) -> FilterList {
        let mut list = FilterList::default();
        for &(prio, flower, what) in steps {
            let kind = if flower {
                FilterKind::Flower
            } else {
                FilterKind::U32
            };
            if list.in_prio(prio).any(|e| e.kind != kind) {
                continue; // a prio holds one kind
            }
            let new = match what % 4 {
                0 if kind == FilterKind::U32 => entry(prio, kind, list.next_table() << 20, true),
                1 if kind == FilterKind::U32 => {
                    let Some(table) = list
                        .iter()
                        .rev()
                        .find(|e| e.is_hash_table())
                        .map(|e| u32::from(e.table()))
                    else {
                        continue;
                    };
                    let bucket = u32::from(what) % 3;
                    let node = list.next_node(table, bucket);
                    entry(prio, kind, table << 20 | bucket << 12 | node, false)
                }
                _ => {
                    let mut all: Vec<(FilterEntry, bool)> =
                        list.iter().map(|e| (e.clone(), true)).collect();
                    all.push((entry(prio, kind, 0, false), false));
                    assign_handles(&mut all).unwrap();
                    let want = all.last().unwrap().0.handle;
                    assert_eq!(
                        list.next_handle(prio, kind).unwrap(),
                        want,
                        "prio {prio} {kind:?} in {:?}",
                        list.iter().map(|e| (e.prio, e.handle)).collect::<Vec<_>>()
                    );
                    entry(prio, kind, want, false)
                }
            };
            list.insert(new);
        }
        list
    }

    /// One filter for the index test: any prio, handle and protocol.
    fn indexed(prio: u32, handle: u32, protocol: u8) -> FilterEntry {
        let mut e = entry(prio, FilterKind::U32, handle, false);
        e.protocol = [Protocol::All, Protocol::Ip, Protocol::Ipv6][usize::from(protocol % 3)];
        e
    }

    proptest! {
        /// The protocol index agrees with a walk of the list after any sequence of inserts
        /// (some replacing), single removes and removals by prio, and the list stays in
        /// (prio, handle) order.
        #[test]
        fn indexes_agree_with_a_walk(
            ops in proptest::collection::vec((0u8..4, 1u32..4, 0u32..6, 0u8..3), 0..80)
        ) {
            let mut list = FilterList::default();
            for (op, prio, handle, protocol) in ops {
                match op {
                    0 | 1 => {
                        list.insert(indexed(prio, handle, protocol));
                    }
                    2 => {
                        list.remove((prio, handle));
                    }
                    _ => {
                        list.remove_where(Some(prio), |e| e.handle % 2 == handle % 2);
                    }
                }
                let orders: Vec<(u32, u32)> = list.iter().map(FilterEntry::order).collect();
                prop_assert!(orders.windows(2).all(|w| w[0] < w[1]));
                for p in 1..4 {
                    for protocol in [Protocol::All, Protocol::Ip, Protocol::Ipv6] {
                        let walk = list.in_prio(p).map(|e| e.protocol).find(|&q| {
                            q != protocol && q != Protocol::All && protocol != Protocol::All
                        });
                        prop_assert_eq!(list.protocol_clash(p, protocol).is_some(), walk.is_some());
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        #[test]
        fn next_handle_is_what_assign_handles_gives(
            steps in proptest::collection::vec((1u32..5, any::<bool>(), any::<u8>()), 0..60)
        ) {
            let list = build(&steps);
            let prios: Vec<u32> = list.prios().collect();
            let mut all: Vec<u32> = list.iter().map(|e| e.prio).collect();
            all.dedup();
            prop_assert_eq!(prios, all);
            for p in list.prios() {
                prop_assert!(list.in_prio(p).all(|e| e.prio == p));
            }
            for e in &list {
                prop_assert!(list.with_handle(e.handle).any(|f| f == e));
            }
        }
    }
}
