//! Changes to a port's tree or filters, built by the control plane and applied by the data
//! plane between two batches.

use std::sync::Arc;

use htb_classify::Classifier;
use htb_core::{ClassId, ClassSpec, Instant, LeafConfig, Scheduler, SchedulerConfig, SizeTable};
use htb_core::{PortTree, TreeSpec};

use crate::frame::Frame;

/// A change to a port's tree or filters, for [`Engine::apply`](crate::Engine::apply).
#[derive(Debug)]
#[non_exhaustive]
pub enum PlaneOp {
    /// Put in, replace or take out one of the port's trees (tc `qdisc add|del|replace` of
    /// the root htb, or of an htb under an `mq` class); frames queued in the old one are
    /// dropped, the port's other trees are not touched. Make it with [`PlaneOp::set_tree`],
    /// which builds one scheduler per worker off the data-plane threads.
    SetTree {
        /// Port name.
        port: String,
        /// The tree's qdisc major: the tree with this major, if any, goes.
        major: u16,
        /// The new tree and where it hangs (`None`: the port no longer has tree `major`), for
        /// more copies should there be more workers than schedulers.
        tree: Option<PortTree>,
        /// One new scheduler per worker (none when the tree goes).
        schedulers: Vec<Scheduler<Frame>>,
    },
    /// New qdisc parameters of tree `major`; classes stay.
    SetQdisc {
        /// Port name.
        port: String,
        /// The tree's qdisc major.
        major: u16,
        /// Default class minor.
        default_minor: u32,
        /// Rate-to-quantum divisor.
        r2q: u32,
        /// Direct queue limit.
        direct_qlen: u32,
        /// Size table (`stab`).
        stab: Option<SizeTable>,
    },
    /// tc `class add`.
    AddClass {
        /// Port name.
        port: String,
        /// Class.
        id: ClassId,
        /// Parent (`None`: root).
        parent: Option<ClassId>,
        /// Parameters.
        spec: ClassSpec,
    },
    /// tc `class change`.
    ChangeClass {
        /// Port name.
        port: String,
        /// Class.
        id: ClassId,
        /// Parameters.
        spec: ClassSpec,
    },
    /// tc `class del`.
    DeleteClass {
        /// Port name.
        port: String,
        /// Class.
        id: ClassId,
    },
    /// A new, empty leaf qdisc for a leaf class (`None`: the default one); the old one's
    /// frames are dropped.
    SetLeaf {
        /// Port name.
        port: String,
        /// Class.
        id: ClassId,
        /// The leaf.
        leaf: Option<LeafConfig>,
    },
    /// New parameters for a leaf class's qdisc, in place (same kind).
    ChangeLeaf {
        /// Port name.
        port: String,
        /// Class.
        id: ClassId,
        /// The parameters.
        leaf: LeafConfig,
    },
    /// Replace the port's filters, compiled by the sender (compiling 100 000 filters takes
    /// milliseconds; the data-plane thread only swaps them in).
    SetFilters {
        /// Port name.
        port: String,
        /// The filters, compiled (once for every worker).
        classifier: Arc<Classifier>,
    },
    /// Put in, replace or take out the port's ingress qdisc (tc's `ffff: ingress`) and its
    /// filters.
    SetIngress {
        /// Port name.
        port: String,
        /// The filters and their redirects, compiled by the sender (`None`: no ingress qdisc).
        hook: Option<Arc<IngressHook>>,
    },
}

/// What applied operations replaced and is costly to free: ports' old compiled filters (100 000
/// of them take milliseconds to free, a stall if it happened between two packet batches). The
/// data plane hands them back with the results; whoever drops this frees them, off the
/// data-plane thread.
#[derive(Debug, Default)]
#[must_use = "dropping it frees the replaced filters: do it off the data-plane thread"]
pub struct Retired(pub(crate) Vec<Arc<Classifier>>);

impl Retired {
    /// Adds what `other` holds.
    pub(crate) fn extend(&mut self, other: Self) {
        self.0.extend(other.0);
    }

