//! # htb-ipc: the control socket's wire
//!
//! `htb-cli` talks to `htbd` over a Unix stream socket (`[daemon] socket`, default
//! [`DEFAULT_SOCKET`]). Each message is a **frame**: a 4-byte big-endian length, then that many
//! bytes of JSON. A client sends a [`Request`]; the daemon answers each with one [`Response`],
//! in order. Both carry [`PROTOCOL_VERSION`]; a daemon refuses other versions with
//! [`ErrorCode::Version`]. Frames above [`MAX_MESSAGE_BYTES`] are refused with
//! [`ErrorCode::TooLarge`] and the connection is closed.
//!
//! Requests are typed commands, already parsed from tc's grammar by the client: the daemon
//! never parses command lines. Errors travel as data: a [`ErrorCode`] and a message (plus, in
//! a batch, the index of the command that failed).
//!
//! ```
//! use htb_ipc::{Request, RequestBody, Response, read_frame, write_frame};
//! let mut wire = Vec::new();
//! write_frame(&mut wire, &Request::new(RequestBody::Ping {})).unwrap();
//! let back: Request = read_frame(&mut wire.as_slice()).unwrap();
//! assert!(matches!(back.request, RequestBody::Ping {}));
//! ```

use std::io::{self, Read, Write};

mod explain;
mod filter_handle;
mod filter_kind;
mod flows;
mod generation;
mod protocol;
mod status;
mod tagged;

pub use explain::{Direction, Explain, Explanation, Outcome, PortExplanation};
pub use filter_handle::{FilterHandle, FilterHandleError};
pub use filter_kind::{FilterKind, UnknownFilterKind};
pub use flows::{FlowEntry, FlowList, FlowStatus, FlowsQuery};
pub use generation::{BadGeneration, Generation};
/// A filter's match is the classifier's own, checked as it is read (`htb_classify`'s wire
/// form: the JSON older versions sent, refused field by field when the classifier cannot hold
/// it), so that htbd never validates one after the fact.
pub use htb_classify::{
    ControlAction, IpPrefix, Match, MatchError, PoliceConfig, PoliceStats, PortRange, RawKey,
    U32Handle, U32HandleError,
};
pub use htb_config::label::{ClassLabel, Device, LabelError, LabelFields, LabelText, MacAddr};
/// Rates are the core's type, a number of bit/s on the wire.
pub use htb_core::{
    CakeStats, ClassId, FqCodelStats, LeafConfig, LeafKind, LeafSpec, LinkLayer, Rate, SizeSpec,
    Warning,
};
pub use protocol::{Protocol, UnknownProtocol};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
pub use status::{FrameStatus, JobSpan, PortStatus, Status, WorkerStatus, XdpVerdicts};
pub use tagged::deserialize_commands;

/// Version of this protocol; bumped on any incompatible change.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest frame either side accepts (64 MiB: a batch of ~200 000 class commands).
pub const MAX_MESSAGE_BYTES: u32 = 64 << 20;

/// Where the daemon listens unless configured otherwise.
pub const DEFAULT_SOCKET: &str = "/run/htbd/htbd.sock";

/// Environment variable naming the socket for `htb-cli`.
pub const SOCKET_ENV: &str = "HTBD_SOCKET";

/// A client's message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub version: u32,
    /// What is asked (a batch's commands read without serde's buffering: `tagged`).
    #[serde(deserialize_with = "tagged::request_body")]
    pub request: RequestBody,
}

impl Request {
    /// A request at this crate's protocol version.
    #[must_use]
    pub fn new(request: RequestBody) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            request,
        }
    }
}

/// What a client asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[serde(deny_unknown_fields)]
pub enum RequestBody {
    /// Is the daemon there? Answered with [`ReplyBody::Pong`]. (A struct variant, so that
    /// unknown fields are refused as in the others.)
    Ping {},
    /// Read state: answered with [`ReplyBody::Shown`].
    Show(Show),
    /// Apply commands **atomically**: all of them or none. Answered with
    /// [`ReplyBody::Applied`], once they are live in the data plane and persisted.
    Apply {
        /// In order.
        commands: Vec<Command>,
    },
    /// The data plane's counters: answered with [`ReplyBody::Status`].
    Status {},
    /// Hold these commands for this connection's next [`RequestBody::Apply`], which applies
    /// them first, all in one atomic batch with its own: a batch larger than one message
    /// (a million subscribers' classes and filters) arrives in several. Answered with
    /// [`ReplyBody::Staged`]; dropped if the connection closes first. Error indexes of the
    /// batch count the staged commands first, in order.
    Stage {
        /// In order, after those staged before.
        commands: Vec<Command>,
    },
    /// Which filter and class packets to and from an address take: answered with
    /// [`ReplyBody::Explained`].
    Explain(Explain),
    /// The flow records kept now: answered with [`ReplyBody::Flows`].
    Flows(FlowsQuery),
}

/// What `show` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Object {
    /// `qdisc show`.
    Qdisc,
    /// `class show`.
    Class,
    /// `filter show`.
    Filter,
}

/// A `parent` as tc takes it: `root`, or a class id or qdisc handle (`1:1`, `1:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Parent {
    /// `root`.
    Root,
    /// A class (`1:1`) or a qdisc (`1:`).
    Id(ClassId),
}

impl Parent {
    /// The class or qdisc named; `None` for `root`.
    #[must_use]
    pub fn id(self) -> Option<ClassId> {
        match self {
            Self::Root => None,
            Self::Id(id) => Some(id),
        }
    }
}

impl std::fmt::Display for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Root => f.write_str("root"),
            Self::Id(id) => id.fmt(f),
        }
    }
}

/// As tc writes it, `"root"` or `"1:1"`: the text this field has always carried.
impl Serialize for Parent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Parent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(parent_or_root(d)?.map_or(Self::Root, Self::Id))
    }
}

