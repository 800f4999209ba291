//! Class minor → arena slot, growing in small steps.
//!
//! A hash map of every class rehashes all its entries when it doubles: at 65 536 classes that
//! was a millisecond and more on the data-plane thread, and the step grows with the tree. Here
//! minors are looked up in pages of [`PAGE`] consecutive minors: a new page is one small
//! allocation, and only the directory of pages (256 times smaller than the map was) ever
//! rehashes. Dense minors, as `htb-cli import` gives them, cost 4 bytes per class; a page whose
//! last class goes is freed, so churn over sparse minors does not accumulate.

use alloc::boxed::Box;

use hashbrown::HashMap;

use super::arena::{ClassIdx, NO_CLASS};

const PAGE_BITS: u32 = 8;
/// Minors per page.
const PAGE: usize = 1 << PAGE_BITS;

#[derive(Clone, Debug)]
struct Page {
    slots: [ClassIdx; PAGE],
    used: u32,
}

/// A map from class minor to arena slot.
#[derive(Clone, Debug, Default)]
pub(crate) struct IdMap {
    pages: HashMap<u32, Box<Page>>,
    len: usize,
}

impl IdMap {
    /// How many minors are mapped.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn get(&self, minor: u32) -> Option<ClassIdx> {
        let page = self.pages.get(&(minor >> PAGE_BITS))?;
        let slot = page.slots[minor as usize & (PAGE - 1)];
        (slot != NO_CLASS).then_some(slot)
    }

    /// Maps `minor` to `slot` (which is not [`NO_CLASS`]), replacing any earlier slot.
    pub(crate) fn insert(&mut self, minor: u32, slot: ClassIdx) {
        let page = self.pages.entry(minor >> PAGE_BITS).or_insert_with(|| {
            Box::new(Page {
                slots: [NO_CLASS; PAGE],
                used: 0,
            })
        });
        let entry = &mut page.slots[minor as usize & (PAGE - 1)];
        if *entry == NO_CLASS {
            page.used += 1;
            self.len += 1;
        }
        *entry = slot;
    }

    /// Unmaps `minor`; returns its slot.
    pub(crate) fn remove(&mut self, minor: u32) -> Option<ClassIdx> {
        let key = minor >> PAGE_BITS;
        let page = self.pages.get_mut(&key)?;
        let entry = &mut page.slots[minor as usize & (PAGE - 1)];
        let slot = core::mem::replace(entry, NO_CLASS);
        if slot == NO_CLASS {
            return None;
        }
        page.used -= 1;
        self.len -= 1;
        if page.used == 0 {
            self.pages.remove(&key);
        }
        Some(slot)
    }

    /// Makes room in the directory for `classes` more dense minors.
    pub(crate) fn reserve(&mut self, classes: usize) {
        self.pages.reserve(classes.div_ceil(PAGE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use proptest::prelude::*;

    proptest! {
        /// Inserts and removes over dense and sparse minors behave as a map's, and emptied
        /// pages go.
        #[test]
        fn behaves_as_a_map(
            ops in proptest::collection::vec((any::<bool>(), 0u32..2000, any::<bool>()), 0..2000),
        ) {
            let mut map = IdMap::default();
            let mut model = BTreeMap::new();
            for (insert, low, sparse) in ops {
                // Sparse minors spread over the whole 32-bit range, one page each.
                let minor = if sparse { low.wrapping_mul(2_147_483) } else { low };
                if insert {
                    let slot = low;
                    map.insert(minor, slot);
                    model.insert(minor, slot);
                } else {
                    prop_assert_eq!(map.remove(minor), model.remove(&minor));
                }
                prop_assert_eq!(map.len(), model.len());
            }
            for (&minor, &slot) in &model {
                prop_assert_eq!(map.get(minor), Some(slot));
            }
            for minor in 0..2000 {
                prop_assert_eq!(map.get(minor), model.get(&minor).copied());
            }
            let pages: alloc::collections::BTreeSet<u32> =
                model.keys().map(|m| m >> PAGE_BITS).collect();
            prop_assert_eq!(map.pages.len(), pages.len());
        }
    }
}
