//! The workers' data planes seen from the control side: a batch of changes applied to every
//! worker's copy of the trees, and the fleet's own view of each port's root tree
//! (`tree_view.rs`: the classes' shape, the subtrees' owners or their split, `split.rs`, and
//! which classes share their buckets) kept up to date as classes come and go. The view is the
//! data plane's owner map too: every worker holds an `Arc` of it. Generic over the rings, so
//! that the engine (AF_XDP) and the several-worker property test (simulated rings) run the
//! same code.

use std::collections::BTreeMap;
use std::sync::Arc;

use htb_core::{ClassId, Instant, Rate, SharedBuckets, SplitChoice};

use crate::assign::{Server, is_subtree_top, subtree_of};
use crate::dataplane::Dataplane;
use crate::error::PlaneError;
use crate::plane_op::{PlaneOp, Retired};
use crate::rings::Rings;
use crate::split::SplitRule;
use crate::tree_view::TreeView;

mod holders;

use self::holders::{Routing, apply_in_order, merge_outcomes};

/// Per port, the fleet's view of its root tree with who serves which subtree, and the rule
/// that splits some.
#[derive(Debug)]
pub(crate) struct Fleet {
    /// One per port. The workers hold clones between jobs; during one the fleet takes them
    /// back (`recall`) so that its own is the only one and is written in place.
    views: Vec<Arc<TreeView>>,
    rule: SplitRule,
    /// Classes `settle` deleted from workers that do not serve them (the tests count them).
    #[cfg(test)]
    pub(crate) settled: usize,
}

/// What an operation does to the tree's shape, for the view and the assignment of subtrees.
enum Shape {
    Added {
        port: usize,
        id: ClassId,
        parent: Option<ClassId>,
        rate: Rate,
    },
    /// New parameters: its rate may have crossed `split_above`.
    Changed {
        port: usize,
        id: ClassId,
        rate: Rate,
    },
    Deleted {
        port: usize,
        id: ClassId,
    },
    /// A new tree `major` (`root`: its shape, when it hangs at the root), with the operator's
    /// choices for its subtrees.
    NewTree {
        port: usize,
        major: u16,
        root: Option<TreeView>,
        choices: BTreeMap<ClassId, SplitChoice>,
    },
    /// New qdisc parameters of tree `major`: its default class.
    Qdisc {
        port: usize,
        major: u16,
        default_minor: u32,
    },
    Chosen {
        port: usize,
        id: ClassId,
        choice: Option<SplitChoice>,
    },
    /// A leaf qdisc set or changed.
    Leaf {
        port: usize,
        id: ClassId,
    },
    Other,
}

impl Fleet {
    /// `ports` ports served by `planes`, whose trees are assigned afresh: subtrees whose top
    /// class's rate is above `split_above` split, and those in `choices[port]` as chosen. The
    /// view of each root tree is taken from worker 0's initial scheduler, once: every worker's
    /// was built from the same spec; from then on the fleet follows the operations.
    pub(crate) fn new<R: Rings>(
        ports: usize,
        planes: &mut [&mut Dataplane<R>],
        split_above: Option<Rate>,
        choices: Vec<BTreeMap<ClassId, SplitChoice>>,
    ) -> Self {
        let workers = planes.len();
        let views = (0..ports)
            .map(|port| {
                let mut view = TreeView::new(workers);
                view.set_tree(planes.first().and_then(|p| p.root_tree_at(port)));
                Arc::new(view)
            })
            .collect();
        let mut fleet = Self {
            views,
            rule: SplitRule::new(split_above, choices),
            #[cfg(test)]
            settled: 0,
        };
        fleet.recall(planes);
        let mut touched = Vec::new();
        for port in 0..ports {
            if let Err(e) = fleet.assign_tree(planes, Instant::ZERO, port) {
                tracing::error!("port {port}: a split subtree not copied to every worker: {e}");
            }
            if workers > 1 {
                touched.extend(fleet.views[port].class_ids().map(|id| (port, id, 0)));
            }
        }
        for (_, e) in fleet.settle(planes, Instant::ZERO, &touched) {
            tracing::error!("a class a worker does not serve stays there: {e}");
        }
        fleet.hand_out(planes, &vec![true; ports]);
        fleet
    }

    /// Owned subtrees per worker, summed over the ports.
    pub(crate) fn subtrees(&self, worker: usize) -> u32 {
        self.views
            .iter()
            .map(|v| v.assignment.load().get(worker).copied().unwrap_or(0))
            .sum()
    }

