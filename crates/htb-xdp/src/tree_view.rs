//! The fleet's view of one port's root tree: per class, once for all the workers, its parent,
//! its rate, how many children it has and whether its buckets are shared; the default class;
//! and who serves each subtree (`assign.rs`). The fleet keeps it up to date from the
//! operations it applies, so that it never reads a worker's scheduler to know the tree's shape.
//!
//! The data plane reads the same view to find the worker that owns a frame's class (the owner
//! map): every worker of a port holds an `Arc` of the one view, so a worker that does not hold
//! a class still knows whom to hand its frames to, and the owners cost one map per port, not
//! one per worker. The view is written only during a job, while every worker is parked: the
//! fleet takes the workers' `Arc`s back (`Fleet::apply`), writes through the one left, and
//! hands clones out again — no lock, nothing for a pass to wait on. A lookup walks the class's
//! parents in a B-tree: O(depth · log n), depth at most 8.

use std::collections::{BTreeMap, BTreeSet};

use htb_core::{ClassId, Packet, Rate, Scheduler, SchedulerConfig, TreeSpec};

use crate::assign::{Assignment, Parents, Server, subtree_of};

/// One class as the fleet sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClassView {
    /// Its parent (`None`: at the top of the tree).
    pub(crate) parent: Option<ClassId>,
    /// Its rate (the split rule reads a subtree top's).
    pub(crate) rate: Rate,
    /// Its children: none makes it a leaf.
    pub(crate) children: u32,
    /// Whether the fleet shared its buckets between the workers.
    pub(crate) shared: bool,
}

impl ClassView {
    /// A class just added: no children yet, its buckets not shared.
    fn new(parent: Option<ClassId>, rate: Rate) -> Self {
        Self {
            parent,
            rate,
            children: 0,
            shared: false,
        }
    }
}

/// A port's root tree as the fleet sees it, and who serves its subtrees.
#[derive(Clone, Debug)]
pub(crate) struct TreeView {
    /// The root tree's qdisc major (`None`: the port has no tree at its root).
    major: Option<u16>,
    /// The qdisc's `default` minor.
    default_minor: u32,
    /// A B-tree, as the assignment's: it grows during jobs on the data-plane thread.
    classes: BTreeMap<ClassId, ClassView>,
    /// Who serves each subtree.
    pub(crate) assignment: Assignment,
    /// Subtrees (by their top) every worker holds though one may own them: split once, their
    /// classes stay where they are, and frames queued in a copy drain there.
    everywhere: BTreeSet<ClassId>,
}

impl Parents for TreeView {
    fn parent(&self, id: ClassId) -> Option<Option<ClassId>> {
        self.classes.get(&id).map(|c| c.parent)
    }
}

