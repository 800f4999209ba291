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

mod command;
mod error;
mod explain;
mod filter_handle;
mod filter_kind;
mod flows;
mod frame;
mod generation;
mod incoming;
mod protocol;
mod request;
mod response;
mod shown;
mod status;
mod tagged;

pub use command::{
    ClassDelete, ClassSpec, Command, FilterDelete, FilterSpec, LabelSpec, LeafQdiscSpec, MqSpec,
    QdiscSpec, SplitSpec,
};
pub use error::{ErrorCode, IpcError};
pub use explain::{Direction, Explain, Explanation, Outcome, PortExplanation};
pub use filter_handle::{FilterHandle, FilterHandleError};
pub use filter_kind::{FilterKind, UnknownFilterKind};
pub use flows::{FlowEntry, FlowList, FlowStatus, FlowsQuery};
pub use frame::{FrameError, body_len, encode, read_frame, write_frame};
pub use generation::{BadGeneration, Generation, GenerationHasher};
/// A filter's match is the classifier's own, checked as it is read (`htb_classify`'s wire
/// form: the JSON older versions sent, refused field by field when the classifier cannot hold
/// it), so that htbd never validates one after the fact.
pub use htb_classify::{
    ControlAction, IpPrefix, Match, MatchError, PoliceConfig, PoliceStats, PortRange, RawKey,
    U32Handle, U32HandleError,
};
/// Interface names are the config's type, checked as the kernel's `dev_valid_name()` does as
/// they are read, a plain string on the wire.
pub use htb_config::interface_name::{ForbiddenByte, InterfaceName, InterfaceNameError};
pub use htb_config::label::{ClassLabel, Device, LabelError, LabelFields, LabelText, MacAddr};
/// Rates are the core's type, a number of bit/s on the wire.
pub use htb_core::{
    CakeStats, ClassId, FqCodelStats, LeafConfig, LeafKind, LeafSpec, LinkLayer, Rate, SizeSpec,
    SplitChoice, Warning,
};
pub use incoming::{Incoming, RawCommands, read_incoming};
pub use protocol::{Protocol, UnknownProtocol};
pub use request::{Object, Page, Parent, Request, RequestBody, Show};
pub use response::{CommandResult, ReplyBody, Response};
pub use shown::{
    ClassInfo, ClassStats, FilterInfo, HashKey, IngressInfo, LeafQdiscInfo, LeafQdiscStats,
    MqClassInfo, MqInfo, PoliceInfo, QdiscInfo, QueueStats, RttStats, Shown, U32Hashing,
};
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

#[cfg(test)]
mod tests;
