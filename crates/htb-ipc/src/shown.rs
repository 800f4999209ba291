//! What `show` answers: qdiscs, classes, filters and their statistics, as `tc … show` lists
//! them (the replies of [`RequestBody::Show`](crate::RequestBody::Show)).

use crate::{
    CakeStats, ClassId, ClassLabel, FilterHandle, FilterKind, FqCodelStats, InterfaceName,
    LeafConfig, LinkLayer, Match, PoliceConfig, PoliceStats, Protocol, Rate, SizeSpec,
};
use serde::{Deserialize, Serialize};

/// Listed state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Shown {
    /// `qdisc show`.
    #[serde(default)]
    pub qdiscs: Vec<QdiscInfo>,
    /// `class show`.
    #[serde(default)]
    pub classes: Vec<ClassInfo>,
    /// `filter show`.
    #[serde(default)]
    pub filters: Vec<FilterInfo>,
    /// `qdisc show`: the leaf qdiscs of HTB classes, after their HTB qdisc.
    #[serde(default)]
    pub leaf_qdiscs: Vec<LeafQdiscInfo>,
    /// `qdisc show` and `class show`: `mq` roots, with their classes (one per TX queue).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mq: Vec<MqInfo>,
    /// `qdisc show`: the interfaces with an ingress qdisc (`ffff:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<IngressInfo>,
    /// A paged show: where the next page starts, when more follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

/// tc's ingress qdisc of an interface (`qdisc ingress ffff: parent ffff:fff1`): it holds
/// filters only; their `mirred egress redirect dev ifbN` actions send what they match through
/// that IFB's tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngressInfo {
    /// Interface.
    pub dev: InterfaceName,
    /// What its filters took (redirected or dropped), when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<QueueStats>,
}

/// tc's `mq` at a port's root (`sch_mq.c`): one class per TX queue, each holding one HTB tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MqInfo {
    /// Interface.
    pub dev: InterfaceName,
    /// Its handle, `7fff:`.
    pub handle: ClassId,
    /// Its classes, by minor (`7fff:1` is TX queue 0): the HTB tree each holds, if any.
    pub classes: Vec<MqClassInfo>,
    /// The sum of its trees' counters (`mq_dump`), when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<QueueStats>,
}

/// One class of an `mq` root (`mq_dump_class`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MqClassInfo {
    /// `7fff:1`.
    pub id: ClassId,
    /// The handle of the HTB qdisc under it (`None`: none, the queue is unshaped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf: Option<ClassId>,
    /// That qdisc's counters, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<QueueStats>,
}

/// A leaf qdisc of an HTB class (`qdisc fq_codel 10: parent 1:10 …`), or a classless qdisc at
/// an interface's root (`qdisc cake 1: root …`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafQdiscInfo {
    /// Interface.
    pub dev: InterfaceName,
    /// Its handle (`10:`); `None` for a class's default leaf, which tc shows as `0:`.
    pub handle: Option<ClassId>,
    /// The class it serves; `None`: it is the interface's root qdisc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ClassId>,
    /// Parameters in effect.
    pub config: LeafConfig,
    /// Its size table, as the kernel keeps it (only at the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stab: Option<SizeSpec>,
    /// Counters, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<LeafQdiscStats>,
}

/// A leaf qdisc's counters, as `tc -s qdisc show` prints them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafQdiscStats {
    /// Bytes and packets sent, drops (full, over limit, AQM), overlimits (the times it held
    /// packets back: `cake`'s shaper, `tbf`'s buckets; 0 for the others), backlog.
    #[serde(flatten)]
    pub queue: QueueStats,
    /// `fq_codel`'s own counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fq_codel: Option<FqCodelStats>,
    /// `cake`'s own counters and tins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cake: Option<Box<CakeStats>>,
}

/// An HTB qdisc on an interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QdiscInfo {
    /// Interface.
    pub dev: InterfaceName,
    /// `1:`.
    pub handle: ClassId,
    /// The `mq` class it hangs under (`None`: the interface's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ClassId>,
    /// Default class minor (0: none).
    pub default_minor: u32,
    /// Rate-to-quantum divisor.
    pub r2q: u32,
    /// Direct queue limit in packets.
    pub direct_qlen: u32,
    /// Packets ever put in the direct queue (`direct_packets_stat`).
    pub direct_packets: u64,
    /// Its size table, as the kernel keeps it (`tc -d` prints it on a line of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stab: Option<SizeSpec>,
    /// Counters, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<QueueStats>,
}

/// Qdisc counters, as `tc -s qdisc show` prints them: the core's counter block (drops
/// include frames purged by changes and frames the pool ran out for; overlimits are its
/// classes' transitions into "can't send").
pub type QueueStats = htb_core::QueueCounters;

