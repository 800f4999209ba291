//! `htbd --config FILE`: the daemon's TOML config (a contract: tools and tests generate it).
//!
//! ```toml
//! [daemon]
//! mode = "router"              # or "bridge"
//! socket = "/run/htbd/htbd.sock"    # control socket
//! state_dir = "/var/lib/htbd"  # live changes persist here
//! log = "info"
//! http = "127.0.0.1:9469"      # optional: console, JSON API, /metrics, /health (off by default;
//!                              # `metrics = …` is its older name)
//! http_token = "/etc/htbd/http.token"  # required off loopback: requests carry this token
//! split_above = "4gbit"        # with several workers: a subtree whose top class's rate is above
//!                              # this is served by every worker at once ("0bit": only by choice)
//!
//! [[interface]]
//! name = "r2"
//! rtt = true                   # optional: TCP round trips per class of what leaves here
//! [interface.qdisc]            # optional: an HTB tree shaping what leaves through this port
//! default = "20"
//! [[interface.class]]          # same keys as the simulator's [[class]]
//! id = "1:1"
//! rate = "100mbit"
//! split = false                # optional, on a subtree's top: served by every worker (true)
//!                              # or by one (false), whatever split_above says
//! [[interface.filter]]
//! prio = 1
//! match = { dst = "10.201.1.0/24", proto = "udp", dport = "5201" }
//! classid = "1:20"
//!
//! [[interface]]                # tc's mq instead: one HTB tree per TX queue
//! name = "r1"
//! mq = "7fff:"
//! [[interface.tree]]           # the tree under mq class 7fff:1 (TX queue 0)
//! parent = "7fff:1"
//! qdisc = { handle = "1:", default = "2" }
//! [[interface.tree.class]]     # and [[interface.tree.filter]], as above
//! id = "1:1"
//! rate = "1gbit"
//!
//! [[interface]]                # or a classless qdisc at the root (sqm's piece_of_cake)
//! name = "r3"
//! root = { kind = "cake", bandwidth = "20mbit", diffserv = "diffserv4", handle = "1:" }
//! ```
//!
//! Everything is checked before anything on the system is touched; errors name the key, line
//! and column.

use std::path::PathBuf;

use htb_config::values::{RateValue, TimeValue};
use htb_config::{ConfigError, InterfaceName, Located};
use htb_xdp::{AttachMode, EngineConfig, IoConfig, Mode, PortConfig};
use serde::Deserialize;

use crate::netfilter::NetfilterPolicy;
use crate::trees::InterfaceTrees;

mod flows;
mod interface;
pub use flows::{FlowsConfig, IpfixConfig};
pub use interface::parse_state;
use interface::{InterfaceSection, interface_trees};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    daemon: Option<DaemonSection>,
    flows: Option<flows::FlowsSection>,
    #[serde(default)]
    interface: Vec<Located<InterfaceSection>>,
}

/// `[daemon]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DaemonSection {
    mode: Option<Located<String>>,
    socket: Option<PathBuf>,
    socket_group: Option<String>,
    state_dir: Option<PathBuf>,
    log: Option<String>,
    frames: Option<u32>,
    frame_size: Option<Located<u32>>,
    ring_size: Option<Located<u32>>,
    batch: Option<usize>,
    busy_poll: Option<bool>,
    realtime: Option<Located<u8>>,
    xdp_mode: Option<Located<String>>,
    zero_copy: Option<bool>,
    liveness_timeout: Option<Located<TimeValue>>,
    stall_credit: Option<Located<TimeValue>>,
    netfilter: Option<Located<String>>,
    #[serde(alias = "metrics")]
    http: Option<Located<String>>,
    http_token: Option<Located<PathBuf>>,
    workers: Option<Located<usize>>,
    cpus: Option<Located<Vec<usize>>>,
    split_above: Option<RateValue>,
}

/// A validated config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonConfig {
    /// Control socket path.
    pub socket: PathBuf,
    /// Group owning the control socket (mode 0660); `None`: root's.
    pub socket_group: Option<String>,
    /// Where live changes persist.
    pub state_dir: PathBuf,
    /// Log filter (`info`, `debug`, `htbd=debug`, …).
    pub log: String,
    /// Per interface, its tree and filters as the file gives them.
    pub interfaces: Vec<InterfaceTrees>,
    /// The data plane.
    pub engine: EngineConfig,
    /// Router mode with netfilter rules that its fast path would bypass: refuse or run.
    pub netfilter: NetfilterPolicy,
    /// The HTTP listener: console, API, `/metrics`, `/health` (`None`: not served).
    pub http: Option<HttpConfig>,
    /// Flow records and their export (`[flows]`; `None`: none kept).
    pub flows: Option<FlowsConfig>,
}