    /// Whether it holds nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A port's ingress qdisc (tc's `qdisc add dev X handle ffff: ingress`) as the data plane runs
/// it: filters evaluated on every frame the port receives, before its egress port is served.
/// A filter whose action is `mirred egress redirect dev ifbN` queues what it matches in that
/// IFB's tree first (what `act_mirred` and `ifb_xmit` do in the kernel); one with a policer
/// drops what exceeds it; a frame no filter takes goes on as if there were no ingress qdisc.
#[derive(Debug)]
pub struct IngressHook {
    /// The filters, compiled, in evaluation order.
    pub classifier: Classifier,
    /// Per filter, the IFB port its mirred action redirects to (`None`: no redirect).
    pub redirects: Vec<Option<String>>,
}

impl IngressHook {
    /// Compiles `filters`, each with the IFB it redirects to.
    #[must_use]
    pub fn new(mut filters: Vec<(htb_classify::Filter, Option<String>)>) -> Self {
        // The classifier orders its filters by prio (stably) and names a match by its position
        // in that order: the redirects follow the same order.
        filters.sort_by_key(|(f, _)| f.prio);
        let (filters, redirects) = filters.into_iter().unzip();
        Self {
            classifier: Classifier::new(filters),
            redirects,
        }
    }
}

impl PlaneOp {
    /// Puts `tree` on `port` in place of its tree `major` (`None`: takes tree `major` out) on
    /// each of `workers` workers ([`EngineHandle::workers`](crate::EngineHandle::workers)),
    /// building their schedulers here.
    ///
    /// # Errors
    /// A class the tree cannot hold (only if the tree was not validated).
    pub fn set_tree(
        port: String,
        major: u16,
        tree: Option<PortTree>,
        workers: usize,
    ) -> Result<Self, htb_core::ClassError> {
        let schedulers = match &tree {
            Some(t) => (0..workers.max(1))
                .map(|_| new_scheduler(Some(&t.tree)))
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        Ok(Self::SetTree {
            port,
            major,
            tree,
            schedulers,
        })
    }

    /// This operation once per worker, for `workers` workers: each gets its own scheduler of
    /// a new tree (built here if the sender built too few) and a copy of the rest.
    pub(crate) fn per_worker(self, workers: usize) -> Result<Vec<Self>, htb_core::ClassError> {
        let workers = workers.max(1);
        match self {
            Self::SetTree {
                port,
                major,
                tree: Some(tree),
                mut schedulers,
            } => {
                while schedulers.len() < workers {
                    schedulers.push(new_scheduler(Some(&tree.tree))?);
                }
                schedulers.truncate(workers);
                Ok(schedulers
                    .into_iter()
                    .map(|scheduler| Self::SetTree {
                        port: port.clone(),
                        major,
                        tree: Some(PortTree {
                            tree: TreeSpec {
                                config: tree.tree.config,
                                classes: Vec::new(),
                                warnings: Vec::new(),
                            },
                            mq_minor: tree.mq_minor,
                        }),
                        schedulers: vec![scheduler],
                    })
                    .collect())
            }
            op => {
                let mut copies = Vec::with_capacity(workers);
                for _ in 1..workers {
                    copies.push(op.copy_of_change());
                }
                copies.push(op);
                Ok(copies)
            }
        }
    }

    /// A copy of an operation other than [`SetTree`](Self::SetTree) (whose scheduler holds
    /// frames and is not copied).
    fn copy_of_change(&self) -> Self {
        match self {
            Self::SetTree {
                port, major, tree, ..
            } => Self::SetTree {
                port: port.clone(),
                major: *major,
                tree: tree.clone(),
                schedulers: Vec::new(),
            },
            Self::SetQdisc {
                port,
                major,
                default_minor,
                r2q,
                direct_qlen,
                stab,
            } => Self::SetQdisc {
                port: port.clone(),
                major: *major,
                default_minor: *default_minor,
                r2q: *r2q,
                direct_qlen: *direct_qlen,
                stab: *stab,
            },
            Self::AddClass {
                port,
                id,
                parent,
                spec,
            } => Self::AddClass {
                port: port.clone(),
                id: *id,
                parent: *parent,
                spec: spec.clone(),
            },
            Self::ChangeClass { port, id, spec } => Self::ChangeClass {
                port: port.clone(),
                id: *id,
                spec: spec.clone(),
            },
            Self::DeleteClass { port, id } => Self::DeleteClass {
                port: port.clone(),
                id: *id,
            },
            Self::SetLeaf { port, id, leaf } => Self::SetLeaf {
                port: port.clone(),
                id: *id,
                leaf: *leaf,
            },
            Self::ChangeLeaf { port, id, leaf } => Self::ChangeLeaf {
                port: port.clone(),
                id: *id,
                leaf: *leaf,
            },
            Self::SetFilters { port, classifier } => Self::SetFilters {
                port: port.clone(),
                classifier: Arc::clone(classifier),
            },
            Self::SetIngress { port, hook } => Self::SetIngress {
                port: port.clone(),
                hook: hook.clone(),
            },
        }
    }

    /// The qdisc major of the tree it changes (`None`: the port's filters).
    #[must_use]
    pub fn major(&self) -> Option<u16> {
        match self {
            Self::SetTree { major, .. } | Self::SetQdisc { major, .. } => Some(*major),
            Self::AddClass { id, .. }
            | Self::ChangeClass { id, .. }
            | Self::DeleteClass { id, .. }
            | Self::SetLeaf { id, .. }
            | Self::ChangeLeaf { id, .. } => Some(id.major()),
            Self::SetFilters { .. } | Self::SetIngress { .. } => None,
        }
    }

    /// The port it changes.
    #[must_use]
    pub fn port(&self) -> &str {
        match self {
            Self::SetTree { port, .. }
            | Self::SetQdisc { port, .. }
            | Self::AddClass { port, .. }
            | Self::ChangeClass { port, .. }
            | Self::DeleteClass { port, .. }
            | Self::SetLeaf { port, .. }
            | Self::ChangeLeaf { port, .. }
            | Self::SetFilters { port, .. }
            | Self::SetIngress { port, .. } => port,
        }
    }
}

/// A scheduler for a port: `tree`'s classes, or none (unshaped: everything goes through the
/// direct queue). Its leaves' randomness (`sfq`'s perturbation) is seeded from the OS, once per
/// process.
///
/// # Errors
/// A class the tree cannot hold (only if the tree was not validated).
pub fn new_scheduler(tree: Option<&TreeSpec>) -> Result<Scheduler<Frame>, htb_core::ClassError> {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        use std::hash::BuildHasher;
        std::hash::RandomState::new().hash_one("htbd leaf seed")
    });
    match tree {
        Some(tree) => {
            let mut tree = tree.clone();
            tree.config.seed = seed;
            tree.build(Instant::ZERO)
        }
        None => Ok(Scheduler::new(SchedulerConfig {
            seed,
            ..SchedulerConfig::default()
        })),
    }
}
