//! Changes to a port's tree or filters: one enum, [`Change`], in two stages. The control
//! plane's model builds and keeps them uncompiled ([`PlaneChange`], for undo and persistence);
//! compiled ([`PlaneOp`]: trees built, filters compiled, off the data-plane threads), the data
//! plane applies them between two batches.

use std::fmt;
use std::sync::Arc;

use htb_classify::{Classifier, Filter};
use htb_core::{ClassId, ClassSpec, Instant, LeafConfig, Scheduler, SchedulerConfig, SplitChoice};
use htb_core::{PortTree, TreeSpec};

use crate::frame::Frame;

/// What a [`Change`] carries where the control plane and the data plane differ: new trees and
/// filters as the control plane describes them ([`Uncompiled`]), or built, ready to be swapped
/// in between two packet batches ([`Compiled`]).
pub trait Stage: fmt::Debug {
    /// A new tree's schedulers, one per worker.
    type Schedulers: fmt::Debug;
    /// A port's filters.
    type Filters: fmt::Debug;
    /// A port's ingress qdisc.
    type Ingress: fmt::Debug;
}

/// The control plane's stage: what the model accepted, cloneable, kept for undo and
/// persistence.
#[derive(Debug)]
pub enum Uncompiled {}

impl Stage for Uncompiled {
    type Schedulers = ();
    type Filters = Vec<Filter>;
    /// Its filters, each with the IFB port its mirred action redirects to (`None`: no ingress
    /// qdisc).
    type Ingress = Option<Vec<(Filter, Option<String>)>>;
}

/// The data plane's stage: trees built, filters compiled, off the data-plane threads.
#[derive(Debug)]
pub enum Compiled {}

impl Stage for Compiled {
    type Schedulers = Vec<Scheduler<Frame>>;
    type Filters = Arc<Classifier>;
    type Ingress = Option<Arc<IngressHook>>;
}

/// A change to a port's trees or filters, as the control plane accepted it
/// ([`PlaneChange`]), or compiled for [`Engine::apply`](crate::Engine::apply) ([`PlaneOp`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum Change<S: Stage> {
    /// Put in, replace or take out one of the port's trees (tc `qdisc add|del|replace` of
    /// the root htb, or of an htb under an `mq` class); frames queued in the old one are
    /// dropped, the port's other trees are not touched.
    SetTree {
        /// Port name.
        port: String,
        /// The tree's qdisc major: the tree with this major, if any, goes.
        major: u16,
        /// The new tree and where it hangs (`None`: the port no longer has tree `major`), for
        /// more copies should there be more workers than schedulers.
        tree: Option<PortTree>,
        /// Compiled: one new scheduler per worker (none when the tree goes).
        schedulers: S::Schedulers,
    },
    /// New qdisc parameters of tree `config.major` (default class, r2q, direct queue limit,
    /// size table); classes stay.
    SetQdisc {
        /// Port name.
        port: String,
        /// The parameters.
        config: SchedulerConfig,
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
    /// tc `class change`: new parameters; the class's leaf qdisc stays.
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
    /// Replace the port's filters. Compiled by the sender: compiling 100 000 filters takes
    /// milliseconds; the data-plane thread only swaps them in.
    SetFilters {
        /// Port name.
        port: String,
        /// The filters, in evaluation order (compiled: once for every worker).
        filters: S::Filters,
    },
    /// Put in, replace or take out the port's ingress qdisc (tc's `ffff: ingress`) and its
    /// filters.
    SetIngress {
        /// Port name.
        port: String,
        /// Its filters and their redirects (`None`: no ingress qdisc).
        ingress: S::Ingress,
    },
    /// The operator's choice for the subtree class `id` tops (`split = …` in the config file;
    /// tc has no word for it): served by every worker, or by one. Decided again at once.
    SetSplit {
        /// Port name.
        port: String,
        /// The subtree's top class.
        id: ClassId,
        /// The choice (`None`: the daemon's `split_above` decides).
        choice: Option<SplitChoice>,
    },
}

/// A change as the control plane keeps it (for undo and persistence) before it is compiled.
pub type PlaneChange = Change<Uncompiled>;

