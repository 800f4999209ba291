//! Errors of the packet engine, with the OS error underneath where there is one.

use std::io;

/// What went wrong setting up or running the packet engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XdpError {
    /// A setting is not usable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A network interface is missing or unusable.
    #[error("interface {interface}: {reason}")]
    Interface {
        /// The interface.
        interface: String,
        /// Why.
        reason: String,
    },
    /// The UMEM could not be created.
    #[error("cannot create the UMEM: {0}")]
    Umem(String, #[source] Option<io::Error>),
    /// An AF_XDP socket could not be created.
    #[error("cannot create an AF_XDP socket on {interface} queue {queue}: {reason}{}", source.as_ref().map(|e| format!(" ({e})")).unwrap_or_default())]
    Socket {
        /// The interface.
        interface: String,
        /// The RX queue.
        queue: u32,
        /// What xsk-rs said.
        reason: String,
        /// The OS error.
        #[source]
        source: Option<io::Error>,
    },
    /// Loading or attaching the XDP program, or updating its maps, failed. The message
    /// carries aya's whole chain of causes (htbd logs errors by their message alone, and the
    /// netlink reason of a refused attach is two sources down); the source keeps it typed.
    #[error("XDP program: {what}: {}", chain_text(&**source))]
    Program {
        /// The step.
        what: String,
        /// aya's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A system call failed.
    #[error("{call} failed: {source}")]
    Syscall {
        /// The call.
        call: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// An error and its sources, `: `-separated, so "Numerical result out of range" reaches the
/// operator.
fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Why the engine's settings, or the interfaces they name, cannot work together: found before
/// anything is attached or bound, each naming the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `workers = 0`.
    #[error("workers must be at least 1")]
    NoWorkers,
    /// More workers than the engine runs.
    #[error("workers = {0}: at most 64")]
    TooManyWorkers(usize),
    /// A `cpus` list shorter than the workers.
    #[error("{workers} workers but {cpus} CPUs in cpus: list one CPU per worker")]
    TooFewCpus {
        /// Workers wanted.
        workers: usize,
        /// CPUs listed.
        cpus: usize,
    },
    /// No port at all.
    #[error("no interfaces")]
    NoPorts,
    /// Only IFB ports: nothing receives.
    #[error("no interfaces: IFB ports shape what interfaces redirect to them")]
    OnlyIfbPorts,
    /// A port given twice.
    #[error("interface {0} is listed twice")]
    ListedTwice(String),
    /// An ingress filter redirects to a port that is not an IFB port.
    #[error("{port}: ingress redirects to {to}, which is not an IFB port")]
    RedirectNotIfb {
        /// The port with the ingress filter.
        port: String,
        /// Where it redirects.
        to: String,
    },
    /// Bridge mode: a port without a peer.
    #[error("bridge mode: interface {0} needs a peer")]
    NoPeer(String),
    /// Bridge mode: a peer that is not a port.
    #[error("peer {peer} of {port} is not a listed interface")]
    PeerNotListed {
        /// The port.
        port: String,
        /// Its peer.
        peer: String,
    },
    /// Bridge mode: peers that do not name each other.
    #[error("{port} and {peer} must name each other as peers")]
    PeersDisagree {
        /// The port.
        port: String,
        /// Its peer.
        peer: String,
    },
    /// Router mode: a port with a peer.
    #[error("interface {0}: peer is for bridge mode only")]
    PeerInRouterMode(String),
    /// Router mode: two ports with one MAC address (egress is found by MAC).
    #[error("router mode needs distinct MAC addresses, but {a} and {b} share {mac}")]
    SharedMac {
        /// One port.
        a: String,
        /// The other.
        b: String,
        /// Their address, as `ip link` prints it.
        mac: String,
    },
    /// A port's tree that htb-core refuses.
    #[error("{port}: {source}")]
    Tree {
        /// The port.
        port: String,
        /// htb-core's reason.
        #[source]
        source: htb_core::ClassError,
    },
    /// A filter whose class no tree of its port has.
    #[error("{port}: filter ({matcher}) targets class {class} which is not defined")]
    FilterTarget {
        /// The port.
        port: String,
        /// The filter's match, as tc shows it.
        matcher: String,
        /// The class it names.
        class: htb_core::ClassId,
    },
    /// Jumbo frames with rings too short for two chains.
    #[error(
        "ring_size = {ring_size} is too small for jumbo frames: a ring must hold two packets of \
         {chain} frames (multi-buffer); raise ring_size to {needed} or more"
    )]
    RingTooSmallForJumbo {
        /// `ring_size`.
        ring_size: u32,
        /// The longest chain.
        chain: u32,
        /// The least that works.
        needed: u32,
    },
    /// A frame larger than AF_XDP takes.
    #[error(
        "frame_size = {frame_size} is larger than the page size ({page_size} bytes), the most \
         the kernel's AF_XDP takes per frame (xdp_umem_reg refuses larger chunks, with \
         or without hugepages); jumbo frames need no larger frames: htbd receives them \
         as chains of frames (multi-buffer). Set frame_size to 2048 or {suggested}"
    )]
    FrameTooLarge {
        /// `frame_size`.
        frame_size: u32,
        /// The system's page size.
        page_size: u32,
        /// A size that works.
        suggested: u32,
    },
    /// An MTU even the longest chain cannot hold.
    #[error(
        "{port}: MTU {mtu} does not fit {chain} frames of {frame_size} bytes, the longest \
         chain AF_XDP multi-buffer sends as one packet (MTU {max_mtu} at most): lower the \
         MTU (`ip link set {port} mtu {max_mtu}`) or raise frame_size to {suggested}"
    )]
    MtuTooLarge {
        /// The port.
        port: String,
        /// Its MTU.
        mtu: u32,
        /// The longest chain.
        chain: u32,
        /// `frame_size`.
        frame_size: u32,
        /// The largest MTU a chain holds.
        max_mtu: u32,
        /// A frame size that holds it.
        suggested: u32,
    },
    /// A UMEM too small for its rings (every packet would be dropped).
    #[error(
        "frames = {frames} is too few: {channels} socket(s) with ring_size = {ring_size} need \
         {in_rings} in their fill, RX and TX rings, {held_back} held back for receiving and \
         {for_queues} for queues, {needed} in all; raise frames or lower ring_size"
    )]
    TooFewFrames {
        /// `frames`.
        frames: u32,
        /// Sockets.
        channels: u32,
        /// `ring_size`.
        ring_size: u32,
        /// Frames their rings hold.
        in_rings: u64,
        /// Frames kept back for receiving.
        held_back: u64,
        /// The fewest left for queues.
        for_queues: u32,
        /// All of them.
        needed: u64,
    },
    /// `frames = 0`.
    #[error("frames must be above 0")]
    NoFrames,
    /// A port with fewer queues than workers.
    #[error(
        "{workers} workers need {workers} queues on every interface, and {port} has \
         {queues}: each worker receives on its own queues and sends through its own \
         socket (raise the queues: `ethtool -L {port} combined {workers}`, or \
         `numtxqueues {workers} numrxqueues {workers}` for a veth; or lower workers)"
    )]
    TooFewQueues {
        /// Workers.
        workers: usize,
        /// The port.
        port: String,
        /// Its queues.
        queues: u32,
    },
    /// A ring size xsk-rs refuses.
    #[error("ring size: {0}")]
    RingSize(#[source] xsk_rs::config::QueueSizeError),
    /// A frame size xsk-rs refuses.
    #[error("frame size: {0}")]
    FrameSize(#[source] xsk_rs::config::FrameSizeError),
    /// A UMEM configuration xsk-rs refuses.
    #[error("UMEM: {0}")]
    Umem(#[source] xsk_rs::config::UmemConfigBuilderError),
    /// A name that cannot be an interface's.
    #[error("invalid interface name {0:?}")]
    InterfaceName(String),
    /// A generator packet longer than the longest chain.
    #[error("a {len}-byte packet does not fit {chain} frames")]
    PacketTooLong {
        /// Its length.
        len: usize,
        /// The longest chain.
        chain: u32,
    },
}

/// Why the data plane refused one operation of a batch. The control plane validates every
/// change against its own model first, so each of these is a bug where the two disagree; the
/// batch is then taken back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlaneError {
    /// The operation names a port the data plane does not forward on.
    #[error("no port {0}")]
    NoPort(String),
    /// The port has no tree with the operation's major.
    #[error("{port}: no tree {major:x}:")]
    NoTree {
        /// The port.
        port: String,
        /// The tree's major the operation names.
        major: u16,
    },
    /// A new tree arrived without a scheduler for this worker.
    #[error("{0}: a new tree without a scheduler")]
    NoScheduler(String),
    /// The scheduler refused the change (htb-core's reason, kept typed).
    #[error(transparent)]
    Class(#[from] htb_core::ClassError),
}
