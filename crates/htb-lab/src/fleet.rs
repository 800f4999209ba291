//! The lab of several boxes (`scripts/fleet-lab.sh`): an upstream router running BIRD, two
//! htbd boxes each with BIRD, keepalived and `htb-cli health-watch`, and a subscriber behind
//! them on a shared access LAN. The routing daemons are the real ones Debian ships (`bird2`,
//! `keepalived`), run with the configs in `dist/` and `crates/htbd/testdata/fleet/`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use crate::host::{cli_bin, repo};
use crate::htbd::Htbd;
use crate::lab::Reaped;

/// The upstream router (and the "internet" host 10.200.0.1 behind it).
pub const UP: &str = "up";
/// The subscriber, 10.220.0.100, behind the boxes.
pub const SUB: &str = "sub";
/// Where the upstream sends from.
pub const INTERNET: &str = "10.200.0.1";
/// The subscriber's address.
pub const SUBSCRIBER: &str = "10.220.0.100";
/// The subscribers' prefix the boxes announce.
pub const PREFIX: &str = "10.220.0.0/24";
/// When each direction of the subscriber's traffic moved to a box, from the start of a wait.
#[derive(Clone, Copy, Debug)]
pub struct Moved {
    /// The upstream's route to the subscribers' prefix (BGP): the download.
    pub route: Duration,
    /// The subscribers' gateway address (VRRP): the upload.
    pub gateway: Duration,
}

impl Moved {
    /// When the box carried both.
    #[must_use]
    pub fn both(self) -> Duration {
        self.route.max(self.gateway)
    }
}

/// The subscribers' gateway, which keepalived moves.
pub const GATEWAY: &str = "10.220.0.1";

/// Why the fleet cannot run here, if it cannot: the single-box lab's reasons, or a routing
/// daemon missing.
#[must_use]
pub fn unavailable() -> Option<String> {
    if let Some(reason) = crate::host::unavailable() {
        return Some(reason);
    }
    ["bird", "birdc", "keepalived"]
        .into_iter()
        .find_map(|tool| {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success());
            (!found).then(|| format!("{tool} is not installed (scripts/setup.sh installs it)"))
        })
}

/// One box: its namespace's name and its number (1 or 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetBox {
    /// 1 or 2.
    pub n: u8,
}

impl FleetBox {
    /// The primary (lower MED, higher VRRP priority).
    pub const PRIMARY: Self = Self { n: 1 };
    /// The standby.
    pub const STANDBY: Self = Self { n: 2 };

    /// `b1` or `b2`.
    #[must_use]
    pub fn name(self) -> String {
        format!("b{}", self.n)
    }

    /// Its address on its upstream link: the BGP next hop the upstream routes to.
    #[must_use]
    pub fn uplink_ip(self) -> String {
        format!("10.210.{}.2", self.n)
    }
}

/// A running fleet lab; dropping it stops every process in it and removes the namespaces.
#[derive(Debug)]
pub struct Fleet {
    name: String,
    dir: tempfile::TempDir,
    children: std::sync::Mutex<Vec<Reaped>>,
    _stalls: Option<crate::stalls::Injector>,
    _serial: MutexGuard<'static, ()>,
}

fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut text = template.to_owned();
    for (name, value) in values {
        text = text.replace(&format!("@{name}@"), value);
    }
    assert!(
        !text
            .lines()
            .any(|l| !l.trim_start().starts_with('#') && l.matches('@').count() >= 2),
        "a @NAME@ left unfilled:\n{text}"
    );
    text
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

impl Fleet {
    /// Builds the fleet as namespaces `NAME-up`, `-b1`, `-b2`, `-lan`, `-sub`, with BIRD on the
    /// upstream (its routes not yet learnt: start the boxes' daemons next).
    ///
    /// # Panics
    /// When it cannot run here (saying why) or `scripts/fleet-lab.sh up` fails.
    #[must_use]
    pub fn up(name: &str) -> Self {
        let serial = crate::lab::serial();
        if let Some(reason) = unavailable() {
            panic!(
                "the fleet lab cannot run here: {reason} (lab tests are ignored unless asked \
                 for; run them as root with --include-ignored)"
            );
        }
        let stalls = crate::stalls::from_env()
            .unwrap_or_else(|e| panic!("{e}"))
            .map(|pattern| {
                crate::stalls::Injector::start(pattern, &crate::stalls::cpus())
                    .unwrap_or_else(|e| panic!("{e}"))
            });
        let out = run(Command::new(repo().join("scripts/fleet-lab.sh"))
            .arg("up")
            .env("LAB", name));
        assert!(
            out.status.success(),
            "scripts/fleet-lab.sh up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let fleet = Self {
            name: name.to_owned(),
            dir: tempfile::tempdir().unwrap(),
            children: std::sync::Mutex::default(),
            _stalls: stalls,
            _serial: serial,
        };
        let upstream =
            std::fs::read_to_string(repo().join("crates/htbd/testdata/fleet/bird-upstream.conf"))
                .unwrap();
        fleet.start_bird(UP, &upstream);
        fleet
    }

