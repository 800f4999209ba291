//! The workers' data planes seen from the control side: a batch of changes applied to every
//! worker's copy of the trees, and the subtrees' owners (or their split, `split.rs`) and the
//! shared buckets kept up to date as classes come and go. Generic over the rings, so that the engine (AF_XDP) and
//! the several-worker property test (simulated rings) run the same code.

use std::collections::BTreeMap;
use std::sync::Arc;

use htb_core::{ClassId, Instant, Rate, Scheduler, SharedBuckets, SplitChoice};

use crate::assign::{Assignment, Server, is_subtree_top, subtree_of};
use crate::dataplane::Dataplane;
use crate::error::PlaneError;
use crate::frame::Frame;
use crate::plane_op::{PlaneOp, Retired};
use crate::rings::Rings;
use crate::split::SplitRule;

/// Per port, who serves which subtree, and the rule that splits some.
#[derive(Debug)]
pub(crate) struct Fleet {
    assignments: Vec<Assignment>,
    rule: SplitRule,
}

/// What an operation does to the tree's shape, for the assignment of subtrees.
enum Shape {
    Added {
        port: usize,
        id: ClassId,
    },
    /// New parameters: its rate may have crossed `split_above`.
    Changed {
        port: usize,
        id: ClassId,
    },
    Deleted {
        port: usize,
        id: ClassId,
    },
    /// A new tree, with the operator's choices for its subtrees.
    NewTree {
        port: usize,
        choices: BTreeMap<ClassId, SplitChoice>,
    },
    Chosen {
        port: usize,
        id: ClassId,
        choice: Option<SplitChoice>,
    },
    Other,
}

impl Fleet {
    /// `ports` ports served by `planes`, whose trees are assigned afresh: subtrees whose top
    /// class's rate is above `split_above` split, and those in `choices[port]` as chosen.
    pub(crate) fn new<R: Rings>(
        ports: usize,
        planes: &mut [&mut Dataplane<R>],
        split_above: Option<Rate>,
        choices: Vec<BTreeMap<ClassId, SplitChoice>>,
    ) -> Self {
        let mut fleet = Self {
            assignments: (0..ports).map(|_| Assignment::new(planes.len())).collect(),
            rule: SplitRule::new(split_above, choices),
        };
        for port in 0..ports {
            fleet.assign_tree(planes, port);
        }
        fleet
    }

    /// Owned subtrees per worker, summed over the ports.
    pub(crate) fn subtrees(&self, worker: usize) -> u32 {
        self.assignments
            .iter()
            .map(|a| a.load().get(worker).copied().unwrap_or(0))
            .sum()
    }

    /// Split subtrees, over all ports.
    pub(crate) fn split_count(&self) -> u32 {
        let n: usize = self.assignments.iter().map(|a| a.split().count()).sum();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The split subtrees of port `port` (by index), by their top class.
    pub(crate) fn split_subtrees(&self, port: usize) -> Vec<ClassId> {
        self.assignments
            .get(port)
            .map(|a| a.split().collect())
            .unwrap_or_default()
    }

    /// Applies `ops` in order to every worker's data plane (see `Engine::apply`): per op, the
    /// packets it dropped (summed over the workers) or why it failed; the first failure ends
    /// the batch. Also returns what the ops replaced, to be dropped off the data-plane threads.
    pub(crate) fn apply<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        now: Instant,
        ops: Vec<PlaneOp>,
    ) -> (Vec<Result<u64, PlaneError>>, Retired) {
        let workers = planes.len();
        let mut shapes = Vec::with_capacity(ops.len());
        let mut copies: Vec<Vec<PlaneOp>> = (0..workers).map(|_| Vec::new()).collect();
        let mut refused = None;
        for op in ops {
            let shape = shape_of(planes, &op);
            match op.per_worker(workers) {
                Ok(ops) => {
                    for (list, op) in copies.iter_mut().zip(ops) {
                        list.push(op);
                    }
                    shapes.push(shape);
                }
                Err(e) => {
                    refused = Some(PlaneError::Class(e));
                    break;
                }
            }
        }
        let mut results: Vec<Result<u64, PlaneError>> = Vec::new();
        let mut retired = Retired::default();
        for (w, ops) in copies.into_iter().enumerate() {
            let (outcome, replaced) = planes[w].apply(now, ops);
            retired.extend(replaced);
            if w == 0 {
                results = outcome;
                continue;
            }
            for (total, other) in results.iter_mut().zip(outcome) {
                match (total, other) {
                    (Ok(n), Ok(m)) => *n += m,
                    (Ok(_), Err(e)) => {
                        tracing::error!("data-plane worker {w} disagrees with worker 0: {e}");
                    }
                    (Err(_), _) => {}
                }
            }
        }
        for (shape, result) in shapes.into_iter().zip(&results) {
            if result.is_ok() {
                self.reshape(planes, shape);
            }
        }
        if let Some(e) = refused
            && results.iter().all(Result::is_ok)
        {
            results.push(Err(e));
        }
        (results, retired)
    }

