//! What the engine is started with ([`EngineConfig`], a [`PortConfig`] per port), and the checks
//! made against the interfaces before anything is attached or bound.

use std::time::Duration as StdDuration;

use htb_classify::Filter;
use htb_core::PortTree;

use crate::dataplane::Mode;
use crate::error::{ConfigError, XdpError};
use crate::io_config::{IoConfig, MAX_CHAIN};
use crate::netdev::{NetDev, format_mac};
use crate::program::AttachMode;
use crate::sys;

/// One port as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Interface name.
    pub name: String,
    /// Bridge mode: the other side.
    pub peer: Option<String>,
    /// The HTB trees shaping what leaves through this port: one at its root, or one per
    /// class of an `mq` root; none: unshaped (FIFO).
    pub trees: Vec<PortTree>,
    /// Filters classifying into `trees`, in evaluation order.
    pub filters: Vec<Filter>,
    /// Measure the TCP round trips of what leaves through this port, per class.
    pub rtt: bool,
    /// An IFB device (tc's `ifbN`): no interface is opened or attached; its trees shape
    /// what other ports' ingress filters redirect to it, before those frames go on to their
    /// egress ports.
    pub ifb: bool,
    /// Its ingress qdisc (`ffff:`): the filters, each with the IFB its `mirred egress
    /// redirect` names (`None`: none, a policer only). `None`: no ingress qdisc.
    pub ingress: Option<Vec<(Filter, Option<String>)>>,
}

impl EngineConfig {
    /// The same configuration with the IFB ports after the interfaces, so that a port's index
    /// is its interface's (IFB ports have none).
    pub(super) fn with_ifbs_last(&self) -> Self {
        let mut config = self.clone();
        config.ports.sort_by_key(|p| p.ifb);
        config
    }
}

/// Everything the engine needs to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Router or bridge.
    pub mode: Mode,
    /// The ports.
    pub ports: Vec<PortConfig>,
    /// UMEM and rings.
    pub io: IoConfig,
    /// XDP attach mode.
    pub attach: AttachMode,
    /// Spin instead of sleeping when idle.
    pub busy_poll: bool,
    /// Run the data-plane thread SCHED_FIFO at this priority (1-99); `None`: normal.
    pub realtime: Option<u8>,
    /// Frames per RX/TX batch.
    pub batch: usize,
    /// Liveness fail-open: when the data plane has not beaten for this long (hung, stopped,
    /// stuck in a long job), the XDP program hands every frame to the kernel until it beats
    /// again. `None`: no liveness check (only a missing socket fails open).
    pub liveness: Option<StdDuration>,
    /// Data-plane workers (threads). `None`: one per RX queue of the port with the fewest
    /// (each worker needs a queue of every port), at most one per CPU this process may use
    /// (or per CPU in `cpus`).
    pub workers: Option<usize>,
    /// Worker `i` runs pinned to `cpus[i]`; empty: not pinned.
    pub cpus: Vec<usize>,
    /// Stall credit: when a worker was kept from forwarding (its pass began late), each class
    /// it serves is given back what it could have sent meanwhile beyond its burst, up to this
    /// much of its rate per stall (`Scheduler::credit_stall`). `None`: none, as the kernel.
    pub stall_credit: Option<StdDuration>,
    /// Flow metering: each worker keeps a flow table of this configuration, and ended
    /// records go to the export ring ([`Engine::take_flow_records`](crate::Engine::take_flow_records)). `None`: no flows, and
    /// nothing spent on them.
    pub flows: Option<crate::flow_table::FlowConfig>,
    /// With several workers, a subtree of a root tree whose top class's rate is above this is
    /// split: served by every worker at once, each queueing what it receives (one class faster
    /// than a core). `None`: only the subtrees the ports' trees choose
    /// ([`PortTree::split`](htb_core::PortTree::split)) are.
    pub split_above: Option<htb_core::Rate>,
}

impl EngineConfig {
    /// The number of workers for ports with these RX queue counts.
    ///
    /// # Errors
    /// [`XdpError::Config`] when `workers` or `cpus` cannot be met.
    pub(super) fn worker_count(&self, queues: &[u32]) -> Result<usize, XdpError> {
        let fewest = queues.iter().copied().min().unwrap_or(1).max(1) as usize;
        let cores = if self.cpus.is_empty() {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        } else {
            self.cpus.len()
        };
        let workers = match self.workers {
            Some(0) => return Err(ConfigError::NoWorkers.into()),
            Some(n) => n,
            None => fewest.min(cores),
        };
        if workers > 64 {
            return Err(ConfigError::TooManyWorkers(workers).into());
        }
        if !self.cpus.is_empty() && self.cpus.len() < workers {
            return Err(ConfigError::TooFewCpus {
                workers,
                cpus: self.cpus.len(),
            }
            .into());
        }
        Ok(workers)
    }
}