/// A `show` request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Show {
    /// What to list (`None` in [`Default`] only; the daemon requires it).
    pub object: Option<Object>,
    /// Only this interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// Only this class (`classid 1:20`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassId>,
    /// `class show`: only children of this class (`parent 1:1`), or the root classes (`parent
    /// root`, or the qdisc's handle `1:`); `filter show`: only this qdisc's filters (`1:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Parent>,
    /// `filter get`: only the filter at this prio …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prio: Option<u32>,
    /// … with this handle; none found is an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<FilterHandle>,
    /// Include statistics.
    #[serde(default)]
    pub stats: bool,
    /// `qdisc show invisible`: also the leaf qdiscs classes have by default (the kernel hides
    /// its default pfifo leaves the same way).
    #[serde(default)]
    pub invisible: bool,
    /// `class show` and `filter show`: only this window of the list (`None`: all of it, which
    /// a large tree's `-s` show can push past [`MAX_MESSAGE_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<Page>,
}

/// A window of a long `class show` or `filter show`: at most `limit` classes or filters from
/// position `from` of the whole list (over every interface the show covers, in the order an
/// unpaged show lists them). `mq`'s classes come with the first page only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Page {
    /// Position of the first item.
    pub from: u64,
    /// Items at most (at least 1).
    pub limit: u32,
}

/// The daemon's message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// [`PROTOCOL_VERSION`] of the daemon.
    pub version: u32,
    /// The answer (a page of `show` read without serde's buffering: `tagged`).
    #[serde(deserialize_with = "tagged::reply_result")]
    pub result: Result<ReplyBody, IpcError>,
}

impl Response {
    /// A response at this crate's protocol version.
    #[must_use]
    pub fn new(result: Result<ReplyBody, IpcError>) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            result,
        }
    }
}

/// A successful answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReplyBody {
    /// To [`RequestBody::Ping`].
    Pong {
        /// The daemon's version.
        daemon: String,
        /// Its process id.
        pid: u32,
    },
    /// To [`RequestBody::Show`].
    Shown(Shown),
    /// To [`RequestBody::Apply`]: one result per command.
    Applied {
        /// In command order.
        results: Vec<CommandResult>,
    },
    /// To [`RequestBody::Status`].
    Status(Status),
    /// To [`RequestBody::Explain`].
    Explained(Explanation),
    /// To [`RequestBody::Flows`].
    Flows(FlowList),
    /// To [`RequestBody::Stage`].
    Staged {
        /// Commands staged on this connection so far.
        commands: u64,
    },
}

/// What a command did besides succeeding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    /// Warnings about accepted parameters (quantum clamped, ceil below rate, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    /// Packets the command dropped from queues (a deleted class's backlog, a leaf that became
    /// an inner class, a deleted qdisc).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_packets: u64,
}

/// A result without warnings nor drops is `{}`: 2 000 000 of them fit a message.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

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
    pub dev: String,
    /// What its filters took (redirected or dropped), when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<QueueStats>,
}

/// tc's `mq` at a port's root (`sch_mq.c`): one class per TX queue, each holding one HTB tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MqInfo {
    /// Interface.
    pub dev: String,
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
    pub dev: String,
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
    /// Bytes and packets sent, drops (full, over limit, AQM), overlimits (the times its shaper
    /// held packets back: `cake`; 0 for the others), backlog.
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
    pub dev: String,
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
    pub dev: String,
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
    /// Who it shapes ([`Command::ClassLabel`]), if it has a label.
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
    pub dev: String,
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
    pub redirect: Option<String>,
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

/// A change, as one line of tc's grammar says it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
#[serde(deny_unknown_fields)]
pub enum Command {
    /// `qdisc add … htb`: fails if the interface (or the `mq` class) has one.
    QdiscAdd(QdiscSpec),
    /// `qdisc change … htb`: new `default`, `r2q`, `direct_qlen`; classes stay.
    QdiscChange(QdiscSpec),
    /// `qdisc replace … htb`: add, or change in place (a different handle replaces the whole
    /// tree).
    QdiscReplace(QdiscSpec),
    /// `qdisc add dev D root [handle H:] mq`: fails if the interface has a root qdisc.
    MqAdd(MqSpec),
    /// `qdisc replace dev D root [handle H:] mq`: the root becomes an `mq` (the trees of
    /// another root go; the same `mq` stays as it is).
    MqReplace(MqSpec),
    /// `qdisc del dev D root`: the root qdisc (`htb`, or `mq` with its trees), its classes and
    /// filters go; the interface forwards unshaped.
    QdiscDelete {
        /// Interface.
        dev: String,
    },
    /// `qdisc add dev D handle ffff: ingress`: an ingress qdisc, for filters whose `mirred
    /// egress redirect dev ifbN` shapes what the interface receives in an IFB's tree.
    IngressAdd {
        /// Interface.
        dev: String,
    },
    /// `qdisc del dev D ingress` (or `handle ffff:`, `parent ffff:fff1`): the ingress qdisc
    /// and its filters go.
    IngressDelete {
        /// Interface.
        dev: String,
    },
    /// `class add`.
    ClassAdd(ClassSpec),
    /// `class change`: every parameter is replaced (those not given return to defaults).
    ClassChange(ClassSpec),
    /// `class replace`: add or change.
    ClassReplace(ClassSpec),
    /// `class del`.
    ClassDelete(ClassDelete),
    /// `filter add`.
    FilterAdd(FilterSpec),
    /// `filter change … pref P handle H …`: the filter at that prio and handle gets the new
    /// match and class (it must exist).
    FilterChange(FilterSpec),
    /// `filter replace`: as `change` when the prio and handle name a filter, else `add`.
    FilterReplace(FilterSpec),
    /// `qdisc add … parent CLASS [handle H:] KIND …`: a leaf qdisc for a leaf class; or
    /// `qdisc add … root [handle H:] KIND …`: a classless qdisc at the root.
    LeafAdd(LeafQdiscSpec),
    /// `qdisc change … parent CLASS|root [handle H:] KIND …`: the qdisc's options (kinds
    /// must match).
    LeafChange(LeafQdiscSpec),
    /// `qdisc replace … parent CLASS|root [handle H:] KIND …`: add, change in place (same kind
    /// and handle), or a new qdisc in its place.
    LeafReplace(LeafQdiscSpec),
    /// `qdisc del … parent CLASS [handle H:] [KIND]`: an HTB class's leaf qdisc goes (back to
    /// the default leaf), or, under an `mq` class, its HTB tree (the queue is unshaped).
    LeafDelete {
        /// Interface.
        dev: String,
        /// The class.
        parent: ClassId,
        /// Must be the leaf's handle, if given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        handle: Option<ClassId>,
        /// Must be the leaf's kind, if given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<LeafKind>,
    },
    /// `filter del`: one filter (`handle`), all at a priority (`prio`), or all.
    FilterDelete(FilterDelete),
    /// `class label dev D classid C [name N] [circuit ID] …` (htbd's, not tc's): who the
    /// class shapes, or no label when `label` is `None`. It changes nothing the data plane
    /// does; the label goes with the class when it is deleted.
    ClassLabel(LabelSpec),
}

