//! One port as the data plane holds it: its trees (the root's HTB, or one per `mq` class), its
//! unshaped FIFO, its filters with their resolved targets, its ingress hook, and which worker
//! owns each subtree; and what a control operation does to it (`Port::apply`).

use std::collections::HashMap;
use std::sync::Arc;

use htb_classify::Classifier;
use htb_core::{ClassId, Instant, Scheduler, Target};

use super::target_cache::{Resolved, TargetCache};
use crate::error::PlaneError;
use crate::frame::{Frame, FrameNeeds};
use crate::plane_op::{IngressHook, PlaneOp, Retired};
use crate::rtt::ClassRtt;
use crate::stats::PortStats;
use crate::tree_view::TreeView;

/// A port's ingress qdisc, with each filter's redirect resolved to a port index.
pub(super) struct Ingress {
    pub(super) hook: Arc<IngressHook>,
    pub(super) redirects: Vec<Option<usize>>,
}

/// One HTB qdisc of a port: the root's, or one under a class of tc's `mq`.
pub(super) struct Tree {
    pub(super) htb: Scheduler<Frame>,
    /// The minor of the `mq` class it hangs under (`None`: the root): all its subtrees are
    /// served by the worker owning TX queue `minor − 1`, as the kernel's mq binds child N to
    /// queue N−1.
    pub(super) mq_minor: Option<u16>,
}

impl Tree {
    pub(super) fn major(&self) -> u16 {
        self.htb.config().major
    }
}

/// Where a frame waits: in tree `tree` (an index into the port's trees; `None`: the port's
/// unshaped FIFO) as `target` says.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
    pub(super) tree: Option<usize>,
    pub(super) target: Target,
}

pub(super) struct Port {
    pub(super) name: String,
    pub(super) peer: Option<usize>,
    /// An IFB device (no rings).
    pub(super) ifb: bool,
    /// Its ingress qdisc.
    pub(super) ingress: Option<Ingress>,
    /// Its trees: at most one at the root, or one per `mq` class.
    pub(super) trees: Vec<Tree>,
    /// Frames of a port without trees leave through this: no classes, one direct queue.
    pub(super) unshaped: Scheduler<Frame>,
    pub(super) classifier: Arc<Classifier>,
    /// Per filter, its tree, its class as a checked handle (or, for a class another worker
    /// holds, its id) and the worker that owns the class, looked up when a packet first
    /// matches it: no id, view or assignment lookup per packet after that, whether this
    /// worker queues the frame or hands it to the owner (a handle made stale by a tree change
    /// falls back to the id). Forgotten on new filters, a new tree and new owners
    /// (`reset_targets`). Resolved lazily so that swapping in 100 000 filters costs a
    /// generation bump on the data plane, not 100 000 lookups.
    pub(super) targets: TargetCache,
    /// The tree unclassified frames of this worker go to and the worker owning the class they
    /// land in, once looked up.
    pub(super) unclassified: Option<(Option<usize>, u16, Target)>,
    /// The fleet's view of the port's root tree, shared by every worker (`None`: one worker,
    /// or not handed out yet): who serves each subtree — one worker, or every worker (split) —
    /// and each class's place in the tree, so that a worker finds a class's owner without
    /// walking its own scheduler (`tree_view.rs`). Read only when a filter's target is first
    /// resolved. Subtrees of trees under `mq` belong to their queue's worker instead.
    pub(super) view: Option<Arc<TreeView>>,
    /// The tree the next transmit starts with: trees under `mq` take turns at the port's TX
    /// ring, as a NIC serves its TX queues in turn.
    pub(super) next_tree: usize,
    pub(super) stats: PortStats,
    /// Measure the TCP round trips of what leaves through it.
    pub(super) rtt_on: bool,
    /// What its leaves read of a frame beyond the flow hash (kept once a `cake` leaf asks).
    pub(super) needs: FrameNeeds,
    /// Round trips and retransmissions per class, for the classes that had some.
    pub(super) rtt: HashMap<ClassId, ClassRtt>,
    /// Replaced filters, to be freed off the data-plane thread.
    pub(super) retired: Retired,
}

