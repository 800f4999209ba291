//! Which worker serves which classes of a port.
//!
//! A tree is cut into subtrees as LibreQoS places subscribers: each child of a class at the
//! top of the tree (with everything below it) is one subtree, and so is a top-level class
//! itself (it matters when it is a leaf). Each subtree belongs to one worker, which holds its
//! packets and runs its buckets; the classes at the top, which every subtree borrows from,
//! share their buckets between the workers (`htb_core::SharedBuckets`).
//!
//! The rule is stable: a new subtree goes to the worker with the fewest, ties to the lowest
//! index, and a subtree never moves while it exists. A new tree (`qdisc replace`, a restart)
//! is assigned afresh in class-id order, so the same tree always maps the same way.
//!
//! A subtree may instead be *split* (`split.rs` decides): served by every worker at once, each
//! queueing what it receives in its own copy, all of them sharing its classes' buckets. It
//! has no owner and counts in no worker's load; should it become owned again, it goes to the
//! worker with the fewest, as a new one.

use std::collections::{BTreeMap, BTreeSet};

use htb_core::{ClassId, Packet, Scheduler};

/// Who serves a subtree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Server {
    /// This worker: the others hand it the subtree's frames.
    Worker(u16),
    /// Every worker, each the frames it received (a split subtree).
    Every,
}

impl Server {
    /// The worker that queues a frame of the subtree received by worker `me`.
    pub(crate) fn for_frame_of(self, me: u16) -> u16 {
        match self {
            Self::Worker(w) => w,
            Self::Every => me,
        }
    }
}

/// One port's subtrees and their workers.
#[derive(Clone, Debug, Default)]
pub(crate) struct Assignment {
    /// A B-tree: it grows on the data-plane thread, where a hash map's doubling rehashed every
    /// subtree in one job.
    owner: BTreeMap<ClassId, Server>,
    /// The split subtrees (those `owner` maps to [`Server::Every`]), kept apart so that
    /// listing or counting them does not walk every subtree: `htbd`'s status asks every
    /// second, and at 200 000 subscribers that walk was a 5 ms data-plane job.
    split: BTreeSet<ClassId>,
    /// Owned subtrees per worker.
    load: Vec<u32>,
}

/// A tree's shape: class `id`'s parent (`None`: no class `id`; `Some(None)`: at the top).
/// A worker's scheduler has it, and so has the fleet's view of the tree (`tree_view.rs`).
pub(crate) trait Parents {
    fn parent(&self, id: ClassId) -> Option<Option<ClassId>>;
}

impl<P: Packet> Parents for Scheduler<P> {
    fn parent(&self, id: ClassId) -> Option<Option<ClassId>> {
        Self::parent(self, id)
    }
}

/// Whether class `id` tops a subtree: it is at the top of the tree, or its parent is.
pub(crate) fn is_subtree_top<T: Parents + ?Sized>(htb: &T, id: ClassId) -> bool {
    match htb.parent(id) {
        Some(None) => true,
        Some(Some(parent)) => htb.parent(parent) == Some(None),
        None => false,
    }
}

/// The top of the subtree class `id` is in (`id` itself for a top), as the data plane's
/// owner lookup (`TreeView::owner_of`) walks it. `None`: no such class.
pub(crate) fn subtree_of<T: Parents + ?Sized>(htb: &T, id: ClassId) -> Option<ClassId> {
    htb.parent(id)?;
    let mut unit = id;
    while let Some(Some(parent)) = htb.parent(unit) {
        if htb.parent(parent) == Some(None) {
            break;
        }
        unit = parent;
    }
    Some(unit)
}

/// The worker a new owned subtree goes to: the one with the fewest, ties to the lowest index.
/// `Fleet::apply` routes a new subtree with it before the batch, on a copy of the loads.
pub(crate) fn least_loaded(load: &[u32]) -> usize {
    load.iter()
        .enumerate()
        .min_by_key(|&(i, load)| (*load, i))
        .map_or(0, |(w, _)| w)
}