    /// Split subtrees, over all ports.
    pub(crate) fn split_count(&self) -> u32 {
        let n: usize = self.views.iter().map(|v| v.assignment.split().len()).sum();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The split subtrees of port `port` (by index), by their top class.
    pub(crate) fn split_subtrees(&self, port: usize) -> Vec<ClassId> {
        self.views
            .get(port)
            .map(|v| v.assignment.split().collect())
            .unwrap_or_default()
    }

    /// The fleet's view of port `port`'s root tree.
    #[cfg(test)]
    pub(crate) fn view(&self, port: usize) -> Option<&TreeView> {
        self.views.get(port).map(AsRef::as_ref)
    }

    /// Takes every worker's copy of the views back: the fleet's are then the only ones.
    fn recall<R: Rings>(&mut self, planes: &mut [&mut Dataplane<R>]) {
        for plane in planes.iter_mut() {
            for port in 0..self.views.len() {
                plane.set_view(port, None, false);
            }
        }
    }

    /// Hands every worker a copy of the views; the workers forget the owners they resolved on
    /// the ports whose view changed (`changed`).
    fn hand_out<R: Rings>(&mut self, planes: &mut [&mut Dataplane<R>], changed: &[bool]) {
        for plane in planes.iter_mut() {
            for (port, view) in self.views.iter().enumerate() {
                let changed = changed.get(port).copied().unwrap_or(true);
                plane.set_view(port, Some(Arc::clone(view)), changed);
            }
        }
    }

    /// Port `port`'s view, to write (recalled: no worker holds a copy, nothing is cloned).
    fn view_mut(&mut self, port: usize) -> &mut TreeView {
        debug_assert_eq!(
            Arc::strong_count(&self.views[port]),
            1,
            "view {port} not recalled"
        );
        Arc::make_mut(&mut self.views[port])
    }

    /// Applies `ops` in order to the workers' data planes (see `Engine::apply`): each class
    /// operation to the workers holding the class (`holder_for`), the rest to every worker.
    /// Per op, the packets it dropped (summed over the workers that applied it) or why it
    /// failed; the first failure ends the batch: no worker applies the later operations
    /// (`apply_in_order`). Also returns what the ops replaced, to be dropped off the
    /// data-plane threads. Then the classes move to where the assignment says (`settle`,
    /// `copy_subtree`): a move a worker refuses (its tree is not what the view says, a bug)
    /// makes the op that caused it fail, though the ops after it stay applied, so that the
    /// control plane rebuilds the port.
    pub(crate) fn apply<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        now: Instant,
        ops: Vec<PlaneOp>,
    ) -> (Vec<Result<u64, PlaneError>>, Retired) {
        let workers = planes.len();
        let all_shapes: Vec<Shape> = ops.iter().map(|op| shape_of(planes, op)).collect();
        // Classes added by this batch and where they go; new subtrees placed as they are
        // routed where nothing else in the batch moves subtrees.
        // (One worker holds everything: nothing to route, no batch to scan.)
        let mut routing = Routing::new(self, if workers > 1 { &all_shapes } else { &[] });
        let mut shapes = Vec::with_capacity(ops.len());
        // Per op, the worker it goes to (`None`: every worker) and its copy for each worker
        // (for one worker, the op itself).
        let mut batch: Vec<(Option<u16>, Vec<PlaneOp>)> = Vec::with_capacity(ops.len());
        // The op that added each class of the batch, by its index.
        let mut origins: BTreeMap<(usize, ClassId), usize> = BTreeMap::new();
        let mut refused = None;
        for (i, (op, shape)) in ops.into_iter().zip(all_shapes).enumerate() {
            if let Shape::Added { port, id, .. } = shape {
                origins.insert((port, id), i);
            }
            let holder = if workers > 1 {
                self.holder_for(i, &shape, &mut routing)
            } else {
                None
            };
            // An op for one worker goes to it as it is: no copies to make and drop.
            let copies = match holder {
                Some(_) => Ok(vec![op]),
                None => op.per_worker(workers),
            };
            match copies {
                Ok(copies) => {
                    batch.push((holder, copies));
                    shapes.push(shape);
                }
                Err(e) => {
                    refused = Some(PlaneError::Class(e));
                    break;
                }
            }
        }
        let (outcomes, retired) = apply_in_order(planes, now, batch);
        let mut results = merge_outcomes(outcomes);
        self.recall(planes);
        let mut changed = vec![false; self.views.len()];
        // The view follows the whole batch first: the assignment reads the trees as the batch
        // left them, as the workers' are.
        let applied: Vec<(usize, Shape)> = shapes
            .into_iter()
            .zip(&results)
            .enumerate()
            .filter(|(_, (_, r))| r.is_ok())
            .map(|(i, (shape, _))| (i, shape))
            .collect();
        // The classes the batch gave every worker, with the op that added each: placed, they
        // may be one worker's.
        let mut touched: Vec<(usize, ClassId, usize)> = routing
            .added
            .into_iter()
            .filter(|(_, h)| h.is_none())
            .map(|((port, id), _)| (port, id, origins.get(&(port, id)).copied().unwrap_or(0)))
            .collect();
        let mut reshapes = Vec::with_capacity(applied.len());
        for (i, shape) in applied {
            reshapes.push((i, self.follow(shape, &mut changed)));
        }
        // Moving classes between workers can fail where the workers' trees are not what the
        // view says (a bug): the op that caused the move fails, and the control plane
        // rebuilds the port.
        let mut failed = Vec::new();
        for (i, shape) in reshapes {
            if let Shape::NewTree { port, .. } = &shape
                && workers > 1
            {
                let port = *port;
                touched.extend(self.views[port].class_ids().map(|id| (port, id, i)));
            }
            if let Err(e) = self.reshape(planes, now, shape, &mut changed) {
                failed.push((i, e));
            }
        }
        // The new subtrees routed to one worker are where the assignment placed them: the
        // rule ran the same, in the same order (`Routing::new`).
        for &(i, port, top, w) in &routing.placed {
            if results.get(i).is_some_and(Result::is_ok) {
                let server = self.views[port].server(top);
                debug_assert_eq!(server, Some(Server::Worker(w)), "subtree {top} routed");
                if server != Some(Server::Worker(w)) {
                    tracing::error!("subtree {top} added to worker {w} but served by {server:?}");
                }
            }
        }
        failed.extend(self.settle(planes, now, &touched));
        for (i, e) in failed {
            if let Some(result) = results.get_mut(i).filter(|r| r.is_ok()) {
                *result = Err(e);
            }
        }
        self.hand_out(planes, &changed);
        if let Some(e) = refused
            && results.iter().all(Result::is_ok)
        {
            results.push(Err(e));
        }
        (results, retired)
    }

