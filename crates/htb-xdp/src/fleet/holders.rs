//! Which workers hold which classes of a root tree: a class operation goes to the workers
//! holding the class (`Fleet::holder_for`), a subtree placed on one worker leaves the others
//! (`Fleet::settle`), a subtree split is copied to every worker (`Fleet::copy_subtree`), and
//! a batch is applied in order across the workers (`apply_in_order`) and their results are
//! merged (`merge_outcomes`).

use std::collections::{BTreeMap, BTreeSet};

use htb_core::{ClassId, ClassSpec, Instant, Rate};

use super::{Fleet, Shape};
use crate::assign::{is_subtree_top, least_loaded, subtree_of};
use crate::dataplane::Dataplane;
use crate::error::PlaneError;
use crate::plane_op::{PlaneOp, Retired};
use crate::rings::Rings;
use crate::split::SplitRule;

/// A batch's routing of class operations, built as its ops are routed (`Fleet::holder_for`).
pub(super) struct Routing {
    /// Classes added by this batch, with the worker holding them (`None`: every worker).
    pub(super) added: BTreeMap<(usize, ClassId), Option<u16>>,
    /// Top-level classes added by this batch: a class added under one tops a new subtree.
    top_level: BTreeSet<(usize, ClassId)>,
    /// Per port, the owned subtrees per worker as the batch's new subtrees so far leave them,
    /// where a new subtree's server is decided as it is routed; `None`: every worker gets
    /// it, and the assignment places it after the batch (`settle` deletes the copies).
    loads: Vec<Option<Vec<u32>>>,
    /// The new subtrees routed to one worker: (op index, port, top, the worker), for the
    /// check that the assignment placed them there.
    pub(super) placed: Vec<(usize, usize, ClassId, u16)>,
}

impl Routing {
    /// Decides, for each port, whether the batch's new subtrees are placed as they are
    /// routed. Exactly as `reshape` will place them after the batch, in op order, if nothing
    /// else in the batch moves a subtree or reads the rule differently: only class adds
    /// (each of a class not in the tree yet, once), leaf ops, qdisc parameters and changes
    /// of classes that do not top a subtree. A delete, a split choice, a new tree, a change
    /// of a subtree's top or of a class of the batch leave the port as before: every worker
    /// gets its new subtrees until the batch is applied.
    pub(super) fn new(fleet: &Fleet, shapes: &[Shape]) -> Self {
        let mut direct = vec![true; fleet.views.len()];
        let mut seen = BTreeSet::new();
        for shape in shapes {
            let (port, ok) = match *shape {
                Shape::Added { port, id, .. } => (
                    port,
                    seen.insert((port, id)) && fleet.views[port].class(id).is_none(),
                ),
                Shape::Changed { port, id, .. } => {
                    let view = &fleet.views[port];
                    (
                        port,
                        !seen.contains(&(port, id))
                            && view.class(id).is_some()
                            && !is_subtree_top(&**view, id),
                    )
                }
                Shape::Deleted { port, .. }
                | Shape::NewTree { port, .. }
                | Shape::Chosen { port, .. } => (port, false),
                Shape::Qdisc { .. } | Shape::Leaf { .. } | Shape::Other => continue,
            };
            if let Some(d) = direct.get_mut(port) {
                *d &= ok;
            }
        }
        let loads = fleet
            .views
            .iter()
            .zip(direct)
            .map(|(view, direct)| direct.then(|| view.assignment.load().to_vec()))
            .collect();
        Self {
            added: BTreeMap::new(),
            top_level: BTreeSet::new(),
            loads,
            placed: Vec::new(),
        }
    }

    /// Places new subtree `top` of `port` (op `op`), whose top class has rate `rate`, as
    /// `Assignment::place` will: split by the rule, else to the least-loaded worker. Returns
    /// its owner; `None` where it is split or the port's subtrees are placed after the batch.
    fn place(
        &mut self,
        rule: &SplitRule,
        op: usize,
        port: usize,
        top: ClassId,
        rate: Rate,
    ) -> Option<u16> {
        let load = self.loads.get_mut(port)?.as_mut()?;
        if rule.splits(port, top, rate) {
            return None;
        }
        let w = least_loaded(load);
        load[w] += 1;
        let w = u16::try_from(w).unwrap_or(0);
        self.placed.push((op, port, top, w));
        Some(w)
    }
}

