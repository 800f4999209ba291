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

use std::collections::BTreeMap;

use htb_core::{ClassId, Packet, Scheduler};

/// One port's subtrees and their workers.
#[derive(Debug, Default)]
pub(crate) struct Assignment {
    /// A B-tree: it grows on the data-plane thread, where a hash map's doubling rehashed every
    /// subtree in one job.
    owner: BTreeMap<ClassId, u16>,
    /// Subtrees per worker.
    load: Vec<u32>,
}

/// Whether class `id` tops a subtree: it is at the top of the tree, or its parent is.
pub(crate) fn is_subtree_top<P: Packet>(htb: &Scheduler<P>, id: ClassId) -> bool {
    match htb.parent(id) {
        Some(None) => true,
        Some(Some(parent)) => htb.parent(parent) == Some(None),
        None => false,
    }
}

impl Assignment {
    /// No subtrees, for `workers` workers.
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            owner: BTreeMap::new(),
            load: vec![0; workers.max(1)],
        }
    }

    /// Assigns a new subtree: to the worker with the fewest. Returns that worker (the old one
    /// if `top` had one).
    pub(crate) fn add(&mut self, top: ClassId) -> u16 {
        if let Some(&w) = self.owner.get(&top) {
            return w;
        }
        let (w, _) = self
            .load
            .iter()
            .enumerate()
            .min_by_key(|&(i, load)| (*load, i))
            .unwrap_or((0, &0));
        self.load[w] += 1;
        let w = u16::try_from(w).unwrap_or(0);
        self.owner.insert(top, w);
        w
    }

    /// Forgets a subtree. Returns whether it was one.
    pub(crate) fn remove(&mut self, top: ClassId) -> bool {
        match self.owner.remove(&top) {
            Some(w) => {
                self.load[usize::from(w)] -= 1;
                true
            }
            None => false,
        }
    }

    /// Forgets every subtree.
    pub(crate) fn clear(&mut self) {
        self.owner.clear();
        self.load.iter_mut().for_each(|l| *l = 0);
    }

    /// The worker serving subtree `top`.
    #[cfg(test)]
    pub(crate) fn owner(&self, top: ClassId) -> Option<u16> {
        self.owner.get(&top).copied()
    }

    /// Subtrees per worker.
    pub(crate) fn load(&self) -> &[u32] {
        &self.load
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
        assert_eq!(a.add(id("1:10")), 0);
        assert_eq!(a.add(id("1:20")), 1);
        assert_eq!(a.add(id("1:30")), 0);
        assert_eq!(a.add(id("1:10")), 0, "known: unchanged");
        assert!(a.remove(id("1:10")));
        assert!(!a.remove(id("1:10")));
        // Worker 0 has one now, worker 1 one: a tie goes to the lower index.
        assert_eq!(a.add(id("1:40")), 0);
        assert_eq!(a.owner(id("1:20")), Some(1), "existing subtrees never move");
        assert_eq!(a.load(), [2, 1]);
        a.clear();
        assert_eq!(a.load(), [0, 0]);
        assert_eq!(a.owner(id("1:20")), None);
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
    }
}
