//! The workers' data planes seen from the control side: a batch of changes applied to every
//! worker's copy of the trees, and the subtrees' owners and the top classes' shared buckets kept
//! up to date as classes come and go. Generic over the rings, so that the engine (AF_XDP) and
//! the several-worker property test (simulated rings) run the same code.

use std::sync::Arc;

use htb_core::{ClassId, Instant, Scheduler, SharedBuckets};

use crate::assign::{Assignment, is_subtree_top};
use crate::dataplane::Dataplane;
use crate::error::PlaneError;
use crate::frame::Frame;
use crate::plane_op::{PlaneOp, Retired};
use crate::rings::Rings;

/// Per port, which worker serves which subtree.
#[derive(Debug)]
pub(crate) struct Fleet {
    assignments: Vec<Assignment>,
}

/// What an operation does to the tree's shape, for the assignment of subtrees.
enum Shape {
    Added { port: usize, id: ClassId },
    Deleted { port: usize, id: ClassId },
    NewTree { port: usize },
    Other,
}

impl Fleet {
    /// `ports` ports served by `planes`, whose trees are assigned afresh.
    pub(crate) fn new<R: Rings>(ports: usize, planes: &mut [&mut Dataplane<R>]) -> Self {
        let mut fleet = Self {
            assignments: (0..ports).map(|_| Assignment::new(planes.len())).collect(),
        };
        for port in 0..ports {
            fleet.assign_tree(planes, port);
        }
        fleet
    }

    /// Subtrees per worker, summed over the ports.
    pub(crate) fn subtrees(&self, worker: usize) -> u32 {
        self.assignments
            .iter()
            .map(|a| a.load().get(worker).copied().unwrap_or(0))
            .sum()
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
        for (shape, result) in shapes.iter().zip(&results) {
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

    /// Brings the subtrees' owners and the shared classes up to date after an operation.
    fn reshape<R: Rings>(&mut self, planes: &mut [&mut Dataplane<R>], shape: &Shape) {
        if planes.len() < 2 {
            // One worker serves everything: no owners, nothing shared.
            return;
        }
        match *shape {
            Shape::Added { port, id } => self.assign_class(planes, port, id),
            Shape::Deleted { port, id } => {
                if self.assignments[port].remove(id) {
                    for plane in planes.iter_mut() {
                        plane.set_owner(port, id, None);
                    }
                }
            }
            Shape::NewTree { port } => self.assign_tree(planes, port),
            Shape::Other => {}
        }
    }

    /// Assigns every subtree of `port`'s tree afresh, in class-id order, and shares the
    /// top-level classes' buckets.
    fn assign_tree<R: Rings>(&mut self, planes: &mut [&mut Dataplane<R>], port: usize) {
        self.assignments[port].clear();
        for plane in planes.iter_mut() {
            plane.clear_owners(port);
        }
        if planes.len() < 2 {
            return;
        }
        let mut ids: Vec<ClassId> = root_tree_at(planes, port)
            .map(|s| s.class_ids().collect())
            .unwrap_or_default();
        ids.sort_unstable();
        for id in ids {
            self.assign_class(planes, port, id);
        }
    }

    /// A new class of `port`: shares its buckets if it is at the top of the root tree, and
    /// assigns it a worker if it tops a subtree. (A tree under `mq` belongs to its queue's
    /// worker whole: nothing to share or assign.)
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
        let top_level = htb.parent(id) == Some(None);
        if !is_subtree_top(htb, id) {
            return;
        }
        if top_level {
            let buckets = Arc::new(SharedBuckets::new());
            for plane in planes.iter_mut() {
                plane.share(port, id, Arc::clone(&buckets));
            }
        }
        let owner = self.assignments[port].add(id);
        for plane in planes.iter_mut() {
            plane.set_owner(port, id, Some(owner));
        }
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
        PlaneOp::DeleteClass { id, .. } => Shape::Deleted { port, id: *id },
        PlaneOp::SetTree { .. } => Shape::NewTree { port },
        _ => Shape::Other,
    }
}
