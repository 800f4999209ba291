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
pub use rate::{LengthAdjust, LinkLayer, Rate};
pub use sched::{
    Change, CheckError, ClassHandle, ClassInfo, DropReason, Dropped, Scheduler, SharedBuckets,
    Target,
};
pub use spec::{
    ClassConfig, ClassSpec, DEFAULT_MTU, MAX_BURST_TIME, MAX_DEPTH, MAX_PRIO, SchedulerConfig,
    Warning,
};
pub use stab::{MAX_TSIZE, SizeSpec, SizeTable, SizeTableError};
pub use stall::StallLog;
pub use stats::{ClassStats, Mode, QueueCounters, SchedulerStats};
pub use time::{Duration, Instant};
pub use tree_spec::{ClassDef, LeafDef, PortTree, TreeSpec};

/// A packet as the scheduler sees it: something with a length, and what the leaf queue
/// disciplines need to know about it.
///
/// The length is what the token buckets are charged (before the class's
/// [`LengthAdjust`]) and what the byte counters count: use the L2 frame length for an
/// Ethernet shaper, as the kernel's `qdisc_pkt_len` does.
pub trait Packet {
    /// Length in bytes.
    fn len_bytes(&self) -> u32;

    /// A hash of the packet's flow (its 5-tuple, keyed against collisions), as the kernel's
    /// `skb_get_hash`: `sfq` and `fq_codel` put packets with equal hashes in one flow. The
    /// default puts every packet in one flow.
    fn flow_hash(&self) -> u32 {
        0
    }

    /// Marks the packet Congestion Experienced if it is ECN-capable (`INET_ECN_set_ce`), and
    /// returns whether it now carries CE (it was ECT(0), ECT(1) or CE). The default: not
    /// ECN-capable, so CoDel drops it instead.
    fn set_ce(&mut self) -> bool {
        false
    }

    /// Bytes of buffer the packet holds (the kernel's `skb->truesize`): what `fq_codel`'s
    /// `memory_limit` counts. The default is its length.
    fn truesize(&self) -> u32 {
        self.len_bytes()
    }

    /// The DSCP (the IP header's DS field without its ECN bits) that `cake` picks a tin by
    /// (`cake_handle_diffserv`): 0 for packets without one, CS7 (`0x38`) for ARP. The
    /// default: 0, best effort.
    fn dscp(&self) -> u8 {
        0
    }

    /// Clears the DSCP, keeping the ECN bits (`cake`'s `wash`). The default does nothing.
    fn wash_dscp(&mut self) {}

    /// Keyed hashes of the source and destination addresses (the same address hashes alike
    /// either way), as `cake` isolates hosts by them. The default: one host each way.
    fn host_hashes(&self) -> (u32, u32) {
        (0, 0)
    }

    /// Bytes before the network header (`skb_network_offset`: 14 on Ethernet, 18 with a VLAN
    /// tag), which `cake`'s `overhead` replaces. The default: 0.
    fn network_offset(&self) -> u32 {
        0
    }

    /// The packet as `cake`'s ACK filter compares it, if it is a TCP segment
    /// ([`leaf::TcpAck::parse`] reads it from the headers). The default: not TCP.
    fn tcp_ack(&self) -> Option<&TcpAck> {
        None
    }

    /// The packet's firewall mark (`skb->mark`), which `cake`'s `fwmark` reads. The default: 0.
    fn mark(&self) -> u32 {
        0
    }
}

/// A bare length is a packet: handy for simulations and tests.
impl Packet for u32 {
    fn len_bytes(&self) -> u32 {
        *self
    }
}
