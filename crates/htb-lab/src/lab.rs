//! The netns lab: builds it with `scripts/lab.sh`, runs htbd inside, drives ping and iperf3, and
//! measures L2 rates on the egress veth. Needs root and network namespaces.

use std::io::{BufRead, BufReader};

use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::host::{repo, run, unavailable};

/// One lab at a time in this process: labs measure rates, so they must not share two cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the one-lab-at-a-time lock (whoever panicked while holding it).
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// node-1, the sender's side (10.201.1.2), for [`Lab::cmd`] and friends.
pub const N1: &str = "n1";
/// The router, where htbd (or the kernel's HTB) runs.
pub const R: &str = "r";
/// node-2, the receiver's side (10.201.2.2).
pub const N2: &str = "n2";
/// The router's address on the [management link](Lab::management_link).
pub const MANAGEMENT_IP: &str = "10.254.0.2";

/// Why a lab could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LabError {
    /// This machine cannot run it (not root, a tool missing, no namespaces).
    #[error("{0}")]
    Unavailable(String),
    /// `scripts/lab.sh up` failed, with its stderr.
    #[error("scripts/lab.sh up failed: {0}")]
    Setup(String),
}

/// A running lab; dropping it removes the namespaces (and every process in them).
#[derive(Debug)]
pub struct Lab {
    name: String,
    /// Node-2's address: what the traffic helpers send to.
    n2_ip: &'static str,
    anchors: Mutex<Vec<(String, Reaped)>>,
    /// Imitated stalls for the lab's lifetime (`HTB_LAB_STALLS`).
    stalls: Option<crate::stalls::Injector>,
    _serial: MutexGuard<'static, ()>,
}

impl Lab {
    /// Builds the lab in `mode` ("router" or "bridge") as namespaces `NAME-n1`, `NAME-r` and
    /// `NAME-n2`, for a test that was asked to run: lab tests are `#[ignore]`d (the runner's
    /// summary counts them as ignored where they cannot run) and `scripts/test.sh` includes
    /// them when it runs as root, so a lab that cannot be built here is a failure, not a skip.
    ///
    /// # Panics
    /// When the lab cannot run here (saying why), or `scripts/lab.sh up` fails.
    #[must_use]
    pub fn up(name: &str, mode: &str) -> Self {
        Self::up_with_queues(name, mode, 1)
    }

    /// As [`up`](Self::up), with `queues` TX and RX queues on every veth (for htbd's
    /// `workers`).
    ///
    /// # Panics
    /// As [`up`](Self::up).
    #[must_use]
    pub fn up_with_queues(name: &str, mode: &str, queues: u32) -> Self {
        Self::or_panic(Self::try_up_with_queues(name, mode, queues))
    }

    /// The lab, or a panic saying why it cannot run here.
    fn or_panic(lab: Result<Self, LabError>) -> Self {
        lab.unwrap_or_else(|reason| {
            panic!(
                "the netns lab cannot run here: {reason} (lab tests are ignored unless asked for; \
                 run them as root with --include-ignored)"
            )
        })
    }

    /// As [`up`](Self::up), but says why the lab cannot run here instead of panicking.
    ///
    /// # Errors
    /// Why the lab cannot run (not root, a tool missing, no namespaces) or `lab.sh` failed.
    pub fn try_up(name: &str, mode: &str) -> Result<Self, LabError> {
        Self::try_up_with_queues(name, mode, 1)
    }

    /// As [`try_up`](Self::try_up), with `queues` queues on every veth.
    ///
    /// # Errors
    /// As [`try_up`](Self::try_up).
    pub fn try_up_with_queues(name: &str, mode: &str, queues: u32) -> Result<Self, LabError> {
        Self::try_up_family(name, mode, queues, false)
    }

    /// As [`up`](Self::up), with IPv6 on every link beside IPv4 (`IPV6=1 scripts/lab.sh`):
    /// router mode fd00:201:1::2/64 via fd00:201:1::1 and fd00:201:2::2/64 via fd00:201:2::1,
    /// bridge mode fd00:201::1 and fd00:201::2; the traffic helpers then send to node-2's IPv6
    /// address.
    ///
    /// # Panics
    /// As [`up`](Self::up).
    #[must_use]
    pub fn up_ipv6(name: &str, mode: &str) -> Self {
        Self::or_panic(Self::try_up_family(name, mode, 1, true))
    }