    /// Brings the subtrees' servers and the shared classes up to date after an operation
    /// (the whole batch applied: the trees are as the batch left them).
    fn reshape<R: Rings>(&mut self, planes: &mut [&mut Dataplane<R>], shape: Shape) {
        // The operator's choices are kept whatever the workers: the rule is one.
        match &shape {
            Shape::NewTree { port, choices } => self.rule.set_tree(*port, choices.clone()),
            Shape::Chosen { port, id, choice } => self.rule.choose(*port, *id, *choice),
            Shape::Deleted { port, id } => self.rule.forget(*port, *id),
            _ => {}
        }
        if planes.len() < 2 {
            // One worker serves everything: no owners, nothing shared.
            return;
        }
        match shape {
            Shape::Added { port, id } => self.assign_class(planes, port, id),
            Shape::Changed { port, id } | Shape::Chosen { port, id, .. } => {
                self.decide_again(planes, port, id);
            }
            Shape::Deleted { port, id } => {
                if self.assignments[port].remove(id) {
                    for plane in planes.iter_mut() {
                        plane.set_owner(port, id, None);
                    }
                }
            }
            Shape::NewTree { port, .. } => self.assign_tree(planes, port),
            Shape::Other => {}
        }
    }

    /// Assigns every subtree of `port`'s tree afresh, in class-id order, shares the top-level
    /// classes' buckets, and those of every class of a split subtree.
    fn assign_tree<R: Rings>(&mut self, planes: &mut [&mut Dataplane<R>], port: usize) {
        self.assignments[port].clear();
        for plane in planes.iter_mut() {
            plane.clear_owners(port);
        }
        if planes.len() < 2 {
            return;
        }
        let Some(htb) = root_tree_at(planes, port) else {
            return;
        };
        let mut ids: Vec<ClassId> = htb.class_ids().collect();
        ids.sort_unstable();
        // Tops first, so that each class below knows whether its subtree is split.
        let (tops, below): (Vec<ClassId>, Vec<ClassId>) =
            ids.into_iter().partition(|&id| is_subtree_top(htb, id));
        for id in tops.into_iter().chain(below) {
            self.assign_class(planes, port, id);
        }
    }

