//! Changes to a port's tree or filters, built by the control plane and applied by the data
//! plane between two batches.

use std::sync::Arc;

use htb_config::TreeSpec;
use htb_config::filter::Classifier;
use htb_core::{ClassId, ClassSpec, Instant, LeafConfig, Scheduler, SchedulerConfig};

use crate::frame::Frame;

/// A change to a port's tree or filters, for [`Engine::apply`](crate::Engine::apply).
#[derive(Debug)]
#[non_exhaustive]
pub enum PlaneOp {
    /// Replace the whole tree (tc `qdisc add|del|replace`); frames queued in the old one are
    /// dropped. Make it with [`PlaneOp::set_tree`], which builds one scheduler per worker off
    /// the data-plane threads.
    SetTree {
        /// Port name.
        port: String,
        /// The tree (`None`: unshaped), for more copies should there be more workers than
        /// schedulers.
        tree: Option<TreeSpec>,
        /// One new scheduler per worker.
        schedulers: Vec<Scheduler<Frame>>,
    },
    /// New qdisc parameters; classes stay.
    SetQdisc {
        /// Port name.
        port: String,
        /// Default class minor.
        default_minor: u32,
        /// Rate-to-quantum divisor.
        r2q: u32,
        /// Direct queue limit.
        direct_qlen: u32,
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
}

impl PlaneOp {
    /// Replaces `port`'s tree with `tree` (`None`: unshaped) on each of `workers` workers
    /// ([`EngineHandle::workers`](crate::EngineHandle::workers)), building their schedulers
    /// here.
    ///
    /// # Errors
    /// A class the tree cannot hold (only if the tree was not validated).
    pub fn set_tree(
        port: String,
        tree: Option<TreeSpec>,
        workers: usize,
    ) -> Result<Self, htb_core::ClassError> {
        let schedulers = (0..workers.max(1))
            .map(|_| new_scheduler(tree.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Self::SetTree {
            port,
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
                tree,
                mut schedulers,
            } => {
                while schedulers.len() < workers {
                    schedulers.push(new_scheduler(tree.as_ref())?);
                }
                schedulers.truncate(workers);
                Ok(schedulers
                    .into_iter()
                    .map(|scheduler| Self::SetTree {
                        port: port.clone(),
                        tree: None,
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
            Self::SetTree { port, tree, .. } => Self::SetTree {
                port: port.clone(),
                tree: tree.clone(),
                schedulers: Vec::new(),
            },
            Self::SetQdisc {
                port,
                default_minor,
                r2q,
                direct_qlen,
            } => Self::SetQdisc {
                port: port.clone(),
                default_minor: *default_minor,
                r2q: *r2q,
                direct_qlen: *direct_qlen,
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
            | Self::SetFilters { port, .. } => port,
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