    /// Brings the view's classes up to date after an operation applied; returns what is left
    /// for `reshape`.
    fn follow(&mut self, shape: Shape, changed: &mut [bool]) -> Shape {
        match shape {
            Shape::Added {
                port,
                id,
                parent,
                rate,
            } => {
                let view = self.view_mut(port);
                if view.covers(id) {
                    view.add(id, parent, rate);
                    changed[port] = true;
                }
            }
            Shape::Changed { port, id, rate } => {
                let view = self.view_mut(port);
                if view.covers(id) {
                    view.change(id, rate);
                }
            }
            Shape::Deleted { port, id } => {
                let view = self.view_mut(port);
                if view.covers(id) {
                    view.delete(id);
                    changed[port] = true;
                }
            }
            Shape::NewTree {
                port,
                major,
                root,
                choices,
            } => {
                let view = self.view_mut(port);
                match root {
                    Some(new) => view.replace_tree(new),
                    None if view.major() == Some(major) => {
                        view.set_tree::<crate::frame::Frame>(None);
                    }
                    // A tree under `mq` next to the root tree (another major), new or
                    // deleted: the root tree, its subtrees' servers and the operator's
                    // choices stay as they are.
                    None => return Shape::Other,
                }
                changed[port] = true;
                return Shape::NewTree {
                    port,
                    major,
                    root: None,
                    choices,
                };
            }
            Shape::Qdisc {
                port,
                major,
                default_minor,
            } => {
                let view = self.view_mut(port);
                if view.major() == Some(major) {
                    view.set_default(default_minor);
                    changed[port] = true;
                }
            }
            Shape::Chosen { .. } | Shape::Leaf { .. } | Shape::Other => {}
        }
        shape
    }

