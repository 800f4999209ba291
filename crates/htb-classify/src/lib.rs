//! Which class a packet goes to: tc's filters, as the operator wrote them (tried by `prio`,
//! lowest first, then in the order given; the first whose every key matches wins), compiled
//! into a structure whose per-packet cost does not grow with the number of filters of one kind.
//!
//! - [`PacketInfo`]: what a filter can see in a packet (the engine's parser fills it in).
//! - [`Match`]: the keys of one filter (prefixes, protocol, ports, DSCP, VLAN) and
//!   [`Match::intersect`], which flattens tc's u32 hash-table links into plain filters.
//! - [`RawKeys`]: u32's general keys (a word at an offset, masked), for what the fields do not
//!   express.
//! - [`Police`]: `action police`, a token bucket shared by the workers classifying with a
//!   filter (lock-free), whose verdict can drop a packet or pass it to the next filter.
//! - [`Classifier`]: the compiled filter list (tuple space search: one hash table per
//!   *shape* of filter, a short ordered list for port ranges and general keys); see its docs
//!   for the costs.
//!
//! `no_std` + `alloc`, no I/O: the engine, the simulator and the benchmarks share it.

#![no_std]

extern crate alloc;

mod classifier;
mod filter_list;
mod matcher;
mod packet;
mod parse_error;
mod police;
mod raw_key;
mod u32_handle;
#[cfg(feature = "serde")]
mod wire;

pub use classifier::{Classifier, Filter, Verdict};
pub use matcher::{IpPrefix, Match, MatchError, PortRange, Words};
pub use packet::{Family, PacketInfo};
pub use parse_error::ParseError;
pub use police::{ControlAction, Police, PoliceConfig, PoliceError, PoliceStats, Policer};
pub use raw_key::{Headers, MAX_RAW_KEYS, RawKey, RawKeys};
pub use u32_handle::{U32Handle, U32HandleError};
