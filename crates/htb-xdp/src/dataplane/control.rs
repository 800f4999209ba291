//! Control on the data plane: the operations a job applies between passes (a batch is atomic
//! for the traffic), and the owners and shared buckets of subtrees.

use std::collections::HashMap;
use std::sync::Arc;

use htb_core::{ClassId, Instant, SharedBuckets};

use super::port::{Ingress, resolve_redirects};
use super::{Dataplane, SLOW_OPERATION_NS};
use crate::assign::Server;
use crate::error::PlaneError;
use crate::frame::Frame;
use crate::plane_op::{PlaneOp, Retired};
use crate::rings::Rings;
use crate::sys;
use crate::tree_view::TreeView;

impl<R: Rings> Dataplane<R> {
    /// Applies `ops` in order at `now`: nothing is received or sent while they apply, so a
    /// batch of changes is atomic for the traffic. Frames the changes purge go back to the
    /// pool. Returns, per op, the packets it dropped or why it failed (the control plane
    /// validates first, so a failure is a bug). It stops at the first failure: the results end
    /// there, the later operations are not applied, and the control plane takes the batch back
    /// by rebuilding the touched ports' trees.
    pub(crate) fn apply(
        &mut self,
        now: Instant,
        ops: Vec<PlaneOp>,
    ) -> (Vec<Result<u64, PlaneError>>, Retired) {
        // New filters or a new tree: the resolved handles no longer apply. (Class adds and
        // deletes keep them: a new class is looked up when first matched, a deleted one's
        // handle is stale and falls back to its id.)
        let mut retarget = vec![false; self.ports.len()];
        let mut results = Vec::with_capacity(ops.len());
        // Each operation's CPU time, when debugging: which one makes a job long.
        let timed = tracing::enabled!(tracing::Level::DEBUG);
        for op in ops {
            let started = timed.then(|| (op.kind(), sys::thread_cpu_ns()));
            if results.last().is_some_and(Result::is_err) {
                break;
            }
            let Some(index) = self.port_index(op.port()) else {
                results.push(Err(PlaneError::NoPort(op.port().to_owned())));
                continue;
            };
            if let PlaneOp::SetIngress { ingress: hook, .. } = op {
                self.ports[index].ingress = hook.map(|hook| Ingress {
                    hook,
                    redirects: Vec::new(),
                });
                resolve_redirects(&mut self.ports);
                results.push(Ok(0));
                continue;
            }
            if let PlaneOp::SetSplit { .. } = op {
                // Nothing to change in the trees: the fleet decides who serves the subtree
                // (`Fleet::reshape`), and sets the owners.
                results.push(Ok(0));
                continue;
            }
            // With several workers the owner of each filter's leaf is cached too: it changes
            // when a class goes, when a leaf gets children (its frames fall to the default
            // class) and when the default class changes.
            retarget[index] |= matches!(op, PlaneOp::SetTree { .. } | PlaneOp::SetFilters { .. })
                || (self.crew.workers() > 1
                    && matches!(
                        op,
                        PlaneOp::DeleteClass { .. }
                            | PlaneOp::AddClass { .. }
                            | PlaneOp::SetQdisc { .. }
                    ));
            let port = &mut self.ports[index];
            let purged = port.apply(now, op);
            if let Some((kind, started)) = started {
                let took = sys::thread_cpu_ns().saturating_sub(started);
                if took > SLOW_OPERATION_NS {
                    tracing::debug!(
                        "data-plane operation {kind} on {} took {} µs of CPU",
                        port.name,
                        took / 1000
                    );
                }
            }
            let dropped: Vec<Frame> = port.drain_dropped().collect();
            results.push(match purged {
                Ok(frames) => {
                    let n = (frames.len() + dropped.len()) as u64;
                    self.ports[index].stats.drops_purged += n;
                    for frame in frames.into_iter().chain(dropped) {
                        self.rings.release(frame.into_chunk());
                    }
                    Ok(n)
                }
                Err(e) => {
                    for frame in dropped {
                        self.rings.release(frame.into_chunk());
                    }
                    Err(e)
                }
            });
        }
        let mut retired = Retired::default();
        for (port, retarget) in self.ports.iter_mut().zip(retarget) {
            if retarget {
                port.reset_targets();
            }
            retired.extend(std::mem::take(&mut port.retired));
        }
        (results, retired)
    }

    /// Hands the worker the fleet's view of `port`'s root tree (`None`: takes it back, for
    /// the fleet to write); with `changed`, forgets the owners resolved from the old.
    pub(crate) fn set_view(&mut self, port: usize, view: Option<Arc<TreeView>>, changed: bool) {
        let Some(p) = self.ports.get_mut(port) else {
            return;
        };
        p.view = view;
        if changed {
            p.reset_targets();
        }
    }

    /// Which worker serves each subtree of `port` that one worker serves, by the class at its
    /// top (split subtrees are not listed).
    #[must_use]
    pub(crate) fn owners(&self, port: &str) -> HashMap<ClassId, usize> {
        let Some(view) = self.port(port).and_then(|p| p.view.as_deref()) else {
            return HashMap::new();
        };
        view.class_ids()
            .filter_map(|id| match view.server(id)? {
                Server::Worker(w) => Some((id, usize::from(w))),
                Server::Every => None,
            })
            .collect()
    }

    /// Shares class `id`'s buckets on `port` with the other workers, this one taking its seat
    /// (buckets made with seats are shared fairly between the workers queueing into the class).
    pub(crate) fn share(&mut self, port: usize, id: ClassId, buckets: Arc<SharedBuckets>) {
        let seat = u16::try_from(self.crew.me()).unwrap_or(u16::MAX);
        let Some(p) = self.ports.get_mut(port) else {
            return;
        };
        let tree = p.tree_of(id.major());
        if tree.is_none_or(|t| p.trees[t].htb.share_class_as(id, buckets, seat).is_err()) {
            tracing::warn!("{}: class {id} to share is not in the tree", p.name);
        }
    }
}