impl Command {
    /// The interface it acts on.
    #[must_use]
    pub fn dev(&self) -> &str {
        match self {
            Self::QdiscAdd(q) | Self::QdiscChange(q) | Self::QdiscReplace(q) => &q.dev,
            Self::MqAdd(m) | Self::MqReplace(m) => &m.dev,
            Self::QdiscDelete { dev } | Self::IngressAdd { dev } | Self::IngressDelete { dev } => {
                dev
            }
            Self::ClassDelete(c) => &c.dev,
            Self::ClassLabel(l) => &l.dev,
            Self::FilterDelete(f) => &f.dev,
            Self::LeafDelete { dev, .. } => dev,
            Self::LeafAdd(l) | Self::LeafChange(l) | Self::LeafReplace(l) => &l.dev,
            Self::ClassAdd(c) | Self::ClassChange(c) | Self::ClassReplace(c) => &c.dev,
            Self::FilterAdd(f) | Self::FilterChange(f) | Self::FilterReplace(f) => &f.dev,
        }
    }
}

/// `class del dev D classid C`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassDelete {
    /// Interface.
    pub dev: String,
    /// `1:20` (`:20`: of the interface's qdisc).
    pub id: ClassId,
}

/// `class label dev D classid C [name N] [circuit ID] [comment T] [device ID [name N] [mac M]
/// [address A]…]…`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelSpec {
    /// Interface.
    pub dev: String,
    /// The class (`:20`: of the interface's qdisc).
    pub id: ClassId,
    /// Its label; `None` takes it away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<ClassLabel>,
}

/// `filter del dev D [parent 1:] [prio P [handle H KIND]]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterDelete {
    /// Interface.
    pub dev: String,
    /// The qdisc whose filters (`1:`; `None`: the interface's only HTB qdisc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ClassId>,
    /// Only at this priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prio: Option<u32>,
    /// Only this handle (needs `prio`, as in tc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<FilterHandle>,
}

/// `qdisc … dev D root handle 1: htb default 20 r2q 10 direct_qlen 1000`, or
/// `… parent 7fff:1 handle 1: htb …` under a class of an `mq` root.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QdiscSpec {
    /// Interface.
    pub dev: String,
    /// The `mq` class it goes under (`None`: the interface's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ClassId>,
    /// `1:` (default `1:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<ClassId>,
    /// Default class minor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_minor: Option<u32>,
    /// Rate-to-quantum divisor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r2q: Option<u32>,
    /// Direct queue limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct_qlen: Option<u32>,
    /// `stab …`: the size table. As in the kernel, a `change` without one removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stab: Option<SizeSpec>,
}

/// `qdisc add|replace dev D root [handle 7fff:] mq` (`sch_mq.c`: one class per TX queue).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqSpec {
    /// Interface.
    pub dev: String,
    /// Its handle (default `8001:`, the first the kernel allocates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<ClassId>,
}

/// A class's parent as the wire has carried it: a class id or qdisc handle, or `"root"`.
fn parent_or_root<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<ClassId>, D::Error> {
    let text = String::deserialize(d)?;
    if text == "root" {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format_args!("parent {text:?}: {e}")))
}

/// `class … dev D parent P classid C htb rate R …`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    /// Interface.
    pub dev: String,
    /// `1:20` (`:20`: the minor of the parent's qdisc, as tc completes it).
    pub id: ClassId,
    /// Parent class or qdisc handle (`1:`); `None` = root (also read from `"root"`, which
    /// journals of older versions may hold).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "parent_or_root"
    )]
    pub parent: Option<ClassId>,
    /// Rate (required; bit/s on the wire, as it always was).
    pub rate: Rate,
    /// Ceil.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceil: Option<Rate>,
    /// Burst in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// Cburst in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cburst: Option<u64>,
    /// Priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prio: Option<u32>,
    /// Quantum in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantum: Option<u32>,
    /// MTU for default bursts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Bytes added per packet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<u16>,
    /// Minimum packet unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpu: Option<u16>,
    /// `ethernet` or `atm` (`adsl` reads as `atm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linklayer: Option<LinkLayer>,
}

/// `qdisc add|change|replace dev D parent 1:10|root [handle 10:] KIND OPTIONS`: typed on the
/// wire (the class and handle as ids, the options as the core's spec).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeafQdiscSpec {
    /// Interface.
    pub dev: String,
    /// The leaf class it serves; `None`: the interface's root (a classless qdisc there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ClassId>,
    /// The qdisc's handle (`10:`); assigned when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<ClassId>,
    /// Kind and the options given.
    pub leaf: LeafSpec,
    /// `stab …` (only at the root, where it sets the length the qdisc counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stab: Option<SizeSpec>,
}

