//! # htb-xdp: the AF_XDP packet engine of htbd
//!
//! A C XDP program (built by `build.rs` with clang, loaded with aya) sends the frames htbd must
//! handle to AF_XDP sockets (xsk-rs) sharing one UMEM, and lets everything else through to the
//! kernel. The [`Engine`] classifies each frame with its egress port's filters, queues it in
//! that port's `htb-core` scheduler — the frame stays in the UMEM; the scheduler holds its
//! descriptor — and sends what the scheduler releases.
//!
//! `unsafe` is confined to `sys` (three system calls) and `umem` (the ring operations); both
//! document why each block is sound.

#![deny(unsafe_code)]

mod engine;
mod error;
mod frame;
mod netdev;
pub mod parse;
mod program;
mod sys;
mod umem;

pub use engine::{
    Engine, EngineConfig, EngineHandle, EngineStats, JOB_QUEUE, Job, JobError, Mode, PlaneOp,
    PortConfig, PortSnapshot, PortStats, Progress, XdpCounters, new_scheduler,
};
pub use error::XdpError;
pub use frame::{FlowHasher, Frame};
pub use netdev::{NetDev, format_mac};
pub use program::{AttachMode, Verdicts};
pub use umem::{FrameCounts, IoConfig, TxGenerator};