/// A change compiled for the data plane ([`PlaneChange::compile`]).
pub type PlaneOp = Change<Compiled>;

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
    pub fn new(mut filters: Vec<(Filter, Option<String>)>) -> Self {
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

impl<S: Stage> Change<S>
where
    S::Filters: Clone,
    S::Ingress: Clone,
{
    /// A copy, with `schedulers` in place of a new tree's (they hold frames: never copied).
    fn copy_with(&self, schedulers: S::Schedulers) -> Self {
        match self {
            Self::SetTree {
                port, major, tree, ..
            } => Self::SetTree {
                port: port.clone(),
                major: *major,
                tree: tree.clone(),
                schedulers,
            },
            Self::SetQdisc { port, config } => Self::SetQdisc {
                port: port.clone(),
                config: *config,
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
            Self::SetFilters { port, filters } => Self::SetFilters {
                port: port.clone(),
                filters: filters.clone(),
            },
            Self::SetIngress { port, ingress } => Self::SetIngress {
                port: port.clone(),
                ingress: ingress.clone(),
            },
            Self::SetSplit { port, id, choice } => Self::SetSplit {
                port: port.clone(),
                id: *id,
                choice: *choice,
            },
        }
    }
}

impl Clone for PlaneChange {
    fn clone(&self) -> Self {
        self.copy_with(())
    }
}

impl<S: Stage> Change<S> {
    /// The qdisc major of the tree it changes (`None`: the port's filters).
    #[must_use]
    pub fn major(&self) -> Option<u16> {
        match self {
            Self::SetTree { major, .. } => Some(*major),
            Self::SetQdisc { config, .. } => Some(config.major),
            Self::AddClass { id, .. }
            | Self::ChangeClass { id, .. }
            | Self::DeleteClass { id, .. }
            | Self::SetLeaf { id, .. }
            | Self::ChangeLeaf { id, .. }
            | Self::SetSplit { id, .. } => Some(id.major()),
            Self::SetFilters { .. } | Self::SetIngress { .. } => None,
        }
    }

    /// What it does, as tc's words say it (for logs).
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SetTree { .. } => "qdisc replace",
            Self::SetQdisc { .. } => "qdisc change",
            Self::AddClass { .. } => "class add",
            Self::ChangeClass { .. } => "class change",
            Self::DeleteClass { .. } => "class del",
            Self::SetLeaf { .. } => "leaf qdisc replace",
            Self::ChangeLeaf { .. } => "leaf qdisc change",
            Self::SetFilters { .. } => "filters replace",
            Self::SetIngress { .. } => "ingress replace",
            Self::SetSplit { .. } => "split choice",
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
            | Self::SetIngress { port, .. }
            | Self::SetSplit { port, .. } => port,
        }
    }
}

impl PlaneChange {
    /// Puts `tree` on `port` in place of its tree `major` (`None`: takes tree `major` out).
    #[must_use]
    pub fn tree(port: String, major: u16, tree: Option<PortTree>) -> Self {
        Self::SetTree {
            port,
            major,
            tree,
            schedulers: (),
        }
    }

    /// Compiled for `workers` workers ([`EngineHandle::workers`](crate::EngineHandle::workers)):
    /// a new tree's schedulers built, one per worker, filters compiled once. Call it off the
    /// data-plane threads.
    ///
    /// # Errors
    /// A class the tree cannot hold (only if the tree was not validated).
    pub fn compile(self, workers: usize) -> Result<PlaneOp, htb_core::ClassError> {
        Ok(match self {
            Self::SetTree {
                port, major, tree, ..
            } => PlaneOp::set_tree(port, major, tree, workers)?,
            Self::SetQdisc { port, config } => Change::SetQdisc { port, config },
            Self::AddClass {
                port,
                id,
                parent,
                spec,
            } => Change::AddClass {
                port,
                id,
                parent,
                spec,
            },
            Self::ChangeClass { port, id, spec } => Change::ChangeClass { port, id, spec },
            Self::DeleteClass { port, id } => Change::DeleteClass { port, id },
            Self::SetLeaf { port, id, leaf } => Change::SetLeaf { port, id, leaf },
            Self::ChangeLeaf { port, id, leaf } => Change::ChangeLeaf { port, id, leaf },
            Self::SetFilters { port, filters } => Change::SetFilters {
                port,
                filters: Arc::new(Classifier::new(filters)),
            },
            Self::SetIngress { port, ingress } => Change::SetIngress {
                port,
                ingress: ingress.map(|filters| Arc::new(IngressHook::new(filters))),
            },
            Self::SetSplit { port, id, choice } => Change::SetSplit { port, id, choice },
        })
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
                            split: tree.split.clone(),
                        }),
                        schedulers: vec![scheduler],
                    })
                    .collect())
            }
            op => {
                let mut copies = Vec::with_capacity(workers);
                for _ in 1..workers {
                    copies.push(op.copy_with(Vec::new()));
                }
                copies.push(op);
                Ok(copies)
            }
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