impl Fleet {
    /// The one worker class operation `op` goes to (`None`: every worker): the worker
    /// holding the class — for a class added, its parent's holder; a new subtree, its owner
    /// as the assignment will place it (`Routing::place`), or every worker until the batch
    /// is applied and it is placed (`settle`) where the batch may move subtrees. Notes the
    /// classes the batch adds and deletes.
    pub(super) fn holder_for(
        &self,
        op: usize,
        shape: &Shape,
        routing: &mut Routing,
    ) -> Option<u16> {
        let (port, id) = match shape {
            Shape::Added { port, id, .. }
            | Shape::Changed { port, id, .. }
            | Shape::Deleted { port, id }
            | Shape::Leaf { port, id } => (*port, *id),
            _ => return None,
        };
        let view = &self.views[port];
        if !view.covers(id) {
            return None;
        }
        let of = |added: &BTreeMap<(usize, ClassId), Option<u16>>, c: ClassId| match added
            .get(&(port, c))
        {
            Some(&h) => h,
            None => view.holder(c),
        };
        match shape {
            Shape::Added { parent, rate, .. } => {
                let holder = match *parent {
                    None => {
                        // At the top: every worker holds it; placed, it weighs on a load.
                        routing.place(&self.rule, op, port, id, *rate);
                        routing.top_level.insert((port, id));
                        None
                    }
                    Some(p) => {
                        let in_batch = routing.added.contains_key(&(port, p));
                        let new_top = if in_batch {
                            routing.top_level.contains(&(port, p))
                        } else {
                            view.class(p).is_some_and(|c| c.parent.is_none())
                        };
                        if new_top {
                            // A child of a top-level class tops a new subtree.
                            routing.place(&self.rule, op, port, id, *rate)
                        } else if in_batch || view.class(p).is_some() {
                            of(&routing.added, p)
                        } else {
                            None
                        }
                    }
                };
                routing.added.insert((port, id), holder);
                holder
            }
            Shape::Deleted { .. } => {
                let holder = of(&routing.added, id);
                routing.added.remove(&(port, id));
                routing.top_level.remove(&(port, id));
                holder
            }
            _ => of(&routing.added, id),
        }
    }

    /// Moves the classes to where the assignment says, after a batch: the classes `touched`
    /// (added to every worker by the batch, or of a new tree) that are in a subtree one
    /// worker owns are deleted from the others, deepest first (they hold no frames: nothing
    /// was received since they were added). Each comes with the index of the op that put it
    /// there; returns the deletions that failed, by that index.
    pub(super) fn settle<R: Rings>(
        &mut self,
        planes: &mut [&mut Dataplane<R>],
        now: Instant,
        touched: &[(usize, ClassId, usize)],
    ) -> Vec<(usize, PlaneError)> {
        let mut failed = Vec::new();
        if planes.len() < 2 || touched.is_empty() {
            return failed;
        }
        let mut gone: Vec<(usize, usize, ClassId, u16, usize)> = touched
            .iter()
            .filter_map(|&(port, id, op)| {
                let view = &self.views[port];
                Some((view.depth(id), port, id, view.holder(id)?, op))
            })
            .collect();
        gone.sort_unstable_by(|a, b| {
            b.0.cmp(&a.0)
                .then(a.1.cmp(&b.1))
                .then(a.2.cmp(&b.2))
                .then(a.4.cmp(&b.4))
        });
        gone.dedup_by_key(|g| (g.1, g.2));
        for (w, plane) in planes.iter_mut().enumerate() {
            let (origins, ops): (Vec<usize>, Vec<PlaneOp>) = gone
                .iter()
                .filter(|&&(_, port, id, owner, _)| {
                    usize::from(owner) != w
                        && plane.root_tree_at(port).is_some_and(|t| t.contains(id))
                })
                .filter_map(|&(_, port, id, _, op)| {
                    let delete = PlaneOp::DeleteClass {
                        port: plane.port_name(port)?.to_owned(),
                        id,
                    };
                    Some((op, delete))
                })
                .unzip();
            if ops.is_empty() {
                continue;
            }
            #[cfg(test)]
            {
                self.settled += ops.len();
            }
            let (results, retired) = plane.apply(now, ops);
            drop(retired);
            for (op, result) in origins.into_iter().zip(results) {
                if let Err(e) = result {
                    tracing::error!("data-plane worker {w}: a class it does not serve stays: {e}");
                    failed.push((op, e));
                }
            }
        }
        failed
    }