/// `[daemon] http` and `http_token`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// The file holding the token requests for data must carry (required off loopback).
    pub token: Option<PathBuf>,
}

/// Where an optional key's value stands (the file's start when it is absent).
fn span_of<T>(value: Option<&Located<T>>) -> std::ops::Range<usize> {
    value.map(Located::span).unwrap_or_default()
}

/// The value at `value` if `ok` accepts it; else `message`, at the value's line and column.
fn accepted<T: Copy>(
    text: &str,
    value: &Located<T>,
    ok: impl FnOnce(T) -> bool,
    message: impl FnOnce(T) -> String,
) -> Result<T, ConfigError> {
    let v = *value.get_ref();
    if ok(v) {
        Ok(v)
    } else {
        Err(ConfigError::spanned(text, &value.span(), message(v)))
    }
}

impl DaemonConfig {
    /// Parses and validates a config.
    ///
    /// # Errors
    /// The first problem, with line, column and key.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut file: File = htb_config::from_toml(text)?;
        let daemon = file.daemon.take().unwrap_or_default();
        let flows = file.flows.take().map(|f| f.validate(text)).transpose()?;
        let err =
            |span: std::ops::Range<usize>, msg: String| ConfigError::spanned(text, &span, msg);

        let mode = match daemon
            .mode
            .as_ref()
            .map(|m| (m.get_ref().as_str(), m.span()))
        {
            None | Some(("router", _)) => Mode::Router,
            Some(("bridge", _)) => Mode::Bridge,
            Some((other, span)) => {
                return Err(err(
                    span,
                    format!("mode must be \"router\" or \"bridge\", not {other:?}"),
                ));
            }
        };
        let attach = match daemon
            .xdp_mode
            .as_ref()
            .map(|m| (m.get_ref().as_str(), m.span()))
        {
            None | Some(("auto", _)) => AttachMode::Auto,
            Some(("native", _)) => AttachMode::Native,
            Some(("skb", _)) => AttachMode::Skb,
            Some((other, span)) => {
                return Err(err(
                    span,
                    format!("xdp_mode must be auto, native or skb, not {other:?}"),
                ));
            }
        };
        let mut io = IoConfig::default();
        if let Some(frames) = daemon.frames {
            io.frames = frames;
            io.frames_default = false;
        }
        let power_of_two = |v: u32, range: std::ops::RangeInclusive<u32>| {
            v.is_power_of_two() && range.contains(&v)
        };
        if let Some(size) = &daemon.frame_size {
            io.frame_size = accepted(
                text,
                size,
                |v| power_of_two(v, 2048..=65536),
                |v| format!("frame_size {v} must be a power of two from 2048 to 65536"),
            )?;
        }
        if let Some(size) = &daemon.ring_size {
            io.ring_size = accepted(
                text,
                size,
                |v| power_of_two(v, 64..=32768),
                |v| format!("ring_size {v} must be a power of two from 64 to 32768"),
            )?;
        }
        io.zero_copy = daemon.zero_copy.unwrap_or(false);
        if let Some(p) = &daemon.realtime {
            accepted(
                text,
                p,
                |p| (1..=99).contains(&p),
                |p| format!("realtime priority {p} must be 1 to 99"),
            )?;
        }
        if let Some(w) = &daemon.workers {
            accepted(
                text,
                w,
                |w| (1..=64).contains(&w),
                |w| format!("workers = {w} must be 1 to 64"),
            )?;
        }
        let cpus = daemon
            .cpus
            .as_ref()
            .map_or_else(Vec::new, |c| c.get_ref().clone());
        if let Some(c) = &daemon.cpus {
            let mut seen = std::collections::HashSet::new();
            if let Some(bad) = c.get_ref().iter().find(|&&cpu| !seen.insert(cpu)) {
                return Err(err(c.span(), format!("cpus lists CPU {bad} twice")));
            }
            if c.get_ref().is_empty() {
                return Err(err(
                    c.span(),
                    "cpus is empty: list one CPU per worker, or leave it out".into(),
                ));
            }
            if let Some(w) = &daemon.workers
                && c.get_ref().len() < *w.get_ref()
            {
                return Err(err(
                    c.span(),
                    format!(
                        "cpus lists {} CPUs for {} workers: one per worker",
                        c.get_ref().len(),
                        w.get_ref()
                    ),
                ));
            }
            if let Some(cpu) = c.get_ref().iter().find(|&&cpu| cpu >= 1024) {
                return Err(err(c.span(), format!("cpus: CPU {cpu} is beyond 1023")));
            }
        }
        // Liveness fail-open: 100 ms by default, "0s" turns it off.
        let liveness = match &daemon.liveness_timeout {
            None => Some(std::time::Duration::from_millis(100)),
            Some(t) => {
                let ns = t.get_ref().0.as_nanos();
                if ns == 0 {
                    None
                } else if !(1_000_000..=10_000_000_000).contains(&ns) {
                    return Err(err(
                        t.span(),
                        format!(
                            "liveness_timeout {} must be 1ms to 10s (or 0s: off)",
                            t.get_ref().0
                        ),
                    ));
                } else {
                    Some(std::time::Duration::from_nanos(ns))
                }
            }
        };
        let stall_credit = stall_credit(text, daemon.stall_credit.as_ref())?;
        let netfilter = match &daemon.netfilter {
            None => NetfilterPolicy::Refuse,
            Some(v) => match v.get_ref().as_str() {
                "refuse" => NetfilterPolicy::Refuse,
                "bypass" => NetfilterPolicy::Bypass,
                other => {
                    return Err(err(
                        v.span(),
                        format!("netfilter {other:?} must be \"refuse\" or \"bypass\""),
                    ));
                }
            },
        };
        let http = match &daemon.http {
            None => {
                if let Some(t) = &daemon.http_token {
                    return Err(err(
                        t.span(),
                        "http_token without http: nothing listens".into(),
                    ));
                }
                None
            }
            Some(v) => {
                let addr: std::net::SocketAddr = v.get_ref().parse().map_err(|_| {
                    err(
                        v.span(),
                        format!(
                            "http {:?} is not an address and port such as \"127.0.0.1:9469\" \
                             or \"[::1]:9469\"",
                            v.get_ref()
                        ),
                    )
                })?;
                let token = daemon.http_token.as_ref().map(|t| t.get_ref().clone());
                if token.is_none() && !addr.ip().is_loopback() {
                    return Err(err(
                        v.span(),
                        format!(
                            "http {addr} is reachable from other hosts: set http_token to a file \
                             holding a token (e.g. `head -c 24 /dev/urandom | base64 > \
                             /etc/htbd/http.token`), or listen on 127.0.0.1"
                        ),
                    ));
                }
                Some(HttpConfig { addr, token })
            }
        };
        if file.interface.is_empty() {
            return Err(ConfigError::at(
                text,
                text.len(),
                "no [[interface]]: list every port htbd forwards on".into(),
            ));
        }

