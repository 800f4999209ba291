//! Lookups in a qdisc's filter list, which is kept sorted by (prio, handle): binary searches per
//! distinct prio instead of walks of the whole list, so that each `filter add` of a
//! 100 000-filter batch costs O(prios × log n), not O(n) (the walks made such a batch quadratic:
//! 80 s for 100 000 subscribers).

use std::ops::Range;

use super::filter_entry::{FilterEntry, FilterKind, NoNodeId, U32_FIRST_ID, U32_LAST_ID};

/// The positions of `prio`'s filters.
pub(super) fn prio_range(filters: &[FilterEntry], prio: u32) -> Range<usize> {
    let start = filters.partition_point(|e| e.prio < prio);
    let end = start + filters[start..].partition_point(|e| e.prio == prio);
    start..end
}

/// The distinct prios, in order (one binary search each).
pub(super) fn prios(filters: &[FilterEntry]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(e) = filters.get(at) {
        out.push(e.prio);
        at += filters[at..].partition_point(|f| f.prio == e.prio);
    }
    out
}

/// `prio`'s filters with handles in `handles` (inclusive).
fn within(
    filters: &[FilterEntry],
    prio: u32,
    handles: std::ops::RangeInclusive<u32>,
) -> &[FilterEntry] {
    let range = prio_range(filters, prio);
    let slice = &filters[range];
    let start = slice.partition_point(|e| e.handle < *handles.start());
    let end = slice.partition_point(|e| e.handle <= *handles.end());
    &slice[start..end.max(start)]
}

/// The filters with `handle`, one prio after the other (u32 table and node ids are the
/// qdisc's, not a prio's).
pub(super) fn with_handle(
    filters: &[FilterEntry],
    handle: u32,
) -> impl Iterator<Item = &FilterEntry> {
    prios(filters)
        .into_iter()
        .flat_map(move |p| within(filters, p, handle..=handle))
}

/// The hash table `table`'s declaration (made with `divisor`: it has the table's own handle).
pub(super) fn hash_table(filters: &[FilterEntry], table: u32) -> Option<&FilterEntry> {
    with_handle(filters, table << 20).find(|e| e.u32.divisor.is_some())
}

/// Whether `table` was made with `divisor`.
pub(super) fn is_hash_table(filters: &[FilterEntry], table: u32) -> bool {
    hash_table(filters, table).is_some()
}

/// Whether any u32 filter sits in `table`.
pub(super) fn table_used(filters: &[FilterEntry], table: u32) -> bool {
    prios(filters).into_iter().any(|p| {
        within(filters, p, table << 20..=(table << 20) | 0xf_ffff)
            .iter()
            .any(|e| e.kind == FilterKind::U32)
    })
}

/// The next free node id of `table`'s `bucket` (`gen_new_kid`: one above the highest, from
/// 0x800), over every prio.
pub(super) fn next_node(filters: &[FilterEntry], table: u32, bucket: u32) -> u32 {
    let base = table << 20 | bucket << 12;
    prios(filters)
        .into_iter()
        .filter_map(|p| {
            within(filters, p, base..=base | 0xfff)
                .iter()
                .rev()
                .find(|e| e.kind == FilterKind::U32)
                .map(|e| (e.handle & 0xfff) + 1)
        })
        .max()
        .unwrap_or(U32_FIRST_ID)
        .max(U32_FIRST_ID)
}

/// The id of a new u32 table (`gen_new_htid`: above every table in use, from 0x800). A walk:
/// new tables are rare (one per prio's first filter, one per `divisor`).
pub(super) fn next_table(filters: &[FilterEntry]) -> u32 {
    let above = filters
        .iter()
        .filter(|e| e.kind == FilterKind::U32)
        .map(|e| (e.handle >> 20) + 1)
        .max()
        .unwrap_or(U32_FIRST_ID)
        .max(U32_FIRST_ID);
    // A prio whose u32 filters all live in hash tables still has its root table (the kernel's
    // `u32_init` gives every prio one), which no handle shows: each takes an id too.
    let rootless = prios(filters)
        .into_iter()
        .filter(|&p| {
            let mut u32s = within_prio(filters, p).filter(|e| e.kind == FilterKind::U32);
            let mut any = false;
            let all_hashed = u32s.all(|e| {
                any = true;
                is_hash_table(filters, u32::from(e.table()))
            });
            any && all_hashed
        })
        .count();
    above + u32::try_from(rootless).unwrap_or(0)
}

