//! Strategies for arbitrary valid commands of every variant, in the form the parser makes
//! them (canonical): where the grammar gives one value two spellings, or sets two fields with
//! one word, a command the parser would never produce has no words of its own, and is not
//! generated. Each such place says why.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use htb_core::{
    AckFilter, AtmMode, CakeSpec, ClassId, DiffservMode, Duration, FlowMode, FqCodelSpec, LeafKind,
    LeafSpec, LengthAdjust, LinkLayer, Rate, SfqSpec, SizeSpec, TbfSpec,
};
use htb_ipc::{
    ClassDelete, ClassLabel, ClassSpec, Command, ControlAction, Device, FilterDelete, FilterHandle,
    FilterKind, FilterSpec, HashKey, InterfaceName, IpPrefix, LabelFields, LabelSpec, LabelText,
    LeafQdiscSpec, MacAddr, Match, MqSpec, PoliceConfig, PortRange, Protocol, QdiscSpec,
    U32Hashing,
};
use proptest::prelude::*;
use proptest::sample::select;

mod class;
mod filter;
mod qdisc;

use class::class_command;
use filter::filter_command;
use qdisc::qdisc_command;

// ---- values ----

fn dev() -> impl Strategy<Value = InterfaceName> {
    // Plain names, and names that need quotes (a `"`, a leading `'`, a `#`): the kernel's
    // `dev_valid_name()` takes those, though not a space.
    prop_oneof![
        4 => "[a-z][a-z0-9]{0,7}",
        1 => "[a-z]{1,3}\"[a-z]{1,3}",
        1 => "'[a-z]{1,3}",
        1 => "[a-z]{1,3}#[a-z]{1,3}",
    ]
    .prop_map(|name| InterfaceName::new(name).expect("the patterns are valid names"))
}

fn class_id() -> impl Strategy<Value = ClassId> {
    (1u16..=0xffff, 1u32..=0xffff).prop_map(|(major, minor)| ClassId::new(major, minor))
}

/// A qdisc handle: tc's `get_qdisc_handle` reads a major only.
fn qdisc_handle() -> impl Strategy<Value = ClassId> {
    (1u16..=0xffff).prop_map(|major| ClassId::new(major, 0))
}

fn rate() -> impl Strategy<Value = Rate> {
    prop_oneof![
        (1u64..=100_000_000_000).prop_map(Rate::from_bits_per_sec),
        (1u64..=100_000).prop_map(Rate::from_mbit),
    ]
}

/// A time in whole nanoseconds, nonzero (the leaf kinds read 0 as "not given").
fn time() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (1u64..=10_000_000_000).prop_map(Duration::from_nanos),
        (1u64..=10_000).prop_map(|ms| Duration::from_nanos(ms * 1_000_000)),
    ]
}

fn nonzero() -> impl Strategy<Value = u32> {
    1u32..=u32::MAX
}

fn link_layer() -> impl Strategy<Value = LinkLayer> {
    select(vec![LinkLayer::Ethernet, LinkLayer::Atm])
}

fn prefix(v6: bool) -> impl Strategy<Value = IpPrefix> {
    (any::<u128>(), 0u8..=128).prop_map(move |(bits, len)| {
        let (addr, len) = if v6 {
            (IpAddr::V6(Ipv6Addr::from(bits)), len)
        } else {
            (IpAddr::V4(Ipv4Addr::from(bits as u32)), len % 33)
        };
        IpPrefix::new(addr, len).expect("the length fits the family")
    })
}

/// A size table the kernel takes: one of overhead, mpu and linklayer at least (tc refuses a
/// table that changes nothing), 0 meaning "not given" as `tc_stab.c` reads it.
fn stab() -> BoxedStrategy<SizeSpec> {
    (
        -100i32..=100,
        0u32..=200,
        select(vec![0u32, 2047]),
        select(vec![0u32, 512]),
        proptest::option::of(link_layer()),
    )
        .prop_map(|(overhead, mpu, mtu, tsize, link_layer)| SizeSpec {
            overhead,
            mpu,
            mtu,
            tsize,
            link_layer,
        })
        .prop_filter("a table that adjusts something", |s| {
            (s.overhead != 0 || s.mpu != 0 || s.link_layer.is_some()) && s.table().is_ok()
        })
        .boxed()
}

pub(crate) fn command() -> impl Strategy<Value = Command> {
    prop_oneof![qdisc_command(), class_command(), filter_command()]
}