        let mut ports: Vec<PortConfig> = Vec::new();
        let mut interfaces = Vec::new();
        for section in &file.interface {
            let iface = section.get_ref();
            let name = iface.name.get_ref().clone();
            if ports.iter().any(|p| p.name == name) {
                return Err(err(
                    iface.name.span(),
                    format!("interface {name} is listed twice"),
                ));
            }
            let peer = iface.peer.as_ref().map(|p| p.get_ref().clone());
            // Its type is checked with its trees: an IFB is only what parsed as one.
            let (trees, filters) = interface_trees(text, section)?;
            let ifb = trees.ifb;
            match (mode, &iface.peer) {
                (_, Some(p)) if ifb => {
                    return Err(err(
                        p.span(),
                        format!(
                            "{name} is an IFB: it takes no peer (what it releases goes on to each frame's own egress port)"
                        ),
                    ));
                }
                (Mode::Bridge, None) if ifb => {}
                (Mode::Router, Some(p)) => {
                    return Err(err(p.span(), "peer is for mode = \"bridge\" only".into()));
                }
                (Mode::Bridge, None) => {
                    return Err(err(
                        iface.name.span(),
                        format!("bridge mode: interface {name} needs a peer"),
                    ));
                }
                _ => {}
            }
            // The data plane names ports by their plain names.
            ports.push(PortConfig {
                name: name.to_string(),
                peer: peer.map(InterfaceName::into_string),
                trees: trees.port_trees(),
                filters,
                rtt: iface.rtt,
                ifb,
                ingress: None,
            });
            interfaces.push(trees);
        }
        for (section, trees) in file.interface.iter().zip(&interfaces) {
            let redirects = trees.ingress.iter().flatten().filter_map(|f| f.redirect());
            for to in redirects {
                if !interfaces.iter().any(|t| t.ifb && t.name == *to) {
                    return Err(err(
                        span_of(section.get_ref().ingress.as_ref()),
                        format!(
                            "interface {}: ingress redirects to {to}, which is not an IFB port here (add [[interface]] name = \"{to}\" type = \"ifb\")",
                            trees.name
                        ),
                    ));
                }
            }
        }
        if !ports.iter().any(|p| !p.ifb) {
            return Err(ConfigError::at(
                text,
                text.len(),
                "only IFB ports: list the interfaces htbd forwards on too".into(),
            ));
        }
        if mode == Mode::Bridge {
            for (section, port) in file.interface.iter().zip(&ports).filter(|(_, p)| !p.ifb) {
                let peer = port.peer.as_deref().unwrap_or_default();
                let back = ports
                    .iter()
                    .find(|p| p.name == peer)
                    .and_then(|p| p.peer.as_deref());
                if back != Some(port.name.as_str()) {
                    return Err(err(
                        span_of(section.get_ref().peer.as_ref()),
                        format!(
                            "{} and {peer} must both be listed, naming each other as peer",
                            port.name
                        ),
                    ));
                }
            }
        }