    /// Copies subtree `top` of `port` from worker `from`, its owner, to every other worker
    /// (it is split): each class with its parameters and its leaf, parents first. Err: the
    /// first class a worker did not take (every worker is tried).
    pub(super) fn copy_subtree<R: Rings>(
        &self,
        planes: &mut [&mut Dataplane<R>],
        now: Instant,
        port: usize,
        top: ClassId,
        from: usize,
    ) -> Result<(), PlaneError> {
        let view = &self.views[port];
        let mut ids: Vec<ClassId> = view
            .class_ids()
            .filter(|&c| subtree_of(&**view, c) == Some(top))
            .collect();
        ids.sort_by_key(|&c| view.depth(c));
        let Some(htb) = planes.get(from).and_then(|p| p.root_tree_at(port)) else {
            return Ok(());
        };
        let classes: Vec<_> = ids
            .into_iter()
            .filter_map(|id| {
                let info = htb.class_info(id)?;
                let c = info.config;
                let spec = ClassSpec {
                    rate: c.rate,
                    ceil: Some(c.ceil),
                    burst: Some(c.burst),
                    cburst: Some(c.cburst),
                    prio: u32::from(c.prio),
                    quantum: Some(c.quantum),
                    mtu: None,
                    adjust: c.adjust,
                };
                Some((id, info.parent, spec, info.leaf))
            })
            .collect();
        let mut first = Ok(());
        for (w, plane) in planes.iter_mut().enumerate() {
            let Some(name) = plane.port_name(port).map(str::to_owned) else {
                continue;
            };
            if w == from {
                continue;
            }
            let mut ops = Vec::new();
            for (id, parent, spec, leaf) in &classes {
                if plane.root_tree_at(port).is_some_and(|t| t.contains(*id)) {
                    continue;
                }
                ops.push(PlaneOp::AddClass {
                    port: name.clone(),
                    id: *id,
                    parent: *parent,
                    spec: spec.clone(),
                });
                if let Some(leaf) = leaf {
                    ops.push(PlaneOp::SetLeaf {
                        port: name.clone(),
                        id: *id,
                        leaf: Some(*leaf),
                    });
                }
            }
            let (results, retired) = plane.apply(now, ops);
            drop(retired);
            for e in results.into_iter().filter_map(Result::err) {
                tracing::error!("data-plane worker {w}: a class of split {top} not copied: {e}");
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

/// Applies a batch — per op, the worker it goes to and the op (`None`: every worker, and
/// its copy for each) — in op order across the workers, and stops every worker at the first
/// failure, so that no worker is ahead of the view (which follows only the ops that
/// succeeded). Consecutive ops for one worker go to it in one `Dataplane::apply` (which stops
/// at its first failure), and so do consecutive ops for every worker: an import's 1 000 000
/// new subtrees under one top class are one call per worker, not a million. Workers hold the
/// same classes for those ops, so they refuse the same one; should one refuse where another
/// does not (a bug: `merge_outcomes` logs it), the batch fails and the daemon
/// rebuilds the port. Per op, the outcome of each worker it was applied by (none: no worker
/// got to it), and what the ops replaced.
pub(super) fn apply_in_order<R: Rings>(
    planes: &mut [&mut Dataplane<R>],
    now: Instant,
    batch: Vec<(Option<u16>, Vec<PlaneOp>)>,
) -> (Vec<Vec<Result<u64, PlaneError>>>, Retired) {
    let workers = planes.len();
    let mut outcomes: Vec<Vec<Result<u64, PlaneError>>> =
        (0..batch.len()).map(|_| Vec::new()).collect();
    let mut retired = Retired::default();
    // One worker: every op is its, and the batch one run.
    let one = |holder: Option<u16>| holder.or(if workers == 1 { Some(0) } else { None });
    let mut batch = batch
        .into_iter()
        .map(|(holder, copies)| (one(holder), copies))
        .enumerate()
        .peekable();
    while let Some((first, (holder, copies))) = batch.next() {
        // The run: per worker, its copies of the ops, and the index of the op after the run.
        let mut run: Vec<Vec<PlaneOp>> = (0..workers).map(|_| Vec::new()).collect();
        let mut end = first + 1;
        match holder {
            None => {
                for (w, op) in copies.into_iter().enumerate() {
                    run[w].push(op);
                }
                while let Some((_, (None, _))) = batch.peek() {
                    let Some((_, (_, copies))) = batch.next() else {
                        break;
                    };
                    for (w, op) in copies.into_iter().enumerate() {
                        run[w].push(op);
                    }
                    end += 1;
                }
            }
            Some(h) => {
                let h = usize::from(h);
                run[h].extend(copies);
                while let Some((_, (next, _))) = batch.peek()
                    && *next == holder
                {
                    let Some((_, (_, copies))) = batch.next() else {
                        break;
                    };
                    run[h].extend(copies);
                    end += 1;
                }
            }
        }
        let mut failed = false;
        for (w, ops) in run.into_iter().enumerate() {
            if ops.is_empty() {
                continue;
            }
            let (outcome, replaced) = planes[w].apply(now, ops);
            retired.extend(replaced);
            failed |= outcome.iter().any(Result::is_err);
            for (i, result) in (first..end).zip(outcome) {
                outcomes[i].push(result);
            }
        }
        if failed {
            break;
        }
    }
    (outcomes, retired)
}

/// Per op, the outcomes of the workers that applied it as one result: the packets summed,
/// the first failure; the batch ends at the first op that failed or that no worker got to.
pub(super) fn merge_outcomes(
    outcomes: Vec<Vec<Result<u64, PlaneError>>>,
) -> Vec<Result<u64, PlaneError>> {
    let mut results = Vec::with_capacity(outcomes.len());
    for outcome in outcomes {
        let mut total: Option<Result<u64, PlaneError>> = None;
        if outcome.iter().any(Result::is_ok)
            && let Some(Err(e)) = outcome.iter().find(|r| r.is_err())
        {
            // Workers given one op hold the same classes for it: they should agree.
            tracing::error!("data-plane workers disagree on one operation: {e}");
        }
        for result in outcome {
            total = Some(match (total, result) {
                (Some(Err(e)), _) | (None | Some(Ok(_)), Err(e)) => Err(e),
                (None, Ok(n)) => Ok(n),
                (Some(Ok(n)), Ok(m)) => Ok(n + m),
            });
        }
        match total {
            Some(Ok(n)) => results.push(Ok(n)),
            Some(Err(e)) => {
                results.push(Err(e));
                break;
            }
            None => break,
        }
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_port() -> PlaneError {
        PlaneError::NoPort("x".into())
    }

    /// Packets are summed over the workers an op went to; the batch ends at the first
    /// failure, or at the first op no worker got to.
    #[test]
    fn outcomes_merge_over_the_workers_given_each_op() {
        let merged = merge_outcomes(vec![
            vec![Ok(1), Ok(2)],
            vec![Ok(5)],
            vec![Ok(0), Err(no_port())],
            vec![Ok(7)],
        ]);
        assert_eq!(merged.len(), 3, "{merged:?}");
        assert!(matches!(merged[0], Ok(3)));
        assert!(matches!(merged[1], Ok(5)));
        assert!(merged[2].is_err());
        let stopped = merge_outcomes(vec![vec![Ok(1)], vec![], vec![Ok(1)]]);
        assert_eq!(stopped.len(), 1, "no worker reached the second op");
    }
}