impl Port {
    /// Forgets every resolved handle and owner (new filters, a new tree, new owners).
    pub(super) fn reset_targets(&mut self) {
        self.targets.reset(self.classifier.len());
        self.unclassified = None;
    }

    /// The tree with qdisc major `major`.
    pub(super) fn tree_of(&self, major: u16) -> Option<usize> {
        self.trees.iter().position(|t| t.major() == major)
    }

    /// The scheduler of `tree` (`None`: the unshaped FIFO).
    pub(super) fn htb(&mut self, tree: Option<usize>) -> &mut Scheduler<Frame> {
        match tree.and_then(|t| self.trees.get_mut(t)) {
            Some(t) => &mut t.htb,
            None => &mut self.unshaped,
        }
    }

    /// Every scheduler: the trees', then the unshaped FIFO.
    pub(super) fn schedulers(&self) -> impl Iterator<Item = &Scheduler<Frame>> {
        self.trees
            .iter()
            .map(|t| &t.htb)
            .chain(std::iter::once(&self.unshaped))
    }

    /// The worker serving the `mq` tree `tree`, if it hangs under `mq`.
    fn mq_owner(&self, tree: usize, workers: usize) -> Option<u16> {
        let minor = self.trees.get(tree)?.mq_minor?;
        Some(u16::try_from((usize::from(minor).saturating_sub(1)) % workers.max(1)).unwrap_or(0))
    }

    /// The root tree's view, if `tree` is the tree it follows.
    fn view_of(&self, tree: usize) -> Option<&TreeView> {
        let view = self.view.as_deref()?;
        let t = self.trees.get(tree)?;
        (view.major() == Some(t.major())).then_some(view)
    }

    /// The worker that queues a frame of `class` of `tree` received by worker `me`: its `mq`
    /// queue's worker, its subtree's owner, or `me` for a split subtree and for a class not in
    /// the tree or not assigned.
    pub(super) fn owner_of(&self, tree: usize, class: ClassId, me: usize, workers: usize) -> u16 {
        let me16 = u16::try_from(me).unwrap_or(0);
        if let Some(w) = self.mq_owner(tree, workers) {
            return w;
        }
        self.view_of(tree)
            .map_or(me16, |view| view.owner_of(class, me16))
    }

    /// The worker owning the leaf `tree`'s scheduler files a frame for `class` in: the class
    /// if it is a leaf; the default class for an inner class or one that does not exist (yet),
    /// as `Scheduler::classify` falls back (the kernel's `htb_classify`); `me` for the direct
    /// queue, which every worker has. Read from the fleet's view for the root tree (this
    /// worker may not hold the class), from the tree itself under `mq` (its worker holds it
    /// whole).
    pub(super) fn leaf_owner(&self, tree: usize, class: ClassId, me: usize, workers: usize) -> u16 {
        let me16 = u16::try_from(me).unwrap_or(0);
        let Some(t) = self.trees.get(tree) else {
            return me16;
        };
        if t.mq_minor.is_none() {
            return self
                .view_of(tree)
                .map_or(me16, |view| view.leaf_owner(class, me16));
        }
        let leaf = match t.htb.class_info(class) {
            Some(info) if info.level == 0 => Some(class),
            _ => t.htb.default_class(),
        };
        leaf.map_or(me16, |leaf| self.owner_of(tree, leaf, me, workers))
    }