    /// The full namespace name of `up`, `b1`, `b2`, `lan` or `sub`.
    #[must_use]
    pub fn ns(&self, which: &str) -> String {
        format!("{}-{which}", self.name)
    }

    /// A command run inside namespace `which`.
    #[must_use]
    pub fn cmd(&self, which: &str, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(which), program]);
        cmd
    }

    /// Runs `args` in `which` and returns its output.
    pub fn exec(&self, which: &str, args: &[&str]) -> Output {
        run(self.cmd(which, args[0]).args(&args[1..]))
    }

    /// Where this fleet's daemons keep their files.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn keep(&self, what: &str, child: Child) {
        self.children
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Reaped(child));
        eprintln!("fleet: started {what}");
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::File::create(self.dir().join(name)).unwrap()
    }

    /// BIRD's control socket in `which`.
    #[must_use]
    pub fn bird_socket(&self, which: &str) -> PathBuf {
        self.dir().join(format!("bird-{which}.ctl"))
    }

    /// Runs BIRD in `which` (in the foreground, so that it goes with the fleet) with `config`.
    pub fn start_bird(&self, which: &str, config: &str) {
        let path = self.dir().join(format!("bird-{which}.conf"));
        std::fs::write(&path, config).unwrap();
        let child = self
            .cmd(which, "bird")
            .arg("-f")
            .arg("-c")
            .arg(&path)
            .arg("-s")
            .arg(self.bird_socket(which))
            .arg("-P")
            .arg(self.dir().join(format!("bird-{which}.pid")))
            .stdout(Stdio::null())
            .stderr(self.log(&format!("bird-{which}.log")))
            .spawn()
            .expect("bird");
        self.keep(&format!("BIRD in {which}"), child);
    }

    /// `birdc` against `which`'s BIRD.
    pub fn birdc(&self, which: &str, args: &[&str]) -> String {
        let out = run(Command::new("birdc")
            .arg("-s")
            .arg(self.bird_socket(which))
            .args(args));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The keepalived state file `htb-cli health-watch` writes for box `b`.
    #[must_use]
    pub fn state_file(&self, b: FleetBox) -> PathBuf {
        self.dir().join(format!("healthy-{}", b.name()))
    }

    /// Starts box `b`'s routing daemons with the shipped configs (`dist/bird/htbd-box.conf`,
    /// `dist/keepalived/htbd.conf`) and its `htb-cli health-watch` with `hold_down`.
    pub fn start_routing(&self, b: FleetBox, hold_down: &str) {
        let name = b.name();
        let n = b.n;
        let bird = std::fs::read_to_string(repo().join("dist/bird/htbd-box.conf")).unwrap();
        let bird = fill(
            &bird,
            &[
                ("ROUTER_ID", b.uplink_ip()),
                ("LOCAL", b.uplink_ip()),
                ("LOCAL_AS", "65001".into()),
                ("NEIGHBOR", format!("10.210.{n}.1")),
                ("NEIGHBOR_AS", "65000".into()),
                ("UPLINK", "up0".into()),
                ("ACCESS", "acc0".into()),
                ("PREFIX", PREFIX.into()),
                ("MED", (u32::from(n) * 10).to_string()),
            ],
        );
        self.start_bird(&name, &bird);
        let keepalived = std::fs::read_to_string(repo().join("dist/keepalived/htbd.conf")).unwrap();
        let keepalived = fill(
            &keepalived,
            &[
                ("ROUTER_ID", name.clone()),
                ("ACCESS", "acc0".into()),
                ("UPLINK", "up0".into()),
                ("GATEWAY", format!("{GATEWAY}/24")),
                ("VRID", "51".into()),
                ("PRIORITY", (200 - 50 * u32::from(n)).to_string()),
                ("STATE_FILE", self.state_file(b).display().to_string()),
            ],
        );
        let path = self.dir().join(format!("keepalived-{name}.conf"));
        std::fs::write(&path, keepalived).unwrap();
        let pid = |what: &str| self.dir().join(format!("keepalived-{name}{what}.pid"));
        let child = self
            .cmd(&name, "keepalived")
            .args(["--dont-fork", "--vrrp", "--log-console", "--log-detail"])
            .arg("--use-file")
            .arg(&path)
            .arg("--pid")
            .arg(pid(""))
            .arg("--vrrp_pid")
            .arg(pid("-vrrp"))
            .stdout(Stdio::null())
            .stderr(self.log(&format!("keepalived-{name}.log")))
            .spawn()
            .expect("keepalived");
        self.keep(&format!("keepalived in {name}"), child);
        let protocol = "htbd_subscribers";
        let socket = self.bird_socket(&name);
        let child = self
            .cmd(&name, cli_bin().to_str().unwrap())
            .args(["health-watch", "--hold-down", hold_down])
            .arg("--on-up")
            .arg(format!("birdc -s {} enable {protocol}", socket.display()))
            .arg("--on-down")
            .arg(format!("birdc -s {} disable {protocol}", socket.display()))
            .arg("--state-file")
            .arg(self.state_file(b))
            .args(["--uplink", "up0"])
            .stdout(Stdio::null())
            .stderr(self.log(&format!("watch-{name}.log")))
            .spawn()
            .expect("htb-cli health-watch");
        self.keep(&format!("htb-cli health-watch in {name}"), child);
    }

    /// Starts htbd in box `b` with `config`, keeping its state in `dir`.
    #[must_use]
    pub fn start_htbd(&self, b: FleetBox, config: &str, dir: tempfile::TempDir) -> Htbd {
        Htbd::start_in_namespace(&self.ns(&b.name()), config, dir, &[])
    }

    /// Where the upstream routes the subscribers' prefix now: the box, if one.
    #[must_use]
    pub fn download_via(&self) -> Option<FleetBox> {
        let out = self.exec(UP, &["ip", "-o", "route", "show", PREFIX]);
        let text = String::from_utf8_lossy(&out.stdout);
        [FleetBox::PRIMARY, FleetBox::STANDBY]
            .into_iter()
            .find(|b| text.contains(&format!("via {} ", b.uplink_ip())))
    }

    /// Which box holds the subscribers' gateway address now (the first found, if any).
    #[must_use]
    pub fn gateway_on(&self) -> Option<FleetBox> {
        [FleetBox::PRIMARY, FleetBox::STANDBY]
            .into_iter()
            .find(|b| {
                let out = self.exec(
                    &b.name(),
                    &["ip", "-o", "-4", "addr", "show", "dev", "acc0"],
                );
                String::from_utf8_lossy(&out.stdout).contains(&format!("{GATEWAY}/"))
            })
    }

    /// Which box carries the subscriber both ways, if one box does both.
    #[must_use]
    pub fn carried_by(&self) -> Option<FleetBox> {
        let down = self.download_via()?;
        (self.gateway_on() == Some(down)).then_some(down)
    }

    /// Waits until box `b` carries the subscriber both ways; returns how long that took.
    ///
    /// # Panics
    /// When it does not within `limit`, with the daemons' logs.
    pub fn wait_carried_by(&self, b: FleetBox, limit: Duration) -> Duration {
        self.wait_moved_to(b, limit).both()
    }

    /// Waits until box `b` carries the subscriber both ways; returns when each direction
    /// moved to it (BGP's route for the download, VRRP's gateway for the upload), so that a
    /// slow hand-over says which daemon was slow.
    ///
    /// # Panics
    /// When it does not within `limit`, with the daemons' logs.
    pub fn wait_moved_to(&self, b: FleetBox, limit: Duration) -> Moved {
        let start = Instant::now();
        let (mut route, mut gateway) = (None, None);
        while start.elapsed() < limit {
            let at = start.elapsed();
            // One look at each direction a round: the same looks say when each moved and
            // whether it carries both ways now (`carried_by` would look again).
            let (down, up) = (self.download_via(), self.gateway_on());
            if route.is_none() && down == Some(b) {
                route = Some(at);
            }
            if gateway.is_none() && up == Some(b) {
                gateway = Some(at);
            }
            if let (Some(route), Some(gateway)) = (route, gateway)
                && down == Some(b)
                && up == Some(b)
            {
                return Moved { route, gateway };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "box {} does not carry the subscriber after {limit:?} (download via {:?}, gateway on \
             {:?})\n{}",
            b.name(),
            self.download_via(),
            self.gateway_on(),
            self.logs()
        );
    }

    /// The routing daemons' and watchers' logs, for a failure's message.
    #[must_use]
    pub fn logs(&self) -> String {
        let mut text = String::new();
        let mut names: Vec<_> = std::fs::read_dir(self.dir())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        names.sort();
        for path in names {
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            text.push_str(&format!("== {}\n", path.display()));
            for line in tail.into_iter().rev() {
                text.push_str(line);
                text.push('\n');
            }
        }
        text
    }

    /// Starts pinging the subscriber from the internet host every 20 ms (50 Hz), `count` times.
    #[must_use]
    pub fn ping_50hz(&self, count: u32) -> Child {
        self.cmd(UP, "ping")
            .args(["-n", "-c", &count.to_string(), "-i", "0.02", "-W", "1"])
            .args(["-I", INTERNET, SUBSCRIBER])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("ping")
    }

    /// Offers UDP from the internet host to the subscriber at `offered` (iperf3's payload rate)
    /// for `secs`: the download through the subscriber's class, to iperf3's server on `port`
    /// from the internet host's `client_port` (a test picks it, so that it knows the flow).
    #[must_use]
    pub fn udp_download(
        &self,
        offered: &str,
        secs: u32,
        port: u16,
        client_port: u16,
    ) -> (Reaped, Child) {
        let port = port.to_string();
        let server = self
            .cmd(SUB, "iperf3")
            .args(["-s", "-1", "-p", &port])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 -s");
        std::thread::sleep(Duration::from_millis(300));
        let client = self
            .cmd(UP, "iperf3")
            .args([
                "-c", SUBSCRIBER, "-B", INTERNET, "-p", &port, "-u", "-l", "1400",
            ])
            .args(["--cport", &client_port.to_string()])
            .args(["-b", offered, "-t", &secs.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 -c");
        (Reaped(server), client)
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.children
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        let _ = Command::new(repo().join("scripts/fleet-lab.sh"))
            .arg("down")
            .env("LAB", &self.name)
            .output();
    }
}

/// A 50 Hz ping's outcome: how many were sent and answered, and the longest run of
/// unanswered ones (× 20 ms: how long the subscriber was cut off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PingLoss {
    /// Sent.
    pub sent: u32,
    /// Answered.
    pub answered: u32,
    /// The longest run of unanswered sequence numbers.
    pub longest_gap: u32,
}

impl PingLoss {
    /// Reads `ping -n`'s output for `sent` pings.
    #[must_use]
    pub fn from_output(text: &str, sent: u32) -> Self {
        let mut seen = vec![false; sent as usize + 1];
        for line in text.lines() {
            if let Some(seq) = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("icmp_seq="))
                .and_then(|s| s.parse::<usize>().ok())
                && seq < seen.len()
            {
                seen[seq] = true;
            }
        }
        let (mut longest, mut run) = (0, 0);
        for &s in &seen[1..] {
            run = if s { 0 } else { run + 1 };
            longest = longest.max(run);
        }
        Self {
            sent,
            answered: seen[1..].iter().filter(|&&s| s).count() as u32,
            longest_gap: longest,
        }
    }

    /// The share lost.
    #[must_use]
    pub fn lost_share(&self) -> f64 {
        f64::from(self.sent - self.answered) / f64::from(self.sent.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_loss_counts_the_longest_gap() {
        let out = "PING x\n64 bytes from x: icmp_seq=1 ttl=63 time=0.1 ms\n\
                   64 bytes from x: icmp_seq=2 ttl=63 time=0.1 ms\n\
                   64 bytes from x: icmp_seq=6 ttl=63 time=0.1 ms\n\
                   64 bytes from x: icmp_seq=8 ttl=63 time=0.1 ms\n";
        let loss = PingLoss::from_output(out, 10);
        assert_eq!(
            loss,
            PingLoss {
                sent: 10,
                answered: 4,
                longest_gap: 3
            }
        );
        assert!((loss.lost_share() - 0.6).abs() < 1e-9);
    }

    #[test]
    fn templates_are_filled_or_refused() {
        assert_eq!(fill("a @X@ b", &[("X", "1".into())]), "a 1 b");
        // Comments may mention @NAMES@.
        assert_eq!(fill("# @Y@ @Z@\nk", &[]), "# @Y@ @Z@\nk");
        assert!(std::panic::catch_unwind(|| fill("a @X@ @Y@", &[])).is_err());
    }
}