/// The filters at `prio`.
fn within_prio(filters: &[FilterEntry], prio: u32) -> impl Iterator<Item = &FilterEntry> {
    filters[prio_range(filters, prio)].iter()
}

/// The handle the kernel would give a new `kind` filter in `prio` without one (what
/// [`assign_handles`](super::filter_entry::assign_handles) gives the last of a list): u32
/// filters share the prio's root table (a new one, `800:` then `801:` …, for the prio's first)
/// and take its next node; flower filters count from 1.
///
/// # Errors
/// The root table has no node id left.
pub(super) fn next_handle(
    filters: &[FilterEntry],
    prio: u32,
    kind: FilterKind,
) -> Result<u32, NoNodeId> {
    let range = prio_range(filters, prio);
    let slice = &filters[range];
    match kind {
        FilterKind::Flower => Ok(slice
            .iter()
            .rev()
            .find(|e| e.kind == kind)
            .map_or(1, |e| e.handle + 1)),
        FilterKind::U32 => {
            // The prio's root table: its first u32 filter outside the hash tables. Filters of
            // one table are adjacent (sorted by handle), so the walk jumps table by table.
            let mut at = 0;
            while let Some(e) = slice.get(at) {
                let table = u32::from(e.table());
                let end = at + slice[at..].partition_point(|f| f.handle >> 20 == table);
                if !is_hash_table(filters, table)
                    && let Some(last) = slice[at..end].iter().rev().find(|f| f.kind == kind)
                {
                    let node = (last.handle & 0xfff) + 1;
                    if node > U32_LAST_ID {
                        return Err(NoNodeId { prio, table });
                    }
                    return Ok(table << 20 | node.max(U32_FIRST_ID));
                }
                at = end;
            }
            Ok(next_table(filters) << 20 | U32_FIRST_ID)
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::filter_entry::{Protocol, U32Parts, assign_handles};
    use super::*;

    fn entry(prio: u32, kind: FilterKind, handle: u32, divisor: bool) -> FilterEntry {
        FilterEntry {
            prio,
            protocol: Protocol::All,
            kind,
            handle,
            matcher: htb_config::filter::Match::default(),
            class: None,
            police: None,
            redirect: None,
            u32: U32Parts {
                divisor: divisor.then_some(256),
                ..U32Parts::default()
            },
        }
    }

    /// A list as batches build it: filters added one by one with the kernel's handles, some
    /// hash tables with filters in their buckets.
    fn build(steps: &[(u32, bool, u8)]) -> Vec<FilterEntry> {
        let mut list: Vec<FilterEntry> = Vec::new();
        for &(prio, flower, what) in steps {
            let kind = if flower {
                FilterKind::Flower
            } else {
                FilterKind::U32
            };
            if prio_range(&list, prio)
                .clone()
                .any(|i| list[i].kind != kind)
            {
                continue; // a prio holds one kind
            }
            let new = match what % 4 {
                0 if kind == FilterKind::U32 => entry(prio, kind, next_table(&list) << 20, true),
                1 if kind == FilterKind::U32 => {
                    let Some(table) = list
                        .iter()
                        .rev()
                        .find(|e| e.u32.divisor.is_some())
                        .map(|e| u32::from(e.table()))
                    else {
                        continue;
                    };
                    let bucket = u32::from(what) % 3;
                    let node = next_node(&list, table, bucket);
                    entry(prio, kind, table << 20 | bucket << 12 | node, false)
                }
                _ => {
                    let mut all: Vec<(FilterEntry, bool)> =
                        list.iter().map(|e| (e.clone(), true)).collect();
                    all.push((entry(prio, kind, 0, false), false));
                    assign_handles(&mut all).unwrap();
                    let want = all.last().unwrap().0.handle;
                    assert_eq!(
                        next_handle(&list, prio, kind).unwrap(),
                        want,
                        "prio {prio} {kind:?} in {:?}",
                        list.iter().map(|e| (e.prio, e.handle)).collect::<Vec<_>>()
                    );
                    entry(prio, kind, want, false)
                }
            };
            let at = list.partition_point(|e| e.order() <= new.order());
            list.insert(at, new);
        }
        list
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        #[test]
        fn next_handle_is_what_assign_handles_gives(
            steps in proptest::collection::vec((1u32..5, any::<bool>(), any::<u8>()), 0..60)
        ) {
            let list = build(&steps);
            for p in prios(&list) {
                prop_assert!(prio_range(&list, p).all(|i| list[i].prio == p));
            }
            for e in &list {
                prop_assert!(with_handle(&list, e.handle).any(|f| f == e));
            }
        }
    }
}