    fn try_up_family(name: &str, mode: &str, queues: u32, ipv6: bool) -> Result<Self, LabError> {
        let serial = serial();
        if let Some(reason) = unavailable() {
            return Err(LabError::Unavailable(reason));
        }
        let stalls = match crate::stalls::from_env() {
            Ok(None) => None,
            Ok(Some(pattern)) => {
                let injector = crate::stalls::Injector::start(pattern, &crate::stalls::cpus())
                    .map_err(|e| LabError::Unavailable(e.to_string()))?;
                eprintln!(
                    "{}: imitating a noisy host, every CPU taken for {pattern}",
                    crate::stalls::ENV
                );
                Some(injector)
            }
            Err(e) => return Err(LabError::Unavailable(e.to_string())),
        };
        let name = name.to_owned();
        let out = run(Command::new(repo().join("scripts/lab.sh"))
            .args(["up", mode])
            .env("LAB", &name)
            .env("QUEUES", queues.to_string())
            .env("IPV6", if ipv6 { "1" } else { "0" }));
        if !out.status.success() {
            return Err(LabError::Setup(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ));
        }
        let n2_ip = match (mode, ipv6) {
            ("bridge", false) => "10.201.0.2",
            ("bridge", true) => "fd00:201::2",
            (_, false) => "10.201.2.2",
            (_, true) => "fd00:201:2::2",
        };
        Ok(Self {
            name,
            n2_ip,
            anchors: Mutex::new(Vec::new()),
            stalls,
            _serial: serial,
        })
    }

    /// The stalls imitated in this lab (`HTB_LAB_STALLS`), if any.
    #[must_use]
    pub fn imitated_stalls(&self) -> Option<crate::stalls::Pattern> {
        self.stalls.as_ref().map(crate::stalls::Injector::pattern)
    }