    /// Filter `i`'s slot — its tree and its class's handle once the class exists, its id until
    /// then — and the worker that owns it.
    pub(super) fn target(&mut self, i: usize, me: usize, workers: usize) -> (Slot, usize) {
        if let Some(Resolved {
            tree,
            target,
            owner,
        }) = self.targets.get(i)
        {
            let slot = Slot {
                tree: Some(usize::from(tree)),
                target,
            };
            return (slot, usize::from(owner));
        }
        let Some(class) = self.classifier.class(i) else {
            // A frame classified by filters replaced while it was on its way to this worker.
            return self.unclassified_slot(me, workers);
        };
        let Some(tree) = self.tree_of(class.major()) else {
            // The filter's tree went (an mq child deleted): as the kernel's default qdisc
            // would, the frame leaves unclassified.
            return self.unclassified_slot(me, workers);
        };
        if workers > 1
            && let Some(view) = self.view_of(tree)
        {
            // Several workers: this one may hold only part of the tree, so the view says
            // which leaf the frame lands in (and whose it is), not this worker's scheduler.
            let me16 = u16::try_from(me).unwrap_or(0);
            let leaf = view.leaf_of(class);
            let owner = leaf.map_or(me16, |l| view.owner_of(l, me16));
            let target = match leaf {
                Some(l) => self.trees[tree]
                    .htb
                    .handle(l)
                    .map_or(Target::Class(l), Target::Handle),
                None => Target::Direct,
            };
            // Kept when this worker holds the class, and when another worker owns it: RSS
            // sends most of a subtree's frames to workers that hand them over, and each would
            // otherwise walk the view again.
            let kept = matches!(target, Target::Handle(_)) || owner != me16;
            if kept && let Ok(t16) = u16::try_from(tree) {
                self.targets.set(
                    i,
                    Resolved {
                        tree: t16,
                        target,
                        owner,
                    },
                );
            }
            let slot = Slot {
                tree: Some(tree),
                target,
            };
            return (slot, usize::from(owner));
        }
        match self.trees[tree].htb.handle(class) {
            Some(handle) => {
                let owner = self.leaf_owner(tree, class, me, workers);
                if let Ok(t16) = u16::try_from(tree) {
                    self.targets.set(
                        i,
                        Resolved {
                            tree: t16,
                            target: Target::Handle(handle),
                            owner,
                        },
                    );
                }
                let slot = Slot {
                    tree: Some(tree),
                    target: Target::Handle(handle),
                };
                (slot, usize::from(owner))
            }
            None => (
                Slot {
                    tree: Some(tree),
                    target: Target::Class(class),
                },
                usize::from(self.leaf_owner(tree, class, me, workers)),
            ),
        }
    }

    /// Applies one operation at `now`; returns the frames it purged.
    pub(super) fn apply(&mut self, now: Instant, op: PlaneOp) -> Result<Vec<Frame>, PlaneError> {
        let tree = op.major().and_then(|major| self.tree_of(major));
        match op {
            PlaneOp::SetFilters {
                filters: classifier,
                ..
            } => {
                let old = std::mem::replace(&mut self.classifier, classifier);
                self.retired.0.push(old);
                Ok(Vec::new())
            }
            PlaneOp::SetTree {
                tree: new,
                mut schedulers,
                ..
            } => {
                let old = tree.map(|t| self.trees.remove(t));
                self.next_tree = 0;
                if let Some(new) = new {
                    let htb = schedulers
                        .pop()
                        .ok_or_else(|| PlaneError::NoScheduler(self.name.clone()))?;
                    self.needs.note_tree(&htb);
                    self.trees.push(Tree {
                        htb,
                        mq_minor: new.mq_minor,
                    });
                }
                Ok(old.map(|mut t| t.htb.drain()).unwrap_or_default())
            }
            op => {
                let Some(t) = tree else {
                    return Err(PlaneError::NoTree {
                        port: self.name.clone(),
                        major: op.major().unwrap_or(0),
                    });
                };
                let htb = &mut self.trees[t].htb;
                let purged = match op {
                    PlaneOp::SetQdisc { config, .. } => {
                        self.unclassified = None;
                        htb.set_default_class(config.default_minor);
                        htb.set_r2q(config.r2q);
                        htb.set_direct_qlen(config.direct_qlen);
                        htb.set_size_table(config.stab);
                        Ok(Vec::new())
                    }
                    PlaneOp::AddClass {
                        id, parent, spec, ..
                    } => htb.add_class(now, id, parent, &spec).map(|c| c.purged),
                    PlaneOp::ChangeClass { id, spec, .. } => {
                        htb.change_class(now, id, &spec).map(|c| c.purged)
                    }
                    PlaneOp::DeleteClass { id, .. } => htb.delete_class(now, id).map(|c| c.purged),
                    PlaneOp::SetLeaf { id, leaf, .. } => {
                        if let Some(leaf) = &leaf {
                            self.needs.note(leaf);
                        }
                        htb.set_leaf(now, id, leaf.as_ref()).map(|c| c.purged)
                    }
                    PlaneOp::ChangeLeaf { id, leaf, .. } => {
                        self.needs.note(&leaf);
                        // Packets over new limits are dropped, not purged.
                        htb.change_leaf(now, id, &leaf).map(|c| c.purged)
                    }
                    // The fleet decides who serves the subtree (`Fleet::reshape`).
                    PlaneOp::SetTree { .. }
                    | PlaneOp::SetFilters { .. }
                    | PlaneOp::SetIngress { .. }
                    | PlaneOp::SetSplit { .. } => Ok(Vec::new()),
                };
                purged.map_err(PlaneError::from)
            }
        }
    }