impl TreeView {
    /// No root tree, for `workers` workers.
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            major: None,
            default_minor: 0,
            classes: BTreeMap::new(),
            assignment: Assignment::new(workers),
            everywhere: BTreeSet::new(),
        }
    }

    /// The root tree's qdisc major, if the port has a root tree.
    pub(crate) fn major(&self) -> Option<u16> {
        self.major
    }

    /// Whether class `id` belongs to the root tree this view follows.
    pub(crate) fn covers(&self, id: ClassId) -> bool {
        self.major == Some(id.major())
    }

    /// Class `id`, if the tree has it.
    pub(crate) fn class(&self, id: ClassId) -> Option<&ClassView> {
        self.classes.get(&id)
    }

    /// The class ids, in order.
    pub(crate) fn class_ids(&self) -> impl Iterator<Item = ClassId> + '_ {
        self.classes.keys().copied()
    }

    /// Classes in the view.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.classes.len()
    }

    /// Follows a new root tree `htb` (`None`: the port's root tree went): its classes, none
    /// shared (a new tree's schedulers are new), and no subtree assigned yet.
    pub(crate) fn set_tree<P: Packet>(&mut self, htb: Option<&Scheduler<P>>) {
        match htb {
            Some(htb) => self.replace_tree(Self::of_scheduler(htb)),
            None => {
                self.classes.clear();
                self.assignment.clear();
                self.everywhere.clear();
                self.major = None;
                self.default_minor = 0;
            }
        }
    }

    /// Follows the root tree `new` describes (`of_scheduler`, `of_spec`), no subtree
    /// assigned yet.
    pub(crate) fn replace_tree(&mut self, new: Self) {
        self.classes = new.classes;
        self.major = new.major;
        self.default_minor = new.default_minor;
        self.assignment.clear();
        self.everywhere.clear();
    }

    /// The shape of the tree `htb` holds (nothing assigned).
    pub(crate) fn of_scheduler<P: Packet>(htb: &Scheduler<P>) -> Self {
        let classes = htb.class_ids().filter_map(|id| {
            let info = htb.class_info(id)?;
            Some((id, info.parent, info.config.rate))
        });
        Self::of_classes(htb.config(), classes)
    }

    /// The shape of the tree `spec` describes (nothing assigned).
    pub(crate) fn of_spec(spec: &TreeSpec) -> Self {
        Self::of_classes(
            &spec.config,
            spec.classes.iter().map(|c| (c.id, c.parent, c.spec.rate)),
        )
    }

    fn of_classes(
        config: &SchedulerConfig,
        classes: impl Iterator<Item = (ClassId, Option<ClassId>, Rate)>,
    ) -> Self {
        let mut view = Self::new(1);
        view.major = Some(config.major);
        view.default_minor = config.default_minor;
        let mut parents = Vec::new();
        for (id, parent, rate) in classes {
            view.classes.insert(id, ClassView::new(parent, rate));
            parents.extend(parent);
        }
        for p in parents {
            if let Some(c) = view.classes.get_mut(&p) {
                c.children += 1;
            }
        }
        view
    }

    /// The qdisc's `default` minor is now `minor`.
    pub(crate) fn set_default(&mut self, minor: u32) {
        self.default_minor = minor;
    }

    /// Class `id` was added under `parent` with rate `rate`.
    pub(crate) fn add(&mut self, id: ClassId, parent: Option<ClassId>, rate: Rate) {
        if let Some(p) = parent.and_then(|p| self.classes.get_mut(&p)) {
            p.children += 1;
        }
        self.classes.insert(id, ClassView::new(parent, rate));
    }

    /// Class `id`'s rate is now `rate`.
    pub(crate) fn change(&mut self, id: ClassId, rate: Rate) {
        if let Some(c) = self.classes.get_mut(&id) {
            c.rate = rate;
        }
    }

    /// Class `id` was deleted.
    pub(crate) fn delete(&mut self, id: ClassId) {
        self.everywhere.remove(&id);
        let Some(gone) = self.classes.remove(&id) else {
            return;
        };
        if let Some(p) = gone.parent.and_then(|p| self.classes.get_mut(&p)) {
            p.children = p.children.saturating_sub(1);
        }
    }

    /// Class `id`'s buckets are now shared.
    pub(crate) fn mark_shared(&mut self, id: ClassId) {
        if let Some(c) = self.classes.get_mut(&id) {
            c.shared = true;
        }
    }

    /// The class unclassified frames land in: the `default` class when it names a leaf, as
    /// `Scheduler::default_class` (the kernel's `htb_classify` falling back to
    /// `q->defcls`).
    pub(crate) fn default_leaf(&self) -> Option<ClassId> {
        let id = ClassId::new(self.major?, self.default_minor);
        self.classes
            .get(&id)
            .filter(|c| c.children == 0)
            .map(|_| id)
    }

    /// The worker that queues a frame of `class` received by worker `me`: its subtree's
    /// owner, or `me` for a split subtree and for a class not in the tree or not assigned.
    pub(crate) fn owner_of(&self, class: ClassId, me: u16) -> u16 {
        subtree_of(self, class)
            .and_then(|top| self.assignment.server(top))
            .map_or(me, |server| server.for_frame_of(me))
    }

    /// The worker owning the leaf a frame for `class` is filed in: the class if it is a leaf;
    /// the default class for an inner class or one that does not exist (yet), as
    /// `Scheduler::classify` falls back; `me` for the direct queue, which every worker has.
    pub(crate) fn leaf_owner(&self, class: ClassId, me: u16) -> u16 {
        self.leaf_of(class)
            .map_or(me, |leaf| self.owner_of(leaf, me))
    }

    /// The leaf a frame for `class` is filed in: the class if it is a leaf, else the default
    /// class (`None`: the direct queue). A worker's own scheduler may not say: a top-level
    /// class whose children are all other workers' is a leaf there.
    pub(crate) fn leaf_of(&self, class: ClassId) -> Option<ClassId> {
        match self.classes.get(&class) {
            Some(c) if c.children == 0 => Some(class),
            _ => self.default_leaf(),
        }
    }

    /// Subtree `top` stays on every worker from now on (it was split).
    pub(crate) fn keep_everywhere(&mut self, top: ClassId) {
        self.everywhere.insert(top);
    }

    /// The one worker holding class `id` in its scheduler, or `None` when every worker does:
    /// a class of a subtree one worker owns is its owner's alone; the top-level classes, the
    /// classes of split subtrees (and of those split once), of unassigned ones and classes
    /// the view does not know are every worker's.
    pub(crate) fn holder(&self, id: ClassId) -> Option<u16> {
        let class = self.classes.get(&id)?;
        class.parent?;
        let top = subtree_of(self, id)?;
        if self.everywhere.contains(&top) {
            return None;
        }
        match self.assignment.server(top)? {
            Server::Worker(w) => Some(w),
            Server::Every => None,
        }
    }

    /// Class `id`'s depth: 0 at the top of the tree.
    pub(crate) fn depth(&self, id: ClassId) -> usize {
        let mut depth = 0;
        let mut at = id;
        while let Some(Some(parent)) = self.parent(at) {
            depth += 1;
            at = parent;
        }
        depth
    }

    /// Who serves subtree `top`.
    pub(crate) fn server(&self, top: ClassId) -> Option<Server> {
        self.assignment.server(top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ClassId {
        s.parse().unwrap()
    }

    /// 1:1 at the top, subscribers 1:10 and 1:20 below it, 1:10 with leaves 1:100 and 1:101;
    /// `default 20`.
    fn view() -> TreeView {
        let mut v = TreeView::new(2);
        let mut htb: Scheduler<crate::frame::Frame> = Scheduler::new(SchedulerConfig::default());
        htb.set_default_class(0x20);
        v.set_tree(Some(&htb));
        let rate = Rate::from_mbit(10);
        v.add(id("1:1"), None, rate);
        v.add(id("1:10"), Some(id("1:1")), rate);
        v.add(id("1:20"), Some(id("1:1")), rate);
        v.add(id("1:100"), Some(id("1:10")), rate);
        v.add(id("1:101"), Some(id("1:10")), rate);
        v
    }

    #[test]
    fn the_owner_map_finds_a_leaf_s_worker_without_a_scheduler() {
        let mut v = view();
        assert_eq!(v.major(), Some(1));
        assert_eq!(v.len(), 5);
        assert_eq!(v.class(id("1:10")).map(|c| c.children), Some(2));
        // Nothing assigned: every worker keeps what it receives.
        assert_eq!(v.leaf_owner(id("1:100"), 1), 1);
        assert_eq!(v.assignment.place(id("1:10"), false), Server::Worker(0));
        assert_eq!(v.assignment.place(id("1:20"), false), Server::Worker(1));
        assert_eq!(v.owner_of(id("1:101"), 1), 0, "the subtree's owner");
        assert_eq!(v.leaf_owner(id("1:100"), 1), 0);
        // An inner class, and a class that does not exist: the default class's owner.
        assert_eq!(v.leaf_owner(id("1:10"), 0), 1);
        assert_eq!(v.leaf_owner(id("1:99"), 0), 1);
        assert_eq!(v.default_leaf(), Some(id("1:20")));
        // The default class gets a child: no default leaf, the direct queue (any worker).
        v.add(id("1:200"), Some(id("1:20")), Rate::from_mbit(1));
        assert_eq!(v.default_leaf(), None);
        assert_eq!(v.leaf_owner(id("1:99"), 0), 0);
        assert_eq!(v.leaf_owner(id("1:200"), 0), 1, "in the default's subtree");
        v.delete(id("1:200"));
        assert_eq!(v.default_leaf(), Some(id("1:20")), "a leaf again");
        // Split: every worker queues what it receives.
        assert_eq!(v.assignment.place(id("1:10"), true), Server::Every);
        assert_eq!(v.leaf_owner(id("1:100"), 1), 1);
        assert_eq!(v.leaf_owner(id("1:100"), 0), 0);
        v.set_default(0x100);
        assert_eq!(v.default_leaf(), Some(id("1:100")));
        v.set_tree::<crate::frame::Frame>(None);
        assert_eq!(v.major(), None);
        assert_eq!(v.leaf_owner(id("1:100"), 1), 1);
    }
}