/// An HTB class, with the parameters in effect (defaults resolved).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassInfo {
    /// Interface.
    pub dev: InterfaceName,
    /// `1:20`.
    pub id: ClassId,
    /// Parent class, `None` for a root class.
    pub parent: Option<ClassId>,
    /// 0 for leaves.
    pub level: u8,
    /// Whether it is a leaf (no children).
    pub leaf: bool,
    /// Priority 0..7.
    pub prio: u8,
    /// DRR quantum in bytes.
    pub quantum: u32,
    /// Rate (bit/s on the wire, as it always was).
    pub rate: Rate,
    /// Ceil.
    pub ceil: Rate,
    /// Burst in bytes.
    pub burst: u64,
    /// Cburst in bytes.
    pub cburst: u64,
    /// Burst as time at rate, ns.
    pub buffer_ns: u64,
    /// Cburst as time at ceil, ns.
    pub cbuffer_ns: u64,
    /// Bytes added per packet.
    pub overhead: u16,
    /// Minimum packet unit.
    pub mpu: u16,
    /// `ethernet` or `atm`.
    pub linklayer: LinkLayer,
    /// The handle of its own leaf qdisc (tc's `leaf 10:`), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_qdisc: Option<ClassId>,
    /// Who it shapes ([`Command::ClassLabel`](crate::Command::ClassLabel)), if it has a label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<ClassLabel>,
    /// Counters, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<ClassStats>,
}

/// Class counters, as `tc -s class show` prints them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassStats {
    /// Bytes and packets sent, drops, overlimits (transitions into "can't send"), backlog:
    /// the core's counter block, its fields inline in the JSON.
    #[serde(flatten)]
    pub queue: QueueStats,
    /// `lended`.
    pub lended: u64,
    /// `borrowed`.
    pub borrowed: u64,
    /// Always 0.
    pub giants: u64,
    /// Rate bucket in 64 ns ticks.
    pub tokens: i32,
    /// Ceil bucket in 64 ns ticks.
    pub ctokens: i32,
    /// TCP round trips and retransmissions, where the port measures them (`rtt = true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt: Option<RttStats>,
}

/// A class's TCP round trips, measured passively (TCP timestamps, handshakes): percentiles of
/// the last samples, and counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RttStats {
    /// Median round trip in µs (`None`: no sample yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_us: Option<u32>,
    /// 95th percentile in µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_us: Option<u32>,
    /// Samples ever.
    pub samples: u64,
    /// TCP retransmissions seen in the class.
    pub retransmits: u64,
}

/// A filter as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterInfo {
    /// Interface.
    pub dev: InterfaceName,
    /// Always the qdisc handle, `1:`.
    pub parent: ClassId,
    /// `ip`, `ipv6`, `802.1q` or `all`.
    pub protocol: Protocol,
    /// Priority (tc's `pref`).
    pub prio: u32,
    /// `u32` or `flower`.
    pub kind: FilterKind,
    /// Its handle (tc prints it per kind: `800::800`, `0x1`).
    pub handle: FilterHandle,
    /// Target class; none for a u32 hash table or a link without a class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassId>,
    /// What it matches (the family is its `protocol`, not part of the match on the wire).
    pub matcher: Match,
    /// u32's hash-table parts.
    #[serde(default, skip_serializing_if = "U32Hashing::is_empty")]
    pub hashing: U32Hashing,
    /// Its policer: options, and counters when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub police: Option<PoliceInfo>,
    /// The IFB its `mirred egress redirect` sends what it matches to (ingress filters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<InterfaceName>,
}

/// A filter's policer as `filter show` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoliceInfo {
    /// Its options (`mtu` as in force: tc's default filled in).
    pub config: PoliceConfig,
    /// Its counters (with `-s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<PoliceStats>,
}

/// u32's `hashkey mask M at O`: the bits of the 32-bit word at byte `at` of the network
/// header that pick the bucket of a linked table (`(word & mask) >> lowest set bit of mask`,
/// modulo the divisor, as the kernel's `u32_hash_fold`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HashKey {
    /// The bits hashed.
    pub mask: u32,
    /// Byte offset of the word in the network header (a multiple of 4).
    pub at: u32,
}

/// A u32 filter's hash-table parts (`cls_u32.c`). Table ids are tc's 12-bit `htid`s (`2` for
/// `2:`), buckets 0..=255.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct U32Hashing {
    /// `divisor N`: this filter creates hash table `handle` with N buckets (a power of two,
    /// 1 to 256); it has no match and no class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divisor: Option<u32>,
    /// `ht X:Y:`: the table and bucket this filter goes in (default: its prio's root table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<(u32, u32)>,
    /// `link X:`: packets it matches go on to table X; when no filter there matches, its own
    /// class (if any) applies and the walk goes on after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<u32>,
    /// `hashkey`: which bucket of the linked table (default: bucket 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashkey: Option<HashKey>,
}

impl U32Hashing {
    /// Whether no hash-table part is given.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}