    /// Brings the subtrees' servers and the shared classes up to date after an operation
    /// (the whole batch applied: the trees, and the view, are as the batch left them).
    fn reshape<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        now: Instant,
        shape: Shape,
        changed: &mut [bool],
    ) -> Result<(), PlaneError> {
        // The operator's choices are kept whatever the workers: the rule is one.
        match &shape {
            Shape::NewTree { port, choices, .. } => self.rule.set_tree(*port, choices.clone()),
            Shape::Chosen { port, id, choice } => self.rule.choose(*port, *id, *choice),
            Shape::Deleted { port, id } => self.rule.forget(*port, *id),
            _ => {}
        }
        if planes.len() < 2 {
            // One worker serves everything: no owners, nothing shared.
            return Ok(());
        }
        let moved = match shape {
            Shape::Added { port, id, .. } => self.assign_class(planes, now, port, id),
            Shape::Changed { port, id, .. } | Shape::Chosen { port, id, .. } => {
                self.decide_again(planes, now, port, id)
            }
            Shape::Deleted { port, id } => {
                if self.view_mut(port).assignment.remove(id) {
                    changed[port] = true;
                }
                Ok(())
            }
            Shape::NewTree { port, .. } => self.assign_tree(planes, now, port),
            Shape::Qdisc { .. } | Shape::Leaf { .. } | Shape::Other => return Ok(()),
        };
        if let Some(port) = shape_port(&shape) {
            changed[port] = true;
        }
        moved
    }

    /// Assigns every subtree of `port`'s root tree afresh, in class-id order, shares the
    /// top-level classes' buckets, and those of every class of a split subtree. Err: a split
    /// subtree not copied to every worker (the first such failure; every subtree is placed).
    fn assign_tree<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        now: Instant,
        port: usize,
    ) -> Result<(), PlaneError> {
        let view = self.view_mut(port);
        view.assignment.clear();
        if planes.len() < 2 || view.major().is_none() {
            return Ok(());
        }
        // In class-id order (the view's B-tree), tops first, so that each class below knows
        // whether its subtree is split.
        let (tops, below): (Vec<ClassId>, Vec<ClassId>) =
            view.class_ids().partition(|&id| is_subtree_top(&*view, id));
        let mut first = Ok(());
        for id in tops.into_iter().chain(below) {
            let placed = self.assign_class(planes, now, port, id);
            if first.is_ok() {
                first = placed;
            }
        }
        first
    }

    /// A new class of `port`: shares its buckets if it is at the top of the root tree or in a
    /// split subtree, and places the subtree it tops. (A tree under `mq` belongs to its
    /// queue's worker whole: nothing to share or assign.)
    fn assign_class<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        now: Instant,
        port: usize,
        id: ClassId,
    ) -> Result<(), PlaneError> {
        let view = &self.views[port];
        let Some(class) = view.class(id).filter(|_| view.covers(id)) else {
            return Ok(());
        };
        let Some(top) = subtree_of(&**view, id) else {
            return Ok(());
        };
        let top_level = class.parent.is_none();
        let shared = class.shared;
        if top == id {
            if top_level && !shared {
                self.share(planes, port, id);
            }
            // Its subtree is itself so far: the classes below come with their own adds.
            return self.place(planes, now, port, id, false);
        } else if view.server(top) == Some(Server::Every) && !shared {
            self.share(planes, port, id);
        }
        Ok(())
    }

    /// The top class of subtree `id` changed, or the operator's choice for it: splits it or
    /// gives it an owner, as the rule now says.
    fn decide_again<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        now: Instant,
        port: usize,
        id: ClassId,
    ) -> Result<(), PlaneError> {
        let view = &self.views[port];
        if view.covers(id) && is_subtree_top(&**view, id) {
            return self.place(planes, now, port, id, true);
        }
        Ok(())
    }

    /// Places subtree `top` of `port` as the rule says. Split: every worker queues what it
    /// receives, and (with `below`) every class of the subtree not yet shared is. Owned
    /// again: frames other workers queued while it was split drain from their copies, whose
    /// buckets stay shared (sharing is always right; it costs only the atomics).
    fn place<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        now: Instant,
        port: usize,
        top: ClassId,
        below: bool,
    ) -> Result<(), PlaneError> {
        let Some(rate) = self.views[port].class(top).map(|c| c.rate) else {
            return Ok(());
        };
        let split = self.rule.splits(port, top, rate);
        // Who holds the subtree's classes before: its owner alone, or every worker.
        let held_by = self.views[port].holder(top);
        let view = self.view_mut(port);
        let before = view.server(top);
        let server = view.assignment.place(top, split);
        if before == Some(server) || !split {
            return Ok(());
        }
        // Split: every worker gets the classes, and keeps them should it be owned again (the
        // frames queued in a copy drain there).
        let copied = match held_by {
            Some(owner) => self.copy_subtree(planes, now, port, top, usize::from(owner)),
            None => Ok(()),
        };
        self.view_mut(port).keep_everywhere(top);
        let view = &self.views[port];
        let unshared: Vec<ClassId> = if below {
            view.class_ids()
                .filter(|&c| {
                    subtree_of(&**view, c) == Some(top) && view.class(c).is_some_and(|c| !c.shared)
                })
                .collect()
        } else {
            view.class(top)
                .filter(|c| !c.shared)
                .map(|_| vec![top])
                .unwrap_or_default()
        };
        for id in unshared {
            self.share(planes, port, id);
        }
        copied
    }

    /// Shares class `id`'s buckets on `port` between every worker, each with a seat (fair
    /// between the workers queueing into it, should it be a leaf of a split subtree).
    fn share<R: Rings>(&mut self, planes: &mut [&mut Dataplane<R>], port: usize, id: ClassId) {
        let buckets = Arc::new(SharedBuckets::with_seats(planes.len()));
        for plane in planes.iter_mut() {
            plane.share(port, id, Arc::clone(&buckets));
        }
        self.view_mut(port).mark_shared(id);
    }

    /// Every worker queues the frames of subtree `top` it receives, its buckets NOT shared
    /// (a control for the tests that measure the sharing).
    #[cfg(test)]
    pub(crate) fn serve_unshared<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        port: usize,
        top: ClassId,
    ) {
        self.recall(planes);
        if let Some(owner) = self.views[port].holder(top) {
            let copied = self.copy_subtree(planes, Instant::ZERO, port, top, usize::from(owner));
            assert!(copied.is_ok(), "{copied:?}");
        }
        let view = self.view_mut(port);
        view.assignment.remove(top);
        view.assignment.place(top, true);
        view.keep_everywhere(top);
        self.hand_out(planes, &vec![true; self.views.len()]);
    }
}

