//! Changes to a port's tree or filters, built by the control plane and applied by the data
//! plane between two batches.

use htb_config::TreeSpec;
use htb_config::filter::Classifier;
use htb_core::{ClassId, ClassSpec, Instant, LeafConfig, Scheduler, SchedulerConfig};

use crate::frame::Frame;

/// A change to a port's tree or filters, for [`Engine::apply`](crate::Engine::apply).
#[derive(Debug)]
#[non_exhaustive]
pub enum PlaneOp {
    /// Replace the whole tree (tc `qdisc add|del|replace`); frames queued in the old one are
    /// dropped. Build the scheduler off the data-plane thread with [`new_scheduler`].
    SetTree {
        /// Port name.
        port: String,
        /// The new scheduler.
        scheduler: Box<Scheduler<Frame>>,
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
        /// The filters, compiled.
        classifier: Classifier,
    },
}

impl PlaneOp {
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
