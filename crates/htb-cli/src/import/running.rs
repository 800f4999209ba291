//! What runs on one port as htbd shows it (its classes, filters and leaf qdiscs), looked up
//! as the sync needs it: a class by id, what is below a node, the filters the import owns.

use htb_config::filter::{Family, IpPrefix};
use htb_core::{ClassId, LeafConfig};
use htb_ipc::{ClassInfo, FilterHandle, FilterInfo, FilterKind, LeafQdiscInfo};

use super::circuits::{Direction, Placement};

/// One port's trees as htbd shows them.
#[derive(Debug, Clone, Default)]
pub struct Running {
    /// `class show`.
    pub classes: Vec<ClassInfo>,
    /// `filter show`.
    pub filters: Vec<FilterInfo>,
    /// `qdisc show`: the classes' own leaf qdiscs.
    pub leaves: Vec<LeafQdiscInfo>,
    /// `classes` by id (with the length it was built for), so that a lookup is not a walk of
    /// every class parsing each id: at 10 000 circuits the walks made a sync take 13 s.
    index: std::cell::RefCell<(usize, std::collections::HashMap<ClassId, usize>)>,
}

/// A prefix as a key (`IpPrefix` keeps the address as written).
pub(super) type AddressKey = (bool, u128, u8);

pub(super) fn key(p: &IpPrefix) -> AddressKey {
    (p.family() == Family::V6, p.network_bits(), p.prefix_len())
}

/// A filter the import owns: one address to one class.
#[derive(Debug, Clone)]
pub(super) struct Owned {
    pub(super) address: AddressKey,
    pub(super) class: ClassId,
    pub(super) prio: u32,
    pub(super) handle: FilterHandle,
}

impl Running {
    /// A port's classes, filters and leaf qdiscs.
    #[must_use]
    pub fn new(
        classes: Vec<ClassInfo>,
        filters: Vec<FilterInfo>,
        leaves: Vec<LeafQdiscInfo>,
    ) -> Self {
        Self {
            classes,
            filters,
            leaves,
            index: std::cell::RefCell::default(),
        }
    }

    pub(super) fn class(&self, id: ClassId) -> Option<&ClassInfo> {
        let hit = |index: &std::collections::HashMap<ClassId, usize>| {
            index
                .get(&id)
                .copied()
                .filter(|&i| self.classes.get(i).is_some_and(|c| c.id == id))
        };
        let cached = {
            let index = self.index.borrow();
            (index.0 == self.classes.len()).then(|| hit(&index.1))
        };
        let at = match cached {
            Some(at) => at,
            None => {
                // Built for another list (the classes changed): build it again.
                let mut index = self.index.borrow_mut();
                index.1 = self
                    .classes
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.id, i))
                    .collect();
                index.0 = self.classes.len();
                hit(&index.1)
            }
        };
        at.map(|i| &self.classes[i])
    }

    pub(super) fn parent_of(&self, id: ClassId) -> Option<ClassId> {
        self.class(id)?.parent
    }

    /// Whether `id` is below `top` (not `top` itself).
    pub(super) fn is_below(&self, id: ClassId, top: ClassId) -> bool {
        let mut at = id;
        for _ in 0..self.classes.len() {
            match self.parent_of(at) {
                Some(p) if p == top => return true,
                Some(p) => at = p,
                None => return false,
            }
        }
        false
    }

    /// The filters at the import's prios that match one address (`dst` towards the
    /// subscribers, `src` from them) and name a class under `parent`.
    pub(super) fn owned(&self, placement: &Placement, direction: Direction) -> Vec<Owned> {
        let prios = [placement.prio, placement.prio + 1];
        self.filters
            .iter()
            .filter(|f| prios.contains(&f.prio) && f.kind == FilterKind::U32)
            // In a table's bucket or the root table; not a table or a link.
            .filter(|f| f.hashing.divisor.is_none() && f.hashing.link.is_none())
            .filter_map(|f| {
                let m = &f.matcher;
                let address = match direction {
                    Direction::Download if m.src.is_none() => m.dst?,
                    Direction::Upload if m.dst.is_none() => m.src?,
                    _ => return None,
                };
                // Nothing but the address (the family is the filter's protocol).
                let bare = htb_ipc::Match {
                    src: None,
                    dst: None,
                    family: None,
                    arp: false,
                    ..*m
                };
                if !bare.is_empty() {
                    return None;
                }
                let class = f.class?;
                self.is_below(class, placement.parent).then(|| Owned {
                    address: key(&address),
                    class,
                    prio: f.prio,
                    handle: f.handle,
                })
            })
            .collect()
    }

    pub(super) fn leaf(&self, id: ClassId) -> Option<&LeafConfig> {
        self.leaves
            .iter()
            .find(|l| l.parent == Some(id) && l.handle.is_some())
            .map(|l| &l.config)
    }
}