    /// The frames the port's schedulers dropped (a full flow, AQM, leaves over new limits).
    pub(super) fn drain_dropped(&mut self) -> impl Iterator<Item = Frame> + '_ {
        self.trees
            .iter_mut()
            .map(|t| &mut t.htb)
            .chain(std::iter::once(&mut self.unshaped))
            .flat_map(Scheduler::drain_dropped)
    }

    /// Where worker `me`'s unclassified frames go, and the worker owning the class they land
    /// in: the root tree's default class; under `mq`, the default class of a tree this worker
    /// serves (as XPS keeps a CPU's packets on its own TX queue), else of tree `me` modulo
    /// their number; a port without trees sends them unshaped.
    pub(super) fn unclassified_slot(&mut self, me: usize, workers: usize) -> (Slot, usize) {
        let (tree, owner, target) = match self.unclassified {
            Some(known) => known,
            None => {
                let me16 = u16::try_from(me).unwrap_or(0);
                let tree = match self.trees.len() {
                    0 => None,
                    1 => Some(0),
                    n => Some(
                        (0..n)
                            .find(|&t| self.owner_of(t, ClassId::new(0, 0), me, workers) == me16)
                            .unwrap_or(me % n),
                    ),
                };
                let (owner, target) = match tree {
                    Some(t) if self.trees[t].mq_minor.is_some() => (
                        self.owner_of(t, ClassId::new(0, 0), me, workers),
                        Target::Unclassified,
                    ),
                    // Several workers: the default leaf as the view says (this worker's
                    // scheduler may hold only part of the tree).
                    Some(t) if workers > 1 && self.view_of(t).is_some() => {
                        match self.view_of(t).and_then(TreeView::default_leaf) {
                            Some(class) => {
                                (self.owner_of(t, class, me, workers), Target::Class(class))
                            }
                            None => (me16, Target::Direct),
                        }
                    }
                    _ => (me16, Target::Unclassified),
                };
                self.unclassified = Some((tree, owner, target));
                (tree, owner, target)
            }
        };
        let slot = Slot { tree, target };
        (slot, usize::from(owner))
    }
}

/// Resolves the IFB names of every port's ingress redirects to port indices (a name that is
/// not an IFB port: no redirect, the control plane refuses those).
pub(super) fn resolve_redirects(ports: &mut [Port]) {
    let ifbs: Vec<(String, usize)> = ports
        .iter()
        .enumerate()
        .filter(|(_, p)| p.ifb)
        .map(|(i, p)| (p.name.clone(), i))
        .collect();
    for port in ports.iter_mut() {
        if let Some(ingress) = &mut port.ingress {
            ingress.redirects = ingress
                .hook
                .redirects
                .iter()
                .map(|to| {
                    let to = to.as_ref()?;
                    ifbs.iter().find(|(name, _)| name == to).map(|&(_, i)| i)
                })
                .collect();
        }
    }
}