    /// A new class of `port`: shares its buckets if it is at the top of the root tree or in a
    /// split subtree, and places the subtree it tops. (A tree under `mq` belongs to its
    /// queue's worker whole: nothing to share or assign.)
    fn assign_class<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        port: usize,
        id: ClassId,
    ) {
        let Some(htb) = root_tree_at(planes, port).filter(|htb| htb.config().major == id.major())
        else {
            return;
        };
        let Some(top) = subtree_of(htb, id) else {
            return;
        };
        let top_level = htb.parent(id) == Some(None);
        let shared = htb.is_shared(id);
        if top == id {
            if top_level && !shared {
                share(planes, port, id);
            }
            // Its subtree is itself so far: the classes below come with their own adds.
            self.place(planes, port, id, false);
        } else if self.assignments[port].server(top) == Some(Server::Every) && !shared {
            share(planes, port, id);
        }
    }

    /// The top class of subtree `id` changed, or the operator's choice for it: splits it or
    /// gives it an owner, as the rule now says.
    fn decide_again<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        port: usize,
        id: ClassId,
    ) {
        let is_top = root_tree_at(planes, port)
            .filter(|htb| htb.config().major == id.major())
            .is_some_and(|htb| is_subtree_top(htb, id));
        if is_top {
            self.place(planes, port, id, true);
        }
    }

    /// Places subtree `top` of `port` as the rule says. Split: every worker queues what it
    /// receives, and (with `below`) every class of the subtree not yet shared is. Owned
    /// again: frames other workers queued while it was split drain from their copies, whose
    /// buckets stay shared (sharing is always right; it costs only the atomics).
    fn place<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        port: usize,
        top: ClassId,
        below: bool,
    ) {
        let Some(rate) = root_tree_at(planes, port)
            .and_then(|htb| htb.class_info(top))
            .map(|info| info.config.rate)
        else {
            return;
        };
        let split = self.rule.splits(port, top, rate);
        let before = self.assignments[port].server(top);
        let server = self.assignments[port].place(top, split);
        if before == Some(server) {
            return;
        }
        if split && below {
            let Some(htb) = root_tree_at(planes, port) else {
                return;
            };
            let unshared: Vec<ClassId> = htb
                .class_ids()
                .filter(|&c| subtree_of(htb, c) == Some(top) && !htb.is_shared(c))
                .collect();
            for id in unshared {
                share(planes, port, id);
            }
        } else if split && !root_tree_at(planes, port).is_some_and(|htb| htb.is_shared(top)) {
            share(planes, port, top);
        }
        for plane in planes.iter_mut() {
            plane.set_owner(port, top, Some(server));
        }
    }
}

/// Shares class `id`'s buckets on `port` between every worker, each with a seat (fair between
/// the workers queueing into it, should it be a leaf of a split subtree).
fn share<R: Rings>(planes: &mut [&mut Dataplane<R>], port: usize, id: ClassId) {
    let buckets = Arc::new(SharedBuckets::with_seats(planes.len()));
    for plane in planes.iter_mut() {
        plane.share(port, id, Arc::clone(&buckets));
    }
}

/// Worker 0's scheduler of the root tree of the port at `index` (every worker has the same
/// classes): the tree whose subtrees the workers share out.
fn root_tree_at<'a, R: Rings>(
    planes: &'a [&mut Dataplane<R>],
    index: usize,
) -> Option<&'a Scheduler<Frame>> {
    planes.first()?.root_tree_at(index)
}

fn shape_of<R: Rings>(planes: &[&mut Dataplane<R>], op: &PlaneOp) -> Shape {
    let Some(port) = planes.first().and_then(|p| p.port_index(op.port())) else {
        return Shape::Other;
    };
    match op {
        PlaneOp::AddClass { id, .. } => Shape::Added { port, id: *id },
        PlaneOp::ChangeClass { id, .. } => Shape::Changed { port, id: *id },
        PlaneOp::DeleteClass { id, .. } => Shape::Deleted { port, id: *id },
        PlaneOp::SetTree { tree, .. } => Shape::NewTree {
            port,
            choices: tree
                .as_ref()
                .filter(|t| t.mq_minor.is_none())
                .map(|t| t.split.clone())
                .unwrap_or_default(),
        },
        PlaneOp::SetSplit { id, choice, .. } => Shape::Chosen {
            port,
            id: *id,
            choice: *choice,
        },
        _ => Shape::Other,
    }
}