        Ok(Self {
            socket: daemon
                .socket
                .unwrap_or_else(|| PathBuf::from(htb_ipc::DEFAULT_SOCKET)),
            socket_group: daemon.socket_group,
            state_dir: daemon
                .state_dir
                .unwrap_or_else(|| PathBuf::from("/var/lib/htbd")),
            log: daemon.log.unwrap_or_else(|| "info".into()),
            interfaces,
            engine: EngineConfig {
                mode,
                ports,
                io,
                attach,
                busy_poll: daemon.busy_poll.unwrap_or(false),
                realtime: daemon.realtime.map(|p| *p.get_ref()),
                batch: daemon.batch.unwrap_or(64),
                liveness,
                workers: daemon.workers.map(|w| *w.get_ref()),
                cpus,
                stall_credit,
                flows: flows.map(|f| f.table),
                split_above: split_above(daemon.split_above),
            },
            netfilter,
            http,
            flows,
        })
    }
}

/// `[daemon] split_above` when the file does not say: below the 5.6 Gbit/s of 1514-byte UDP
/// one worker forwards on the 16-core lab machine (`docs/bench-16core.md`), with room for the
/// handover a subtree's other workers pay (11 % of the packet rate) and for smaller packets.
const SPLIT_ABOVE: htb_core::Rate = htb_core::Rate::from_gbit(4);

/// `daemon.split_above`: [`SPLIT_ABOVE`] by default; `"0bit"` splits only what the trees choose
/// (`split = true`).
fn split_above(value: Option<RateValue>) -> Option<htb_core::Rate> {
    match value {
        None => Some(SPLIT_ABOVE),
        Some(RateValue(rate)) if rate.bits_per_sec() == 0 => None,
        Some(RateValue(rate)) => Some(rate),
    }
}

/// The most stall credit a class may get per stall of its worker; longer would outlast the
/// liveness fail-open's default, after which the kernel forwards anyway.
const MAX_STALL_CREDIT_NS: u64 = 100_000_000;