    /// Node-2's address (IPv6 in a lab built by [`up_ipv6`](Self::up_ipv6)).
    #[must_use]
    pub fn n2_ip(&self) -> &'static str {
        self.n2_ip
    }

    /// A management link from this (the host's) namespace to the router's: a veth pair,
    /// `NAME-mg` here with 10.254.0.1/30 and `mg0` in the router with [`MANAGEMENT_IP`], for
    /// clients that run here (a browser, a Prometheus server) to reach htbd's HTTP listener as
    /// an operator's network would. It goes with the router's namespace.
    ///
    /// # Panics
    /// When the link cannot be made.
    pub fn management_link(&self) -> &'static str {
        let host = format!("{}-mg", self.name);
        // A link left by a killed run.
        let _ = run(Command::new("ip").args(["link", "del", &host]));
        let steps: [Vec<String>; 5] = [
            [
                "link",
                "add",
                &host,
                "type",
                "veth",
                "peer",
                "name",
                "mg0",
                "netns",
                &self.ns(R),
            ]
            .map(String::from)
            .to_vec(),
            ["addr", "add", "10.254.0.1/30", "dev", &host]
                .map(String::from)
                .to_vec(),
            ["link", "set", &host, "up"].map(String::from).to_vec(),
            [
                "-n",
                &self.ns(R),
                "addr",
                "add",
                &format!("{MANAGEMENT_IP}/30"),
                "dev",
                "mg0",
            ]
            .map(String::from)
            .to_vec(),
            ["-n", &self.ns(R), "link", "set", "mg0", "up"]
                .map(String::from)
                .to_vec(),
        ];
        for step in steps {
            let out = run(Command::new("ip").args(&step));
            assert!(
                out.status.success(),
                "ip {}: {}",
                step.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        MANAGEMENT_IP
    }

    /// The full namespace name of `n1`, `r` or `n2`.
    pub fn ns(&self, which: &str) -> String {
        format!("{}-{which}", self.name)
    }

    /// A command run inside namespace `which`.
    pub fn cmd(&self, which: &str, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(which), program]);
        cmd
    }

    /// Runs a command inside `which` and returns its output.
    pub fn exec(&self, which: &str, args: &[&str]) -> Output {
        run(self.cmd(which, args[0]).args(&args[1..]))
    }

    /// Pings `ip` from `which`; returns the packets received.
    pub fn ping(&self, which: &str, ip: &str, count: u32, interval: &str) -> u32 {
        let out = self.exec(
            which,
            &[
                "ping",
                "-n",
                "-q",
                "-c",
                &count.to_string(),
                "-i",
                interval,
                "-W",
                "1",
                ip,
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| {
                l.split(", ")
                    .nth(1)
                    .and_then(|r| r.strip_suffix(" received"))
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// A process living in namespace `which`, through whose `/proc/PID/net` the namespace's
    /// counters can be read without spawning anything (a spawn under load takes tens of
    /// milliseconds, which would blur a rate measured over a few seconds).
    fn anchor(&self, which: &str) -> u32 {
        let mut anchors = self
            .anchors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(child) = anchors.iter().find(|(w, _)| w == which).map(|(_, c)| c) {
            return child.0.id();
        }
        let child = self
            .cmd(which, "sleep")
            .arg("1000000")
            .stdout(Stdio::null())
            .spawn()
            .expect("sleep");
        let id = child.id();
        anchors.push((which.to_owned(), Reaped(child)));
        // `ip netns exec` enters the namespace before it execs sleep.
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline
            && std::fs::read_to_string(format!("/proc/{id}/comm"))
                .is_ok_and(|c| c.trim() != "sleep")
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        id
    }

    /// Bytes received so far on `dev` in `which` (L2, without FCS).
    pub fn rx_bytes(&self, which: &str, dev: &str) -> u64 {
        self.rx_counters(which, dev).0
    }

    /// Bytes and packets received so far on `dev` in `which` (`/proc/net/dev`).
    pub fn rx_counters(&self, which: &str, dev: &str) -> (u64, u64) {
        let c = self.dev_counters(which, dev);
        (c[0], c[1])
    }

    /// Frames each RX queue of veth `dev` in `which` redirected to an AF_XDP socket so far
    /// (`ethtool -S`'s `rx_queue_N_xdp_redirect`), by queue: which workers received them.
    ///
    /// # Panics
    /// When `ethtool -S` fails or lists no queue.
    pub fn rx_queue_redirects(&self, which: &str, dev: &str) -> Vec<u64> {
        let out = self.exec(which, &["ethtool", "-S", dev]);
        assert!(out.status.success(), "ethtool -S {dev} failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut queues: Vec<(usize, u64)> = text
            .lines()
            .filter_map(|l| {
                let (name, value) = l.trim().split_once(':')?;
                let queue = name
                    .strip_prefix("rx_queue_")?
                    .strip_suffix("_xdp_redirect")?;
                Some((queue.parse().ok()?, value.trim().parse().ok()?))
            })
            .collect();
        queues.sort_unstable();
        assert!(
            !queues.is_empty(),
            "ethtool -S {dev} lists no queue:\n{text}"
        );
        queues.into_iter().map(|(_, n)| n).collect()
    }

    /// Bytes and packets sent so far by `dev` in `which`.
    pub fn tx_counters(&self, which: &str, dev: &str) -> (u64, u64) {
        let c = self.dev_counters(which, dev);
        (c[8], c[9])
    }

    /// The sixteen counters of `dev` in `/proc/net/dev` of namespace `which`.
    fn dev_counters(&self, which: &str, dev: &str) -> [u64; 16] {
        let pid = self.anchor(which);
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).expect("net/dev");
        text.lines()
            .find_map(|l| {
                let (name, counters) = l.split_once(':')?;
                if name.trim() != dev {
                    return None;
                }
                let fields: Vec<u64> = counters
                    .split_whitespace()
                    .map(|f| f.parse().ok())
                    .collect::<Option<_>>()?;
                fields.try_into().ok()
            })
            .unwrap_or_else(|| panic!("no {dev} in {which}"))
    }

    /// Whether an XDP program is attached to `dev` in `which`.
    pub fn xdp_attached(&self, which: &str, dev: &str) -> bool {
        let out = self.exec(which, &["ip", "link", "show", dev]);
        String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
    }

    /// Starts an iperf3 server for one test on `port` in `which`; it is reaped when dropped.
    ///
    /// # Panics
    /// When the server is not listening within five seconds (a port still taken).
    pub fn iperf_server(&self, which: &str, port: u16) -> Reaped {
        // A one-off server from an earlier measurement may still hold the port.
        self.wait_port(which, port, false);
        let child = self
            .cmd(which, "iperf3")
            .args(["-s", "-1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 -s");
        self.wait_port(which, port, true);
        Reaped(child)
    }

    /// Waits until a TCP socket of `which` listens on `port` (or, with `listening` false,
    /// none does), reading `/proc/PID/net/tcp*` of the namespace.
    fn wait_port(&self, which: &str, port: u16, listening: bool) {
        let pid = self.anchor(which);
        let needle = format!(":{port:04X} ");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let listens = ["tcp", "tcp6"].iter().any(|table| {
                std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))
                    .unwrap_or_default()
                    .lines()
                    .skip(1)
                    .any(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        f.len() > 3
                            && format!("{} ", &f[1][f[1].len() - 5..]) == needle
                            && f[3] == "0A"
                    })
            });
            if listens == listening {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "port {port} in {which} {} listening after 5 s",
                if listening { "not" } else { "still" }
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs an iperf3 client from `which` to `ip:port` for `secs`; `udp` gives the offered
    /// rate. Returns the JSON report.
    pub fn iperf(
        &self,
        which: &str,
        ip: &str,
        port: u16,
        secs: u32,
        udp: Option<&str>,
        reverse: bool,
    ) -> serde_json::Value {
        let mut args = vec![
            "-c".to_owned(),
            ip.into(),
            "-p".into(),
            port.to_string(),
            "-t".into(),
            secs.to_string(),
            "-J".into(),
        ];
        if let Some(rate) = udp {
            args.extend([
                "-u".into(),
                "-b".into(),
                rate.into(),
                "-l".into(),
                "1400".into(),
            ]);
        }
        if reverse {
            args.push("-R".into());
        }
        let out = run(self.cmd(which, "iperf3").args(&args));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "iperf3 {args:?}: {e}: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// Sets the MTU of every veth of the lab (both ends of both links), as seed 001's jumbo
    /// setup does with `ip link set … mtu 9000`.
    ///
    /// # Panics
    /// When `ip` refuses it.
    pub fn set_mtu(&self, mtu: u32) {
        for (which, dev) in [(N1, "eth0"), (R, "r1"), (R, "r2"), (N2, "eth0")] {
            let out = self.exec(which, &["ip", "link", "set", dev, "mtu", &mtu.to_string()]);
            assert!(
                out.status.success(),
                "ip link set {dev} mtu {mtu}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Starts a UDP flow node-1 → node-2:`port` at `rate` (iperf3, 1400-byte datagrams) for
    /// `secs`, in the background; its stdout is iperf3's JSON report. Node-2's address is
    /// [`n2_ip`](Self::n2_ip).
    pub fn udp_flow(&self, port: u16, rate: &str, secs: u32) -> Child {
        self.udp_flow_sized(port, rate, secs, 1400)
    }

    /// Starts a TCP flow node-1 → node-2:`port` for `secs` with a `window` socket buffer (e.g.
    /// "256K"), in the background; its stdout is iperf3's JSON report.
    pub fn tcp_flow(&self, port: u16, secs: u32, window: &str) -> Child {
        self.cmd(N1, "iperf3")
            .args(["-c", self.n2_ip, "-p", &port.to_string(), "-w", window])
            .args(["-t", &secs.to_string(), "-J"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 -c")
    }

    /// As [`udp_flow`](Self::udp_flow), with `len`-byte datagrams (8972 fill a 9000-byte MTU).
    pub fn udp_flow_sized(&self, port: u16, rate: &str, secs: u32, len: usize) -> Child {
        self.cmd(N1, "iperf3")
            .args(["-c", self.n2_ip, "-p", &port.to_string(), "-u", "-b", rate])
            .args(["-l", &len.to_string(), "-t", &secs.to_string(), "-J"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 -c")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/lab.sh"))
            .arg("down")
            .env("LAB", &self.name)
            .output();
    }
}

/// A helper process that is killed (if still running) and reaped when dropped.
#[derive(Debug)]
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads lines of a child's stdout until one contains `needle`.
pub fn wait_line(child: &mut Child, needle: &str) -> bool {
    let Some(stdout) = child.stdout.take() else {
        return false;
    };
    BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains(needle))
}