/// `filter add dev D parent 1: protocol ip prio 1 u32|flower … classid X`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSpec {
    /// Interface.
    pub dev: String,
    /// The qdisc handle (`1:`); filters hang on the qdisc only. `None`: the interface's only
    /// HTB qdisc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ClassId>,
    /// `ip`, `ipv6`, `802.1q`, `arp`, `all`.
    pub protocol: Protocol,
    /// Priority; `None`: below every existing one, as the kernel picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prio: Option<u32>,
    /// `u32` or `flower`.
    pub kind: FilterKind,
    /// Explicit handle; `None`: assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<FilterHandle>,
    /// What to match (restricted to `protocol`'s family by htbd).
    pub matcher: Match,
    /// Target class (`flowid`/`classid`; `:20` is of the filter's qdisc); none for a u32 hash
    /// table, a link without a class, an empty u32 filter (which only makes its prio exist, as
    /// tc's), or an ingress filter whose action needs none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassId>,
    /// u32's hash-table parts.
    #[serde(default, skip_serializing_if = "U32Hashing::is_empty")]
    pub hashing: U32Hashing,
    /// `action police …` (or u32's `police …`); boxed, as most filters have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub police: Option<Box<PoliceConfig>>,
    /// `action mirred egress redirect dev IFB`: a filter of an ingress qdisc sends what it
    /// matches through that IFB's tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<String>,
}

/// An error, as data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct IpcError {
    /// What kind.
    pub code: ErrorCode,
    /// For people.
    pub message: String,
    /// In an `Apply`, the index of the command that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<usize>,
}

impl IpcError {
    /// An error not tied to a command.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            command: None,
        }
    }
}

/// Error kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// Malformed frame or JSON, or a request the daemon cannot make sense of.
    BadRequest,
    /// Protocol versions differ.
    Version,
    /// The frame is larger than [`MAX_MESSAGE_BYTES`].
    TooLarge,
    /// The peer is not allowed to use the socket.
    PermissionDenied,
    /// Too many clients or requests at once; try again.
    Busy,
    /// No such interface (or htbd does not forward on it).
    NoDevice,
    /// The object exists already.
    Exists,
    /// No such object.
    NotFound,
    /// The object is in use (a class with children or filters).
    InUse,
    /// Invalid parameters.
    Invalid,
    /// The change could not be persisted; nothing was changed.
    Persist,
    /// The daemon is stopping.
    ShuttingDown,
    /// A bug.
    Internal,
    /// A code from a newer daemon.
    #[serde(other)]
    Unknown,
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The peer closed the connection cleanly between frames.
    #[error("connection closed")]
    Closed,
    /// The announced length is above the limit.
    #[error("message of {0} bytes is larger than the {MAX_MESSAGE_BYTES}-byte limit")]
    TooLarge(u32),
    /// The body is not the expected JSON.
    #[error("malformed message: {0}")]
    Json(#[from] serde_json::Error),
    /// The socket failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Encodes `message` as one frame.
///
/// # Errors
/// [`FrameError::TooLarge`] if it exceeds [`MAX_MESSAGE_BYTES`].
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let body = serde_json::to_vec(message)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&n| n <= MAX_MESSAGE_BYTES)
        .ok_or(FrameError::TooLarge(u32::MAX))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Checks a frame header: the body length it announces.
///
/// # Errors
/// [`FrameError::TooLarge`].
pub fn body_len(header: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header);
    if len > MAX_MESSAGE_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    Ok(len as usize)
}

