//! # htb-core: a Hierarchical Token Bucket scheduler
//!
//! Linux `sch_htb` semantics — classes with `rate`, `ceil`, `burst`, `cburst`, `prio`,
//! `quantum`, borrowing from ancestors, three colours, per-level DRR — as a `no_std`, sans-IO
//! library with a nanosecond virtual clock:
//!
//! - **Sans-IO.** The scheduler never reads a clock or touches a device. Every call takes
//!   `now`; [`Scheduler::next_wakeup`] says when to call [`Scheduler::dequeue`] again. The same
//!   code runs in the AF_XDP daemon, the simulator and tests.
//! - **Kernel-faithful.** The structure mirrors `net/sched/sch_htb.c` function by function
//!   (each is named where it is implemented): intrusive red-black trees for the per-level wait
//!   queues, rows and feeds, ordered by class id; `htb_activate_prios`, `htb_lookup_leaf`,
//!   `htb_dequeue_tree`, `htb_charge_class`, `htb_do_events`, the leaf→inner conversion and
//!   back.
//! - **Better where users complain** (the measurements are in the book: `docs/complexity.md`,
//!   `docs/scale.md`, `docs/bench-lab.md`):
//!   tokens in 1/256 ns instead of whole ns and exact 64-bit rate arithmetic (accurate from
//!   1 bit/s to beyond 1 Tbit/s); default bursts sized by time so that high rates are reached;
//!   warnings are returned values, never log lines; `change` keeps a class's byte credit;
//!   a missing parent is an error, not a silent root class; 32-bit class minors.
//!
//! ```
//! use htb_core::{ClassId, ClassSpec, Instant, Rate, Scheduler, SchedulerConfig};
//!
//! let mut htb: Scheduler<u32> = Scheduler::new(SchedulerConfig::default());
//! let root = ClassId::new(1, 1);
//! let leaf = ClassId::new(1, 0x10);
//! let now = Instant::ZERO;
//! htb.add_class(now, root, None, &ClassSpec::new(Rate::from_mbit(100)))?;
//! htb.add_class(now, leaf, Some(root), &ClassSpec::new(Rate::from_mbit(10)).with_ceil(Rate::from_mbit(100)))?;
//!
//! // A packet is anything implementing `Packet`; `u32` is a bare length.
//! htb.enqueue(now, leaf, 1500).expect("queue has room");
//! assert_eq!(htb.dequeue(now), Some(1500));
//! assert_eq!(htb.next_wakeup(), None); // nothing queued: sleep until the next packet
//! # Ok::<(), htb_core::ClassError>(())
//! ```
//!
//! Each leaf class holds its packets in a leaf queue discipline ([`leaf`]): `fq_codel` by
//! default, or `sfq`, `pfifo`, `bfifo`, as tc's child qdiscs. Packets a leaf drops come back
//! through [`Scheduler::drain_dropped`].
//!
//! Internals: classes live in an arena addressed by slot index, and every tree links by index,
//! so the crate needs no `unsafe` and a packet costs no allocation. [`Scheduler::check`]
//! verifies all invariants; the tests call it after every step.

#![no_std]
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    clippy::std_instead_of_core,
    clippy::alloc_instead_of_core
)]

extern crate alloc;

#[macro_use]
mod keyword;
#[macro_use]
mod newtype;

mod class_id;
mod error;
mod estimator;
pub mod leaf;
mod packet;
mod rate;
mod rbtree;
mod sched;
mod spec;
mod stab;
mod stall;
mod stats;
mod time;
mod tree_spec;
pub mod units;

pub use class_id::{ClassId, ClassIdError};
pub use error::ClassError;
pub use estimator::{RateEstimator, Rates};
// Every kind's spec and config, and what leaves share, at the crate's root: the leaf module
// lists them once (a kind added there needs no line here).
pub use leaf::*;
pub use packet::Packet;
pub use rate::{LengthAdjust, LinkLayer, Rate};
pub use sched::{
    Change, CheckError, ClassHandle, ClassInfo, DropReason, Dropped, MAX_SEATS, Scheduler,
    SharedBuckets, Target,
};
pub use spec::{
    ClassConfig, ClassSpec, DEFAULT_MTU, MAX_BURST_TIME, MAX_DEPTH, MAX_PRIO, SchedulerConfig,
    Warning,
};
pub use stab::{MAX_TSIZE, SizeSpec, SizeTable, SizeTableError};
pub use stall::StallLog;
pub use stats::{ClassStats, Mode, QueueCounters, SchedulerStats};
pub use time::{Duration, Instant};
pub use tree_spec::{ClassDef, LeafDef, PortTree, SplitChoice, TreeSpec};