impl Assignment {
    /// No subtrees, for `workers` workers.
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            owner: BTreeMap::new(),
            split: BTreeSet::new(),
            load: vec![0; workers.max(1)],
        }
    }

    /// Places subtree `top`: split (served by every worker), or owned — by its owner if it
    /// has one, else by the worker with the fewest. Returns who serves it now.
    pub(crate) fn place(&mut self, top: ClassId, split: bool) -> Server {
        match (self.owner.get(&top).copied(), split) {
            (Some(Server::Every), true) => return Server::Every,
            (Some(Server::Worker(w)), false) => return Server::Worker(w),
            (Some(Server::Worker(w)), true) => self.load[usize::from(w)] -= 1,
            (Some(Server::Every) | None, _) => {}
        }
        let server = if split {
            self.split.insert(top);
            Server::Every
        } else {
            self.split.remove(&top);
            let w = least_loaded(&self.load);
            self.load[w] += 1;
            Server::Worker(u16::try_from(w).unwrap_or(0))
        };
        self.owner.insert(top, server);
        server
    }

    /// Forgets a subtree. Returns whether it was one.
    pub(crate) fn remove(&mut self, top: ClassId) -> bool {
        match self.owner.remove(&top) {
            Some(Server::Worker(w)) => {
                self.load[usize::from(w)] -= 1;
                true
            }
            Some(Server::Every) => {
                self.split.remove(&top);
                true
            }
            None => false,
        }
    }

    /// Forgets every subtree.
    pub(crate) fn clear(&mut self) {
        self.owner.clear();
        self.split.clear();
        self.load.iter_mut().for_each(|l| *l = 0);
    }

    /// Who serves subtree `top`.
    pub(crate) fn server(&self, top: ClassId) -> Option<Server> {
        self.owner.get(&top).copied()
    }

    /// Owned subtrees per worker.
    pub(crate) fn load(&self) -> &[u32] {
        &self.load
    }

    /// The split subtrees, by their top, in class-id order.
    pub(crate) fn split(&self) -> impl ExactSizeIterator<Item = ClassId> + '_ {
        self.split.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ClassId {
        s.parse().unwrap()
    }

    #[test]
    fn subtrees_go_to_the_least_loaded_worker_and_stay() {
        let mut a = Assignment::new(2);
        let owned = |a: &mut Assignment, top| a.place(id(top), false);
        assert_eq!(owned(&mut a, "1:10"), Server::Worker(0));
        assert_eq!(owned(&mut a, "1:20"), Server::Worker(1));
        assert_eq!(owned(&mut a, "1:30"), Server::Worker(0));
        assert_eq!(owned(&mut a, "1:10"), Server::Worker(0), "known: unchanged");
        assert!(a.remove(id("1:10")));
        assert!(!a.remove(id("1:10")));
        // Worker 0 has one now, worker 1 one: a tie goes to the lower index.
        assert_eq!(owned(&mut a, "1:40"), Server::Worker(0));
        assert_eq!(
            a.server(id("1:20")),
            Some(Server::Worker(1)),
            "existing subtrees never move"
        );
        assert_eq!(a.load(), [2, 1]);
        a.clear();
        assert_eq!(a.load(), [0, 0]);
        assert_eq!(a.server(id("1:20")), None);
    }

    /// A split subtree has no owner and weighs on no worker; owned again, it goes to the
    /// worker with the fewest.
    #[test]
    fn a_split_subtree_is_nobody_s_load() {
        let mut a = Assignment::new(2);
        assert_eq!(a.place(id("1:10"), false), Server::Worker(0));
        assert_eq!(a.place(id("1:20"), true), Server::Every);
        assert_eq!(a.load(), [1, 0]);
        assert_eq!(
            a.place(id("1:10"), true),
            Server::Every,
            "owned, then split"
        );
        assert_eq!(a.load(), [0, 0]);
        assert_eq!(a.split().collect::<Vec<_>>(), [id("1:10"), id("1:20")]);
        assert_eq!(a.place(id("1:30"), false), Server::Worker(0));
        assert_eq!(a.place(id("1:20"), false), Server::Worker(1), "the fewest");
        assert_eq!(a.load(), [1, 1]);
        assert!(a.remove(id("1:10")));
        assert_eq!(a.load(), [1, 1], "a split subtree leaves no load behind");
        assert_eq!(Server::Every.for_frame_of(3), 3);
        assert_eq!(Server::Worker(1).for_frame_of(3), 1);
    }

    proptest::proptest! {
        /// Whatever the sequence of placements and removals, the split subtrees listed are
        /// those served by every worker, and the loads count each worker's owned subtrees.
        #[test]
        fn the_split_list_and_the_loads_follow_the_owners(
            steps in proptest::collection::vec((0u8..3, 1u32..12, proptest::bool::ANY), 0..80)
        ) {
            let mut a = Assignment::new(3);
            for (what, minor, split) in steps {
                let top = ClassId::new(1, minor);
                match what {
                    0 | 1 => {
                        a.place(top, split);
                    }
                    _ if minor == 11 => a.clear(),
                    _ => {
                        a.remove(top);
                    }
                }
                let every: Vec<ClassId> = a
                    .owner
                    .iter()
                    .filter(|(_, s)| **s == Server::Every)
                    .map(|(&t, _)| t)
                    .collect();
                proptest::prop_assert_eq!(a.split().collect::<Vec<_>>(), every);
                for w in 0..3u16 {
                    let owned = a.owner.values().filter(|s| **s == Server::Worker(w)).count();
                    proptest::prop_assert_eq!(a.load()[usize::from(w)] as usize, owned);
                }
            }
        }
    }

    #[test]
    fn subtree_tops_are_top_level_classes_and_their_children() {
        use htb_core::{ClassSpec, Instant, Rate, SchedulerConfig};
        #[derive(Debug)]
        struct P;
        impl Packet for P {
            fn len_bytes(&self) -> u32 {
                64
            }
        }
        let mut s: Scheduler<P> = Scheduler::new(SchedulerConfig::default());
        let spec = ClassSpec::new(Rate::from_kbit(1000));
        let _ = s.add_class(Instant::ZERO, id("1:1"), None, &spec).unwrap();
        let _ = s
            .add_class(Instant::ZERO, id("1:10"), Some(id("1:1")), &spec)
            .unwrap();
        let _ = s
            .add_class(Instant::ZERO, id("1:100"), Some(id("1:10")), &spec)
            .unwrap();
        assert!(is_subtree_top(&s, id("1:1")));
        assert!(is_subtree_top(&s, id("1:10")));
        assert!(!is_subtree_top(&s, id("1:100")));
        assert!(!is_subtree_top(&s, id("1:99")), "not a class");
        assert_eq!(subtree_of(&s, id("1:100")), Some(id("1:10")));
        assert_eq!(subtree_of(&s, id("1:10")), Some(id("1:10")));
        assert_eq!(subtree_of(&s, id("1:1")), Some(id("1:1")));
        assert_eq!(subtree_of(&s, id("1:99")), None);
    }
}