/// `daemon.stall_credit`: 10 ms by default (a VM's host takes a few ms at a time), `"0s"`
/// turns it off.
fn stall_credit(
    text: &str,
    value: Option<&Located<TimeValue>>,
) -> Result<Option<std::time::Duration>, ConfigError> {
    let Some(t) = value else {
        return Ok(Some(std::time::Duration::from_millis(10)));
    };
    match t.get_ref().0.as_nanos() {
        0 => Ok(None),
        ns if ns <= MAX_STALL_CREDIT_NS => Ok(Some(std::time::Duration::from_nanos(ns))),
        _ => Err(ConfigError::spanned(
            text,
            &t.span(),
            format!(
                "stall_credit {} must be at most 100ms (or 0s: off)",
                t.get_ref().0
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use htb_core::ClassId;
    use htb_ipc::FilterHandle;

    use super::*;

    const LAB: &str = r#"
[daemon]
mode = "router"
socket = "/tmp/htbd.sock"

[[interface]]
name = "r1"

[[interface]]
name = "r2"
[interface.qdisc]
default = "20"
r2q = 10
[[interface.class]]
id = "1:1"
rate = "100mbit"
[[interface.class]]
id = "1:20"
parent = "1:1"
rate = "10mbit"
ceil = "100mbit"
[[interface.filter]]
prio = 1
match = { dst = "10.201.1.0/24", proto = "udp", dport = "5201" }
classid = "1:20"
"#;

    #[test]
    fn parses_the_contract_example() {
        let c = DaemonConfig::parse(LAB).unwrap();
        assert_eq!(c.socket, PathBuf::from("/tmp/htbd.sock"));
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/htbd"));
        assert_eq!(c.engine.mode, Mode::Router);
        assert_eq!(c.engine.ports.len(), 2);
        assert!(c.engine.ports[0].trees.is_empty());
        let r2 = &c.engine.ports[1];
        assert_eq!(r2.trees[0].tree.config.default_minor, 0x20);
        assert_eq!(r2.trees[0].mq_minor, None);
        assert_eq!(r2.filters[0].class, ClassId::new(1, 0x20));
        assert_eq!(r2.filters[0].matcher.dport.map(|p| p.first), Some(5201));
    }

    fn error(text: &str) -> String {
        DaemonConfig::parse(text).unwrap_err().to_string()
    }

    /// An interface's name, its peer and an ingress redirect are read as the kernel checks a
    /// name (`dev_valid_name()`): one no interface can have is refused at its line and column,
    /// naming the rule.
    #[test]
    fn a_name_no_interface_can_have_is_refused_where_the_file_gives_it() {
        let bridge = "[daemon]\nmode = \"bridge\"\n";
        for (text, line, says) in [
            (
                "[[interface]]\nname = \"eth0:1\"\n".to_owned(),
                2,
                "\"eth0:1\" is not a valid interface name: it may not hold ':'",
            ),
            (
                format!("{bridge}[[interface]]\nname = \"a\"\npeer = \"bridge-port-number-2\"\n"),
                5,
                "20 bytes, at most 15",
            ),
            (
                "[[interface]]\nname = \"r2\"\n[interface.ingress]\nredirect = \"ifb 0\"\n"
                    .to_owned(),
                4,
                "it may not hold white space",
            ),
            (
                "[[interface]]\nname = \"r2\"\n[interface.ingress]\n\
                 [[interface.ingress.filter]]\nprio = 1\nredirect = \"..\"\n"
                    .to_owned(),
                6,
                "\"..\" is not a valid interface name",
            ),
        ] {
            let e = DaemonConfig::parse(&text).unwrap_err();
            assert_eq!(e.line, line, "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
        let ok = "[[interface]]\nname = \"enp3s0f1\"\n[[interface]]\nname = \"bond0.100\"\n";
        let c = DaemonConfig::parse(ok).unwrap();
        assert_eq!(c.interfaces[1].name, "bond0.100");
    }

    #[test]
    fn an_mq_root_takes_one_tree_per_class_and_says_where_a_tree_is_wrong() {
        let head = "[daemon]\nstate_dir = \"/tmp/x\"\n[[interface]]\nname = \"r1\"\n";
        let tree = |parent: &str, major: u16| {
            format!(
                "[[interface.tree]]\nparent = \"{parent}\"\nqdisc = {{ handle = \"{major:x}:\" }}\n\
                 [[interface.tree.class]]\nid = \"{major:x}:1\"\nrate = \"10mbit\"\n"
            )
        };
        let text = format!(
            "{head}mq = \"7fff:\"\n{}{}",
            tree("7fff:2", 2),
            tree("7fff:1", 1)
        );
        let c = DaemonConfig::parse(&text).unwrap();
        assert_eq!(c.interfaces[0].mq, Some(0x7fff));
        let placed: Vec<(Option<u16>, u16)> = c.engine.ports[0]
            .trees
            .iter()
            .map(|t| (t.mq_minor, t.tree.config.major))
            .collect();
        assert_eq!(placed, [(Some(1), 1), (Some(2), 2)], "in class order");
        for (bad, why) in [
            (format!("{head}{}", tree("7fff:1", 1)), "set mq = "),
            (
                format!("{head}mq = \"7fff:\"\n{}", tree("8:1", 1)),
                "not a class of mq 7fff:",
            ),
            (
                format!(
                    "{head}mq = \"7fff:\"\n{}{}",
                    tree("7fff:1", 1),
                    tree("7fff:1", 2)
                ),
                "has two trees",
            ),
            (
                format!(
                    "{head}mq = \"7fff:\"\n{}{}",
                    tree("7fff:1", 1),
                    tree("7fff:2", 1)
                ),
                "is used twice",
            ),
            (
                format!("{head}mq = \"7fff:\"\n[interface.qdisc]\ndefault = \"2\"\n"),
                "go in [[interface.tree]]",
            ),
        ] {
            let e = error(&bad);
            assert!(e.contains(why) && e.starts_with("line "), "{why}: {e}");
        }
    }

    #[test]
    fn http_is_off_by_default_and_needs_a_token_off_loopback() {
        let http = |line: &str| {
            DaemonConfig::parse(&format!("[daemon]\n{line}\n[[interface]]\nname = \"r1\"\n"))
                .map(|c| c.http)
        };
        assert_eq!(http("").unwrap(), None);
        let local = HttpConfig {
            addr: "127.0.0.1:9469".parse().unwrap(),
            token: None,
        };
        assert_eq!(
            http("http = \"127.0.0.1:9469\"").unwrap(),
            Some(local.clone())
        );
        // The older name.
        assert_eq!(http("metrics = \"127.0.0.1:9469\"").unwrap(), Some(local));
        let e = http("http = \"localhost\"").unwrap_err().to_string();
        assert!(
            e.contains("not an address and port") && e.contains("line 2"),
            "{e}"
        );
        let e = http("http = \"0.0.0.0:9469\"").unwrap_err().to_string();
        assert!(e.contains("set http_token") && e.contains("line 2"), "{e}");
        assert_eq!(
            http("http = \"10.0.0.1:9469\"\nhttp_token = \"/etc/htbd/t\"")
                .unwrap()
                .unwrap()
                .token,
            Some(PathBuf::from("/etc/htbd/t"))
        );
        let e = http("http_token = \"/etc/htbd/t\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("http_token without http"), "{e}");
        let e = http("http = \"127.0.0.1:1\"\nmetrics = \"127.0.0.1:2\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("duplicate"), "{e}");
    }

    #[test]
    fn netfilter_refuses_by_default_and_bypass_is_spelled_out() {
        let policy = |line: &str| {
            DaemonConfig::parse(&LAB.replace("[daemon]\n", &format!("[daemon]\n{line}\n")))
                .map(|c| c.netfilter)
        };
        assert_eq!(policy("").unwrap(), NetfilterPolicy::Refuse);
        assert_eq!(
            policy("netfilter = \"bypass\"").unwrap(),
            NetfilterPolicy::Bypass
        );
        let e = policy("netfilter = \"ignore\"").unwrap_err().to_string();
        assert!(
            e.starts_with("line 3, column 13: daemon.netfilter: netfilter \"ignore\" must be"),
            "{e}"
        );
    }

    #[test]
    fn liveness_timeout_defaults_to_100_ms_and_turns_off_with_zero() {
        let liveness = |line: &str| {
            DaemonConfig::parse(&LAB.replace("[daemon]\n", &format!("[daemon]\n{line}\n")))
                .map(|c| c.engine.liveness)
        };
        assert_eq!(
            liveness("").unwrap(),
            Some(std::time::Duration::from_millis(100))
        );
        assert_eq!(
            liveness("liveness_timeout = \"250ms\"").unwrap(),
            Some(std::time::Duration::from_millis(250))
        );
        assert_eq!(liveness("liveness_timeout = \"0s\"").unwrap(), None);
        let e = liveness("liveness_timeout = \"10us\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("line 3, column 20: daemon.liveness_timeout: liveness_timeout 10us must be 1ms to 10s"),
            "{e}"
        );
    }

    #[test]
    fn split_above_defaults_to_4_gbit_and_turns_off_with_zero() {
        let above = |line: &str| {
            DaemonConfig::parse(&LAB.replace("[daemon]\n", &format!("[daemon]\n{line}\n")))
                .map(|c| c.engine.split_above)
        };
        assert_eq!(above("").unwrap(), Some(htb_core::Rate::from_gbit(4)));
        assert_eq!(
            above("split_above = \"10gbit\"").unwrap(),
            Some(htb_core::Rate::from_gbit(10))
        );
        assert_eq!(above("split_above = \"0bit\"").unwrap(), None);
        let e = above("split_above = \"fast\"").unwrap_err().to_string();
        assert!(
            e.starts_with("line 3, column 15: daemon.split_above:"),
            "{e}"
        );
    }

    /// `split` on a subtree's top class reaches the engine's tree; below a top, or under mq,
    /// it is refused where it is written.
    #[test]
    fn a_class_s_split_choice_reaches_the_engine_and_is_refused_below_a_subtree_top() {
        let c = DaemonConfig::parse(
            &LAB.replace("ceil = \"100mbit\"", "ceil = \"100mbit\"\nsplit = true"),
        )
        .unwrap();
        assert_eq!(
            c.engine.ports[1].trees[0].split,
            std::collections::BTreeMap::from([(
                ClassId::new(1, 0x20),
                htb_core::SplitChoice::Split
            )])
        );
        let deep = LAB.replace(
            "[[interface.filter]]",
            "[[interface.class]]\nid = \"1:200\"\nparent = \"1:20\"\nrate = \"1mbit\"\nsplit = false\n[[interface.filter]]",
        );
        let e = error(&deep);
        assert!(
            e.starts_with("line 26, column 9: interface[1].class[2].split:")
                && e.contains("in the subtree of 1:20"),
            "{e}"
        );
        let head = "[[interface]]\nname = \"r1\"\nmq = \"7fff:\"\n[[interface.tree]]\nparent = \"7fff:1\"\n";
        let e = error(&format!(
            "{head}[[interface.tree.class]]\nid = \"1:1\"\nrate = \"10gbit\"\nsplit = true\n"
        ));
        assert!(e.contains("tree under mq is served whole"), "{e}");
    }

    #[test]
    fn stall_credit_defaults_to_10_ms_and_turns_off_with_zero() {
        let credit = |line: &str| {
            DaemonConfig::parse(&LAB.replace("[daemon]\n", &format!("[daemon]\n{line}\n")))
                .map(|c| c.engine.stall_credit)
        };
        assert_eq!(
            credit("").unwrap(),
            Some(std::time::Duration::from_millis(10))
        );
        assert_eq!(
            credit("stall_credit = \"4ms\"").unwrap(),
            Some(std::time::Duration::from_millis(4))
        );
        assert_eq!(credit("stall_credit = \"0s\"").unwrap(), None);
        let e = credit("stall_credit = \"1s\"").unwrap_err().to_string();
        assert!(
            e.starts_with(
                "line 3, column 16: daemon.stall_credit: stall_credit 1s must be at most 100ms"
            ),
            "{e}"
        );
    }

    #[test]
    fn bad_configs_name_the_place() {
        let e = error(&LAB.replace("rate = \"10mbit\"", "rate = \"10mbitz\""));
        assert!(
            e.starts_with(
                "line 20, column 8: interface[1].class[1].rate: invalid rate \"10mbitz\""
            ),
            "{e}"
        );
        assert!(e.contains("invalid rate \"10mbitz\""), "{e}");
        let e = error(&LAB.replace("classid = \"1:20\"", "classid = \"1:30\""));
        assert!(
            e.starts_with(
                "line 25, column 11: interface[1].filter[0].classid: filter targets class 1:30"
            ),
            "{e}"
        );
        let e = error(&LAB.replace("mode = \"router\"", "mode = \"switch\""));
        assert!(e.starts_with("line 3, column 8: daemon.mode:"), "{e}");
        let e = error(&LAB.replace(
            "ceil = \"100mbit\"",
            "ceil = \"100mbit\"\nlabel = { name = \"Ann\", devices = [{ id = \"a\", mac = \"00:11\" }] }",
        ));
        assert!(
            e.starts_with("line 22, column 54: interface[1].class[1].label:")
                && e.contains("\"00:11\" is not a MAC address"),
            "{e}"
        );
        let e = error(&LAB.replace("name = \"r1\"", "name = \"r1\"\npeer = \"r2\""));
        assert!(e.contains("peer is for mode = \"bridge\" only"), "{e}");
        let e = error(
            "[daemon]\nmode = \"bridge\"\n[[interface]]\nname = \"a\"\npeer = \"b\"\n[[interface]]\nname = \"b\"\npeer = \"c\"\n",
        );
        assert!(e.contains("naming each other"), "{e}");
        let e = error("[daemon]\nlog = \"info\"\n");
        assert!(e.contains("no [[interface]]"), "{e}");
        let e = error("[daemon]\nframe_size = 3000\n[[interface]]\nname = \"a\"\n");
        assert!(e.contains("power of two"), "{e}");
        let e = error("[[interface]]\nname = \"a\"\n[[interface.filter]]\nclassid = \"1:1\"\n");
        assert!(e.contains("does not define"), "{e}");
        let e = error("[[interface]]\nname = \"a\"\nspeed = 1\n");
        assert!(e.contains("unknown field `speed`"), "{e}");
    }

    /// sqm-scripts' layout: r2 shapes its upload, and its download through ifb4r2.
    const SQM: &str = r#"
[daemon]
mode = "router"

[[interface]]
name = "r1"

[[interface]]
name = "r2"
[interface.ingress]
redirect = "ifb4r2"

[[interface]]
name = "ifb4r2"
type = "ifb"
[interface.qdisc]
default = "10"
[[interface.class]]
id = "1:10"
rate = "20mbit"
"#;

    #[test]
    fn an_ifb_port_and_an_ingress_redirect() {
        let c = DaemonConfig::parse(SQM).unwrap();
        let r2 = &c.interfaces[1];
        let ingress = r2.ingress.as_ref().expect("r2 has an ingress qdisc");
        assert_eq!(ingress.len(), 1);
        let f = &ingress[0];
        assert_eq!(
            (f.prio, f.redirect().map(InterfaceName::as_str)),
            (10, Some("ifb4r2"))
        );
        assert_eq!(
            FilterHandle(f.handle).display(f.kind).to_string(),
            "800::800"
        );
        assert!(c.interfaces[2].ifb && !r2.ifb);
        assert!(c.engine.ports[2].ifb);
        // The general form: filters of the ingress qdisc, each with its action.
        let general = SQM.replace(
            "redirect = \"ifb4r2\"",
            "[[interface.ingress.filter]]\nprio = 5\nmatch = { dst = \"10.0.0.0/8\" }\nredirect = \"ifb4r2\"\n[[interface.ingress.filter]]\nprio = 6\npolice = { rate = \"1mbit\", burst = \"10k\", exceed = \"drop\" }",
        );
        let c = DaemonConfig::parse(&general).unwrap_or_else(|e| panic!("{e}"));
        let ingress = c.interfaces[1].ingress.as_ref().unwrap();
        assert_eq!(ingress.len(), 2);
        assert!(ingress[1].police().is_some() && ingress[1].redirect().is_none());
    }

    #[test]
    fn ingress_and_ifb_mistakes_name_the_place() {
        let e = error(&SQM.replace("redirect = \"ifb4r2\"", "redirect = \"r1\""));
        assert!(e.contains("not an IFB port"), "{e}");
        let e = error(&SQM.replace("type = \"ifb\"", "type = \"veth\""));
        assert!(e.contains("knows \"ifb\""), "{e}");
        // An unknown type is named as such, not taken for an IFB that has a peer.
        let e = error(&SQM.replace("type = \"ifb\"", "type = \"veth\"\npeer = \"r1\""));
        assert!(e.contains("knows \"ifb\""), "{e}");
        let e = error(&SQM.replace(
            "type = \"ifb\"\n",
            "type = \"ifb\"\n[interface.ingress]\nredirect = \"ifb4r2\"\n",
        ));
        assert!(e.contains("takes no ingress"), "{e}");
        let e = error(&SQM.replace(
            "redirect = \"ifb4r2\"",
            "[[interface.ingress.filter]]\nprio = 5",
        ));
        assert!(e.contains("needs an action"), "{e}");
        let e = error(&LAB.replace(
            "classid = \"1:20\"",
            "classid = \"1:20\"\nredirect = \"ifb0\"",
        ));
        assert!(e.contains("[[interface.ingress.filter]]"), "{e}");
        let e = error("[[interface]]\nname = \"ifb0\"\ntype = \"ifb\"\n");
        assert!(e.contains("only IFB ports"), "{e}");
    }
}