/// Writes `message` as one frame.
///
/// # Errors
/// Encoding or I/O errors.
pub fn write_frame<T: Serialize>(w: &mut impl Write, message: &T) -> Result<(), FrameError> {
    w.write_all(&encode(message)?)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame and decodes it.
///
/// # Errors
/// [`FrameError::Closed`] at a clean end of stream, else the problem.
pub fn read_frame<T: DeserializeOwned>(r: &mut impl Read) -> Result<T, FrameError> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut body = vec![0u8; body_len(header)?];
    r.read_exact(&mut body)?;
    Ok(serde_json::from_slice(&body)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field the daemon does not know is an error, not silently ignored: at the top, in a
    /// command, in a filter's match and in a leaf's options.
    #[test]
    fn unknown_fields_are_refused() {
        let ok = r#"{"version":1,"request":{"type":"apply","commands":[
            {"op":"class_delete","dev":"r2","id":"1:10"},
            {"op":"leaf_add","dev":"r2","parent":"1:10","leaf":{"kind":"sfq","perturb":10}}]}}"#;
        assert!(serde_json::from_str::<Request>(ok).is_ok());
        for bad in [
            r#"{"version":1,"request":{"type":"ping"},"extra":1}"#,
            r#"{"version":1,"request":{"type":"ping","extra":1}}"#,
            r#"{"version":1,"request":{"type":"apply","commands":[{"op":"class_delete","dev":"r2","id":"1:10","rate":1}]}}"#,
            r#"{"version":1,"request":{"type":"apply","commands":[{"op":"leaf_add","dev":"r2","parent":"1:10","leaf":{"kind":"sfq","perturbb":10}}]}}"#,
            r#"{"version":1,"request":{"type":"show","object":"class","stat":true}}"#,
        ] {
            let e = serde_json::from_str::<Request>(bad).unwrap_err();
            assert!(e.to_string().contains("unknown field"), "{bad}: {e}");
        }
    }

    /// A batch's commands read without serde's buffering (`tagged`) come out as the derived
    /// reader reads them, whatever the order of the keys, and are refused where it refuses.
    #[test]
    fn batches_read_fast_as_the_derived_reader_reads_them() {
        let commands = [
            r#"{"op":"class_add","dev":"r2","id":"1:20","parent":"1:1","rate":10000000,"ceil":100000000}"#,
            r#"{"op":"class_change","dev":"r2","id":":20","rate":5000000,"linklayer":"adsl"}"#,
            r#"{"op":"class_replace","dev":"r2","id":"1:20","parent":"root","rate":1}"#,
            r#"{"op":"class_delete","dev":"r2","id":"1:20"}"#,
            r#"{"op":"filter_add","dev":"r2","parent":"1:","protocol":"ip","prio":1,"kind":"u32","handle":"800::801","matcher":{"dst":"10.0.0.1"},"class":"1:20"}"#,
            r#"{"op":"filter_change","dev":"r2","protocol":"ip","prio":3,"kind":"flower","handle":"3","matcher":{},"class":"1:20"}"#,
            r#"{"op":"filter_replace","dev":"r2","protocol":"all","prio":5,"kind":"u32","handle":"2:","matcher":{},"hashing":{"divisor":256}}"#,
            r#"{"op":"filter_delete","dev":"r2","prio":1,"handle":"800::801"}"#,
            r#"{"op":"filter_delete","dev":"r2"}"#,
            r#"{"op":"qdisc_add","dev":"r2","handle":"1:","default_minor":32}"#,
            r#"{"op":"leaf_add","dev":"r2","parent":"1:10","leaf":{"kind":"sfq","perturb":10}}"#,
            r#"{"dev":"r2","op":"class_delete","id":"1:20"}"#,
            r#"{"dev":"r2","op":"qdisc_delete"}"#,
        ];
        let list = format!("[{}]", commands.join(","));
        let derived: Vec<Command> = serde_json::from_str(&list).unwrap();
        for kind in ["apply", "stage"] {
            let request =
                format!(r#"{{"version":1,"request":{{"type":"{kind}","commands":{list}}}}}"#);
            let fast: Request = serde_json::from_str(&request).unwrap();
            let (RequestBody::Apply { commands } | RequestBody::Stage { commands }) = fast.request
            else {
                panic!("{kind}: {:?}", fast.request)
            };
            assert_eq!(commands, derived, "{kind}");
        }
        // The type after the commands, and the other requests: the derived reader.
        let late: Request = serde_json::from_str(&format!(
            r#"{{"version":1,"request":{{"commands":{list},"type":"apply"}}}}"#
        ))
        .unwrap();
        assert!(matches!(late.request, RequestBody::Apply { commands } if commands.len() == 13));
        let ping: Request =
            serde_json::from_str(r#"{"version":1,"request":{"type":"ping"}}"#).unwrap();
        assert_eq!(ping.request, RequestBody::Ping {});
        // Refused as the derived reader refuses.
        for bad in [
            r#"{"type":"stage","commands":[],"extra":1}"#,
            r#"{"type":"stage"}"#,
            r#"{"type":"apply","commands":[],"commands":[]}"#,
            r#"{"type":"apply","commands":[{"op":"class_delete","dev":"r2","id":"1:20","rate":1}]}"#,
            r#"{"type":"apply","commands":[{"op":"filter_add","dev":"r2","protocol":"ip","kind":"u32","matcher":{},"flowid":"1:1"}]}"#,
            r#"{"type":"apply","commands":[{"op":"class_remove","dev":"r2","id":"1:20"}]}"#,
            r#"{"type":"apply","commands":[{"op":"class_add","dev":"r2","id":"1:x","rate":1}]}"#,
            r#"{"type":"apply","commands":[{"dev":"r2","id":"1:20"}]}"#,
        ] {
            let text = format!(r#"{{"version":1,"request":{bad}}}"#);
            assert!(serde_json::from_str::<Request>(&text).is_err(), "{bad}");
        }
    }

    /// Answers read without buffering (`tagged`) come out as they were written, and as the
    /// derived reader reads them.
    #[test]
    fn answers_read_fast_as_written() {
        let class = r#"{"dev":"r2","id":"1:20","parent":"1:1","level":0,"leaf":true,"prio":0,"quantum":1500,"rate":1000000,"ceil":2000000,"burst":1600,"cburst":1600,"buffer_ns":1,"cbuffer_ns":1,"overhead":0,"mpu":0,"linklayer":"ethernet","stats":{"bytes":3000,"packets":2,"drops":1,"overlimits":4,"requeues":0,"backlog_bytes":1500,"backlog_packets":1,"lended":5,"borrowed":6,"giants":0,"tokens":-7,"ctokens":8}}"#;
        let texts = [
            format!(
                r#"{{"version":1,"result":{{"Ok":{{"type":"shown","classes":[{class},{class}],"next":40000}}}}}}"#
            ),
            r#"{"version":1,"result":{"Ok":{"type":"applied","results":[{},{"dropped_packets":3},{}]}}}"#.to_owned(),
            r#"{"version":1,"result":{"Ok":{"type":"pong","daemon":"0.1.0","pid":7}}}"#.to_owned(),
            r#"{"version":1,"result":{"Ok":{"type":"staged","commands":12}}}"#.to_owned(),
            r#"{"version":1,"result":{"Err":{"code":"invalid","message":"no","command":3}}}"#
                .to_owned(),
        ];
        for text in &texts {
            let response: Response =
                serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let again = serde_json::to_string(&response).unwrap();
            assert_eq!(serde_json::from_str::<Response>(&again).unwrap(), response);
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            let derived: Result<ReplyBody, IpcError> =
                serde_json::from_value(value["result"].clone()).unwrap();
            assert_eq!(response.result, derived, "{text}");
        }
        let Ok(ReplyBody::Shown(shown)) =
            serde_json::from_str::<Response>(&texts[0]).unwrap().result
        else {
            panic!("not shown")
        };
        assert_eq!((shown.classes.len(), shown.next), (2, Some(40000)));
        assert_eq!(shown.classes[1].stats.unwrap().borrowed, 6);
        // The type last, an unknown answer field, and a malformed result.
        let late: Response = serde_json::from_str(
            r#"{"version":1,"result":{"Ok":{"results":[{}],"type":"applied","later":1}}}"#,
        )
        .unwrap();
        assert_eq!(
            late.result,
            Ok(ReplyBody::Applied {
                results: vec![CommandResult::default()]
            })
        );
        for bad in [
            r#"{"version":1,"result":{"Maybe":{}}}"#,
            r#"{"version":1,"result":{"Ok":{"type":"applied"}}}"#,
            r#"{"version":1,"result":{"Ok":{"type":"shown","classes":[{"dev":"r2"}]}}}"#,
        ] {
            assert!(serde_json::from_str::<Response>(bad).is_err(), "{bad}");
        }
    }

    /// The counters are the core's block, inline: a reply reads and writes as before it was
    /// shared (every field at the top of `stats`).
    #[test]
    fn counter_blocks_keep_their_json() {
        let text = r#"{"bytes":3000,"packets":2,"drops":1,"overlimits":4,"requeues":0,"backlog_bytes":1500,"backlog_packets":1,"lended":5,"borrowed":6,"giants":0,"tokens":-7,"ctokens":8}"#;
        let class: ClassStats = serde_json::from_str(text).unwrap();
        assert_eq!(
            (
                class.queue.bytes,
                class.queue.backlog_packets,
                class.borrowed,
                class.tokens
            ),
            (3000, 1, 6, -7)
        );
        assert_eq!(serde_json::to_string(&class).unwrap(), text);
        let leaf = r#"{"bytes":3000,"packets":2,"drops":1,"overlimits":0,"requeues":0,"backlog_bytes":1500,"backlog_packets":1}"#;
        let stats: LeafQdiscStats = serde_json::from_str(leaf).unwrap();
        assert_eq!((stats.queue.drops, stats.fq_codel), (1, None));
        assert_eq!(serde_json::to_string(&stats).unwrap(), leaf);
        let qdisc: QueueStats = serde_json::from_str(leaf).unwrap();
        assert_eq!(qdisc, stats.queue);
    }

    #[test]
    fn class_ids_are_typed_and_read_as_older_versions_wrote_them() {
        // Journal lines as htbd 0.1 wrote them, when ids were strings: they still load, into
        // typed ids.
        let old = [
            r#"{"op":"class_add","dev":"r2","id":"1:20","parent":"1:1","rate":10000000,"ceil":100000000}"#,
            r#"{"op":"class_add","dev":"r2","id":"1:1","parent":"1:","rate":100000000}"#,
            r#"{"op":"class_delete","dev":"r2","id":"1:20"}"#,
            r#"{"op":"class_change","dev":"r2","id":":20","rate":5000000}"#,
        ];
        let commands: Vec<Command> = old
            .iter()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
            .collect();
        let Command::ClassAdd(c) = &commands[0] else {
            panic!("{commands:?}")
        };
        assert_eq!(
            (c.id, c.parent),
            (ClassId::new(1, 0x20), Some(ClassId::new(1, 1)))
        );
        assert!(
            matches!(&commands[1], Command::ClassAdd(c) if c.parent == Some(ClassId::new(1, 0)))
        );
        assert!(
            matches!(&commands[2], Command::ClassDelete(ClassDelete { id, .. }) if *id == ClassId::new(1, 0x20))
        );
        assert!(matches!(&commands[3], Command::ClassChange(c) if c.id == ClassId::new(0, 0x20)));
        // Written back as they were (`:20` as `0:20`, which reads back the same).
        for (line, command) in old.iter().zip(&commands) {
            let again = serde_json::to_string(command).unwrap();
            assert_eq!(again, line.replace("\":20\"", "\"0:20\""));
            assert_eq!(serde_json::from_str::<Command>(&again).unwrap(), *command);
        }
        // A link layer as text; `adsl` is `atm`, as tc reads it.
        for (text, want) in [
            ("ethernet", LinkLayer::Ethernet),
            ("atm", LinkLayer::Atm),
            ("adsl", LinkLayer::Atm),
        ] {
            let line = format!(
                r#"{{"op":"class_add","dev":"r2","id":"1:20","rate":1,"linklayer":"{text}"}}"#
            );
            let c: Command = serde_json::from_str(&line).unwrap();
            assert!(
                matches!(c, Command::ClassAdd(c) if c.linklayer == Some(want)),
                "{line}"
            );
        }
        // Filters: a flowid as text, and a hash table without one.
        let with: Command = serde_json::from_str(
            r#"{"op":"filter_add","dev":"r2","parent":"1:","protocol":"ip","prio":1,"kind":"u32","matcher":{"dport":[5201,5201]},"class":"1:20"}"#,
        )
        .unwrap();
        assert!(matches!(&with, Command::FilterAdd(f) if f.class == Some(ClassId::new(1, 0x20))));
        let without: Command = serde_json::from_str(
            r#"{"op":"filter_add","dev":"r2","protocol":"all","prio":5,"kind":"u32","handle":"2:","matcher":{},"hashing":{"divisor":256}}"#,
        )
        .unwrap();
        assert!(matches!(&without, Command::FilterAdd(f) if f.class.is_none()));
        assert!(!serde_json::to_string(&without).unwrap().contains("class"));
        // Handles as the operator wrote them: u32's parts, flower's number, a filter del's
        // with no kind; each one word, written back in the form every grammar reads.
        for (line, word) in [
            (
                r#"{"op":"filter_add","dev":"r2","protocol":"ip","prio":1,"kind":"u32","handle":"800::801","matcher":{}}"#,
                0x8000_0801,
            ),
            (
                r#"{"op":"filter_add","dev":"r2","protocol":"ip","prio":2,"kind":"flower","handle":"3","matcher":{},"class":"1:20"}"#,
                3,
            ),
            (
                r#"{"op":"filter_delete","dev":"r2","prio":1,"handle":"800::801"}"#,
                0x8000_0801,
            ),
        ] {
            let c: Command = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            let handle = match &c {
                Command::FilterAdd(f) => f.handle,
                Command::FilterDelete(FilterDelete { handle, .. }) => *handle,
                _ => None,
            };
            assert_eq!(handle, Some(FilterHandle(word)), "{line}");
            let again = serde_json::to_string(&c).unwrap();
            assert!(
                again.contains(&format!("\"handle\":\"{word:#x}\"")),
                "{again}"
            );
            assert_eq!(serde_json::from_str::<Command>(&again).unwrap(), c);
        }
        // Prefixes as the operator wrote them (the CLI forwarded its text): a bare address is a
        // host; written back with its length. A malformed one is refused when read.
        let old: Command = serde_json::from_str(
            r#"{"op":"filter_add","dev":"r2","protocol":"ip","prio":1,"kind":"u32","matcher":{"dst":"10.0.0.9","src":"192.168.0.0/16"},"class":"1:20"}"#,
        )
        .unwrap();
        let Command::FilterAdd(f) = &old else {
            panic!("{old:?}")
        };
        assert_eq!(
            (
                f.matcher.dst.map(|p| p.prefix_len()),
                f.matcher.src.map(|p| p.prefix_len())
            ),
            (Some(32), Some(16))
        );
        assert!(
            serde_json::to_string(&old)
                .unwrap()
                .contains(r#""dst":"10.0.0.9/32""#)
        );
        assert!(
            serde_json::from_str::<Match>(r#"{"dst":"10.0.0.300/32"}"#)
                .unwrap_err()
                .to_string()
                .contains("10.0.0.300")
        );
        // A show's class and parent as text: `root`, a class, a qdisc.
        let show: Request = serde_json::from_str(
            r#"{"version":1,"request":{"type":"show","object":"class","class":"1:20","parent":"root"}}"#,
        )
        .unwrap();
        assert!(matches!(
            show.request,
            RequestBody::Show(Show { class: Some(c), parent: Some(Parent::Root), .. })
                if c == ClassId::new(1, 0x20)
        ));
        let show: Show = serde_json::from_str(r#"{"object":"filter","parent":"1:"}"#).unwrap();
        assert_eq!(show.parent, Some(Parent::Id(ClassId::new(1, 0))));
        assert_eq!(
            serde_json::to_string(&show).unwrap(),
            r#"{"object":"filter","parent":"1:","stats":false,"invisible":false}"#
        );
        // A parent written as "root" is the root; a malformed id is refused when read.
        let root: Command = serde_json::from_str(
            r#"{"op":"class_add","dev":"r2","id":"1:1","parent":"root","rate":1}"#,
        )
        .unwrap();
        assert!(matches!(root, Command::ClassAdd(c) if c.parent.is_none()));
        for bad in [
            r#"{"op":"class_delete","dev":"r2","id":"1:x"}"#,
            r#"{"op":"class_add","dev":"r2","id":"1:1","parent":"up","rate":1}"#,
        ] {
            assert!(serde_json::from_str::<Command>(bad).is_err(), "{bad}");
        }
    }

    /// A `filter add` as htb-cli 0.1 sent it, every match field given: it reads, says the
    /// same in words, and is written back byte for byte (older clients keep working).
    #[test]
    fn todays_filter_add_request_reads_and_writes_back_the_same() {
        let text = r#"{"version":1,"request":{"type":"apply","commands":[{"op":"filter_add","dev":"r2","parent":"1:","protocol":"ip","prio":5,"kind":"u32","handle":"0x80000801","matcher":{"src":"10.1.0.0/16","dst":"192.168.2.0/24","proto":17,"sport":[4096,8191],"dport":[53,53],"dscp":10,"vlan":7,"raw":[{"at":0,"mask":251658240,"value":83886080},{"at":12,"nexthdr":true,"mask":65280,"value":4608}]},"class":"1:30"},{"op":"class_add","dev":"r2","id":"1:30","parent":"1:1","rate":2000000,"ceil":40000000}]}}"#;
        let request: Request = serde_json::from_str(text).unwrap();
        let RequestBody::Apply { commands } = &request.request else {
            panic!("{request:?}")
        };
        let [Command::FilterAdd(f), Command::ClassAdd(c)] = commands.as_slice() else {
            panic!("{commands:?}")
        };
        assert_eq!((commands[0].dev(), commands[1].dev()), ("r2", "r2"));
        assert_eq!(
            f.matcher.words().to_string(),
            "src 10.1.0.0/16 dst 192.168.2.0/24 proto 17 sport 4096-8191 dport 53 dscp 10 vlan 7 2 u32 keys"
        );
        assert_eq!(f.class, Some(ClassId::new(1, 0x30)));
        assert_eq!(serde_json::to_string(&c.rate).unwrap(), "2000000");
        assert_eq!(serde_json::to_string(&request).unwrap(), text);
    }

    /// A match field the classifier cannot hold is refused as the request is read, the
    /// message naming the field and why (htbd answers it as a bad request, never applies it).
    #[test]
    fn a_bad_match_in_a_request_is_refused_naming_the_field() {
        let request = |matcher: &str| {
            format!(
                r#"{{"version":1,"request":{{"type":"apply","commands":[{{"op":"filter_add","dev":"r2","protocol":"ip","prio":1,"kind":"u32","matcher":{matcher},"class":"1:10"}}]}}}}"#
            )
        };
        assert!(serde_json::from_str::<Request>(&request(r#"{"dscp":63,"vlan":4094}"#)).is_ok());
        for (matcher, says) in [
            (r#"{"dscp":64}"#, "dscp 64: must be 0 to 63"),
            (r#"{"vlan":4095}"#, "vlan 4095: must be 0 to 4094"),
            (r#"{"dport":[443,80]}"#, "dport 443-80: an empty port range"),
        ] {
            let e = serde_json::from_str::<Request>(&request(matcher))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{matcher}: {e}");
        }
    }

    /// A show without a page reads as before (the whole list); one with a page round-trips,
    /// and a reply says where the next page starts only when one follows.
    #[test]
    fn pages_are_optional_on_both_sides() {
        let old =
            r#"{"version":1,"request":{"type":"show","object":"class","dev":"r2","stats":true}}"#;
        let Ok(Request {
            request: RequestBody::Show(show),
            ..
        }) = serde_json::from_str::<Request>(old)
        else {
            panic!("an unpaged show parses");
        };
        assert_eq!(show.page, None);
        let paged = Show {
            page: Some(Page {
                from: 40_000,
                limit: 20_000,
            }),
            ..show
        };
        let text = serde_json::to_string(&paged).unwrap();
        assert!(
            text.contains(r#""page":{"from":40000,"limit":20000}"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Show>(&text).unwrap(), paged);
        let last = serde_json::to_string(&Shown::default()).unwrap();
        assert!(!last.contains("next"), "{last}");
        let more = Shown {
            next: Some(60_000),
            ..Shown::default()
        };
        let text = serde_json::to_string(&more).unwrap();
        assert_eq!(
            serde_json::from_str::<Shown>(&text).unwrap().next,
            Some(60_000)
        );
    }

    #[test]
    fn frames_round_trip_and_errors_are_data() {
        let request = Request::new(RequestBody::Apply {
            commands: vec![
                Command::ClassChange(ClassSpec {
                    dev: "r2".into(),
                    id: ClassId::new(1, 0x10),
                    parent: Some(ClassId::new(1, 1)),
                    rate: Rate::from_mbit(20),
                    ceil: Some(Rate::from_mbit(100)),
                    ..ClassSpec::default()
                }),
                Command::FilterDelete(FilterDelete {
                    dev: "r2".into(),
                    parent: None,
                    prio: Some(1),
                    handle: None,
                }),
            ],
        });
        let mut wire = Vec::new();
        write_frame(&mut wire, &request).unwrap();
        assert_eq!(
            body_len(wire[..4].try_into().unwrap()).unwrap(),
            wire.len() - 4
        );
        let back: Request = read_frame(&mut wire.as_slice()).unwrap();
        assert_eq!(back, request);

        let response = Response::new(Err(IpcError {
            code: ErrorCode::NotFound,
            message: "class 1:99 does not exist".into(),
            command: Some(1),
        }));
        let json = serde_json::to_string(&response).unwrap();
        assert!(json.contains(r#""code":"not_found""#), "{json}");
        let back: Response = serde_json::from_str(&json).unwrap();
        assert_eq!(back, response);
        // A code this client does not know is still an error.
        let newer = json.replace("not_found", "quota_exceeded");
        let back: Response = serde_json::from_str(&newer).unwrap();
        assert_eq!(back.result.unwrap_err().code, ErrorCode::Unknown);
    }

    #[test]
    fn leaf_qdisc_commands_are_typed_on_the_wire() {
        let spec = LeafSpec::FqCodel(htb_core::FqCodelSpec {
            target: Some(htb_core::Duration::from_millis(10)),
            ecn: Some(false),
            ..htb_core::FqCodelSpec::default()
        });
        let command = Command::LeafAdd(LeafQdiscSpec {
            dev: "r2".into(),
            parent: Some(ClassId::new(1, 0x10)),
            handle: Some(ClassId::new(0x10, 0)),
            leaf: spec,
            stab: None,
        });
        let json = serde_json::to_string(&command).unwrap();
        assert_eq!(
            json,
            r#"{"op":"leaf_add","dev":"r2","parent":"1:10","handle":"10:","leaf":{"kind":"fq_codel","limit":null,"flows":null,"target":10000000,"interval":null,"quantum":null,"ecn":false,"ce_threshold":null,"memory_limit":null,"drop_batch":null}}"#
        );
        assert_eq!(serde_json::from_str::<Command>(&json).unwrap(), command);
        // A size table travels as tc's options, the link layer by its name.
        let stab = Command::QdiscAdd(QdiscSpec {
            dev: "r2".into(),
            stab: Some(SizeSpec {
                overhead: 34,
                link_layer: Some(LinkLayer::Ethernet),
                ..SizeSpec::default()
            }),
            ..QdiscSpec::default()
        });
        let stab_json = serde_json::to_string(&stab).unwrap();
        assert!(
            stab_json.contains(
                r#""stab":{"overhead":34,"mpu":0,"mtu":0,"tsize":0,"linklayer":"ethernet"}"#
            ),
            "{stab_json}"
        );
        assert_eq!(serde_json::from_str::<Command>(&stab_json).unwrap(), stab);
        // Ids are checked where they are read.
        let bad = json.replace("\"1:10\"", "\"1:xyz\"");
        let e = serde_json::from_str::<Command>(&bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1:xyz"), "{e}");
        let short =
            r#"{"op":"leaf_add","dev":"r2","parent":"1:10","leaf":{"kind":"sfq","perturb":10}}"#;
        let Command::LeafAdd(l) = serde_json::from_str::<Command>(short).unwrap() else {
            panic!()
        };
        assert_eq!(
            l.leaf,
            LeafSpec::Sfq(htb_core::SfqSpec {
                perturb: Some(10),
                ..htb_core::SfqSpec::default()
            })
        );
    }

    #[test]
    fn oversized_and_truncated_frames_are_refused() {
        let mut huge = (MAX_MESSAGE_BYTES + 1).to_be_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(matches!(
            read_frame::<Request>(&mut huge.as_slice()),
            Err(FrameError::TooLarge(n)) if n == MAX_MESSAGE_BYTES + 1
        ));
        assert!(matches!(
            read_frame::<Request>(&mut [].as_slice()),
            Err(FrameError::Closed)
        ));
        let mut short = 10u32.to_be_bytes().to_vec();
        short.extend_from_slice(b"{\"ver");
        assert!(matches!(
            read_frame::<Request>(&mut short.as_slice()),
            Err(FrameError::Io(_))
        ));
        let mut garbage = 5u32.to_be_bytes().to_vec();
        garbage.extend_from_slice(b"hello");
        assert!(matches!(
            read_frame::<Request>(&mut garbage.as_slice()),
            Err(FrameError::Json(_))
        ));
    }
}