/// Checks `config` against the interfaces before anything is attached or bound, and returns
/// them with the UMEM settings to use: multi-buffer on when an MTU needs it.
pub(super) fn validate(config: &EngineConfig) -> Result<(Vec<NetDev>, IoConfig), XdpError> {
    if config.ports.is_empty() {
        return Err(ConfigError::NoPorts.into());
    }
    let mut devs = Vec::new();
    for (i, port) in config.ports.iter().enumerate() {
        if config.ports[..i].iter().any(|p| p.name == port.name) {
            return Err(ConfigError::ListedTwice(port.name.clone()).into());
        }
        if !port.ifb {
            devs.push(NetDev::open(&port.name)?);
        }
    }
    if devs.is_empty() {
        return Err(ConfigError::OnlyIfbPorts.into());
    }
    for port in &config.ports {
        let redirects = port
            .ingress
            .iter()
            .flatten()
            .filter_map(|(_, to)| to.as_ref());
        for to in redirects {
            if !config.ports.iter().any(|p| p.ifb && p.name == *to) {
                return Err(ConfigError::RedirectNotIfb {
                    port: port.name.clone(),
                    to: to.clone(),
                }
                .into());
            }
        }
    }
    let mut io = config.io;
    let mtus: Vec<(&str, u32)> = devs.iter().map(|d| (d.name.as_str(), d.mtu)).collect();
    io.multi_buffer = io.check_mtus(sys::page_size(), &mtus)?;
    if io.multi_buffer {
        let (name, mtu) = mtus
            .iter()
            .max_by_key(|(_, mtu)| *mtu)
            .copied()
            .unwrap_or_default();
        tracing::info!(
            "{name}: MTU {mtu} is more than one {}-byte frame holds (MTU {}): jumbo frames \
             are received and sent as chains of frames (AF_XDP multi-buffer)",
            io.frame_size,
            io.max_single_mtu()
        );
        if io.ring_size < 2 * MAX_CHAIN {
            return Err(ConfigError::RingTooSmallForJumbo {
                ring_size: io.ring_size,
                chain: MAX_CHAIN,
                needed: (2 * MAX_CHAIN).next_power_of_two(),
            }
            .into());
        }
    }
    match config.mode {
        Mode::Bridge => {
            for port in config.ports.iter().filter(|p| !p.ifb) {
                let peer = port
                    .peer
                    .as_deref()
                    .ok_or_else(|| ConfigError::NoPeer(port.name.clone()))?;
                let other = config
                    .ports
                    .iter()
                    .find(|p| p.name == peer)
                    .ok_or_else(|| ConfigError::PeerNotListed {
                        port: port.name.clone(),
                        peer: peer.to_owned(),
                    })?;
                if other.peer.as_deref() != Some(port.name.as_str()) {
                    return Err(ConfigError::PeersDisagree {
                        port: port.name.clone(),
                        peer: peer.to_owned(),
                    }
                    .into());
                }
            }
        }
        Mode::Router => {
            if let Some(p) = config.ports.iter().find(|p| p.peer.is_some()) {
                return Err(ConfigError::PeerInRouterMode(p.name.clone()).into());
            }
            for (i, a) in devs.iter().enumerate() {
                if let Some(b) = devs[i + 1..].iter().find(|b| b.mac == a.mac) {
                    return Err(ConfigError::SharedMac {
                        a: a.name.clone(),
                        b: b.name.clone(),
                        mac: format_mac(&a.mac),
                    }
                    .into());
                }
            }
        }
    }
    let channels = devs.iter().map(|d| d.rx_queues).sum();
    let batch = config.batch.clamp(1, io.ring_size as usize) as u32;
    if let Some(frames) = io.fit_frames(channels, batch) {
        tracing::info!(
            "frames = {frames} ({} MiB of UMEM): the default 32768 would leave no room for \
             queues beside {channels} sockets' rings (set frames to choose)",
            (u64::from(frames) * u64::from(io.frame_size)) >> 20
        );
    }
    io.check_budget(channels, batch)?;
    Ok((devs, io))
}
