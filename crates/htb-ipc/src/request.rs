//! A client's message: its envelope (the protocol version, the request) and what it asks.

use serde::{Deserialize, Serialize};

use crate::command::parent_or_root;
use crate::{
    ClassId, Command, Explain, FilterHandle, FlowsQuery, InterfaceName, PROTOCOL_VERSION, tagged,
};

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
    /// Is the daemon there? Answered with [`ReplyBody::Pong`](crate::ReplyBody::Pong). (A struct variant, so that
    /// unknown fields are refused as in the others.)
    Ping {},
    /// Read state: answered with [`ReplyBody::Shown`](crate::ReplyBody::Shown).
    Show(Show),
    /// Apply commands **atomically**: all of them or none. Answered with
    /// [`ReplyBody::Applied`](crate::ReplyBody::Applied), once they are live in the data plane and persisted.
    Apply {
        /// In order.
        commands: Vec<Command>,
    },
    /// The data plane's counters: answered with [`ReplyBody::Status`](crate::ReplyBody::Status).
    Status {},
    /// Hold these commands for this connection's next [`RequestBody::Apply`], which applies
    /// them first, all in one atomic batch with its own: a batch larger than one message
    /// (a million subscribers' classes and filters) arrives in several. Answered with
    /// [`ReplyBody::Staged`](crate::ReplyBody::Staged); dropped if the connection closes first. Error indexes of the
    /// batch count the staged commands first, in order.
    Stage {
        /// In order, after those staged before.
        commands: Vec<Command>,
    },
    /// Which filter and class packets to and from an address take: answered with
    /// [`ReplyBody::Explained`](crate::ReplyBody::Explained).
    Explain(Explain),
    /// The flow records kept now: answered with [`ReplyBody::Flows`](crate::ReplyBody::Flows).
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
    pub dev: Option<InterfaceName>,
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
    /// a large tree's `-s` show can push past [`MAX_MESSAGE_BYTES`](crate::MAX_MESSAGE_BYTES)).
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