/// The port an operation's shape is about.
fn shape_port(shape: &Shape) -> Option<usize> {
    match shape {
        Shape::Added { port, .. }
        | Shape::Changed { port, .. }
        | Shape::Deleted { port, .. }
        | Shape::NewTree { port, .. }
        | Shape::Qdisc { port, .. }
        | Shape::Chosen { port, .. }
        | Shape::Leaf { port, .. } => Some(*port),
        Shape::Other => None,
    }
}

fn shape_of<R: Rings>(planes: &[&mut Dataplane<R>], op: &PlaneOp) -> Shape {
    let Some(port) = planes.first().and_then(|p| p.port_index(op.port())) else {
        return Shape::Other;
    };
    match op {
        PlaneOp::AddClass {
            id, parent, spec, ..
        } => Shape::Added {
            port,
            id: *id,
            parent: *parent,
            rate: spec.rate,
        },
        PlaneOp::ChangeClass { id, spec, .. } => Shape::Changed {
            port,
            id: *id,
            rate: spec.rate,
        },
        PlaneOp::DeleteClass { id, .. } => Shape::Deleted { port, id: *id },
        PlaneOp::SetTree {
            tree,
            major,
            schedulers,
            ..
        } => {
            let root = tree.as_ref().filter(|t| t.mq_minor.is_none());
            Shape::NewTree {
                port,
                major: *major,
                // The new tree's shape, from the scheduler the op carries for worker 0 (or
                // the spec the others are built from).
                root: root.map(|t| match schedulers.first() {
                    Some(htb) => TreeView::of_scheduler(htb),
                    None => TreeView::of_spec(&t.tree),
                }),
                choices: root.map(|t| t.split.clone()).unwrap_or_default(),
            }
        }
        PlaneOp::SetQdisc { config, .. } => Shape::Qdisc {
            port,
            major: config.major,
            default_minor: config.default_minor,
        },
        PlaneOp::SetLeaf { id, .. } | PlaneOp::ChangeLeaf { id, .. } => {
            Shape::Leaf { port, id: *id }
        }
        PlaneOp::SetSplit { id, choice, .. } => Shape::Chosen {
            port,
            id: *id,
            choice: *choice,
        },
        _ => Shape::Other,
    }
}
