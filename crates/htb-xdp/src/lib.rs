//! # htb-xdp: the AF_XDP packet engine of htbd
//!
//! A C XDP program (built by `build.rs` with clang, loaded with aya) sends the frames htbd must
//! handle to AF_XDP sockets (xsk-rs) sharing one UMEM, and lets everything else through to the
//! kernel. The data plane (`dataplane`) classifies each frame with its egress port's filters,
//! queues it in that port's `htb-core` scheduler — the frame stays in the UMEM; the scheduler
//! holds it as a [`Chunk`] — and sends what the scheduler releases. It is sans-IO: it moves
//! frames through rings behind a trait (`rings::Rings`) at the `now` it is given. The [`Engine`]
//! runs it on the AF_XDP sockets and a clock (and `links` watches the ports); the tests run it on
//! a simulated UMEM.
//!
//! `unsafe` is confined to `sys` (system calls and glibc's `malloc_trim`) and `umem` (the ring operations); both
//! document why each block is sound.

#![deny(unsafe_code)]
// Where `sys` and `umem` allow it: every unsafe operation in its own block with its own SAFETY
// comment, also inside an `unsafe fn`.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod assign;
mod crew;
mod dataplane;
mod engine;
mod error;
pub mod explain;
mod fleet;
pub mod flow_table;
mod frame;
mod frame_pool;
pub mod heap;
mod io_config;
mod links;
mod merge;
mod netdev;
pub mod parse;
mod plane_op;
mod program;
mod rings;
pub mod rtt;
mod split;
mod stall_watch;
mod stats;
mod sys;
mod tree_view;
mod umem;
mod worker;

pub use crew::HandoffCounts;
pub use dataplane::{Mode, Progress};
pub use engine::{
    Engine, EngineConfig, EngineHandle, FLOW_EXPORT_RING, JOB_QUEUE, Job, JobError, PortConfig,
    WITNESS_EVERY,
};
pub use error::{ConfigError, PlaneError, XdpError};
pub use frame::{FlowHasher, Frame};
pub use io_config::{IoConfig, MAX_CHAIN};
pub use netdev::{NetDev, format_mac, tx_queue_count};
pub use plane_op::{
    Change, Compiled, IngressHook, PlaneChange, PlaneOp, Retired, Stage, Uncompiled, new_scheduler,
};
pub use program::{AttachMode, Verdicts};
pub use rings::{Chunk, FrameCounts};
pub use stats::{
    EngineStats, JobSpan, JobTimes, PortSnapshot, PortStats, SLOWEST_JOBS, WorkerStats, XdpCounters,
};
pub use umem::{TxFrame, TxFrameError, TxSocket};
