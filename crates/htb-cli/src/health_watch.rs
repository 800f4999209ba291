//! `htb-cli health-watch`: the small supervisor between htbd's `/health` and a routing daemon.
//! It polls `/health`, and tells BIRD (a command such as `birdc disable subscribers`) and
//! keepalived (a `track_file` it writes) whether this box should carry its subscribers. The
//! routing itself stays with them: BGP withdraws the box's prefixes, VRRP moves the gateway.
//!
//! A box goes down after `fall` failed checks in a row (a refused connection, a timeout, a 503,
//! an uplink named by `--uplink` not up) and comes back only after every check passed for the
//! whole hold-down, so that a box that
//! restarts, or flaps, does not pull its subscribers back and forth. It starts down: nothing is
//! announced before htbd has been healthy for a hold-down. The decisions are [`Watch`]'s, sans
//! IO; [`run`] does the polling and the commands, retrying a command that failed at every check
//! until it succeeds.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether this box should carry its subscribers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announce {
    /// Healthy for a hold-down: announce the routes, claim the gateway.
    Up,
    /// Not healthy (or not yet for a hold-down): withdraw them.
    Down,
}

impl Announce {
    /// The `track_file` value keepalived reads with `weight 0`: 0 is healthy, anything else a
    /// fault.
    #[must_use]
    pub fn track_file_value(self) -> &'static str {
        match self {
            Self::Up => "0\n",
            Self::Down => "1\n",
        }
    }
}

/// The decisions, fed with each check's outcome (sans IO).
#[derive(Clone, Debug)]
pub struct Watch {
    fall: u32,
    hold_down: Duration,
    wanted: Option<Announce>,
    failures: u32,
    healthy_since: Option<Instant>,
}

impl Watch {
    /// A watch that goes down after `fall` failed checks in a row (at least one) and up after
    /// `hold_down` of passing ones.
    #[must_use]
    pub fn new(fall: u32, hold_down: Duration) -> Self {
        Self {
            fall: fall.max(1),
            hold_down,
            wanted: None,
            failures: 0,
            healthy_since: None,
        }
    }

    /// What the box should announce now, after a check at `now` that `passed` (or not): a
    /// change, or `None` when it stays as it was. The first check always decides (down, unless
    /// a zero hold-down lets a passing one announce at once).
    pub fn observe(&mut self, now: Instant, passed: bool) -> Option<Announce> {
        let next = if passed {
            self.failures = 0;
            let since = *self.healthy_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= self.hold_down {
                Announce::Up
            } else {
                self.wanted.unwrap_or(Announce::Down)
            }
        } else {
            self.failures = self.failures.saturating_add(1);
            self.healthy_since = None;
            if self.wanted == Some(Announce::Up) && self.failures < self.fall {
                Announce::Up
            } else {
                Announce::Down
            }
        };
        (self.wanted != Some(next)).then(|| {
            self.wanted = Some(next);
            next
        })
    }

    /// What was decided last.
    #[must_use]
    pub fn wanted(&self) -> Option<Announce> {
        self.wanted
    }
}

/// Why the watcher cannot start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The URL is not `http://HOST:PORT/PATH`.
    #[error("--url {0:?}: expected http://HOST:PORT/PATH (https is not served by htbd)")]
    Url(String),
    /// Its host does not resolve.
    #[error("--url {url:?}: cannot resolve {host:?}: {source}")]
    Resolve {
        /// The URL.
        url: String,
        /// Its host and port.
        host: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Where `/health` is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthUrl {
    addr: SocketAddr,
    host: String,
    path: String,
}

impl HealthUrl {
    /// Reads `http://HOST[:PORT][/PATH]` (port 80, path `/health` when left out).
    ///
    /// # Errors
    /// [`WatchError`] for another scheme, an empty host or one that does not resolve.
    pub fn parse(url: &str) -> Result<Self, WatchError> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| WatchError::Url(url.to_owned()))?;
        let (host, path) = rest
            .find('/')
            .map_or((rest, "/health"), |at| rest.split_at(at));
        if host.is_empty() || path.contains(char::is_whitespace) {
            return Err(WatchError::Url(url.to_owned()));
        }
        let with_port = if host.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']')) {
            host.to_owned()
        } else {
            format!("{host}:80")
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|source| WatchError::Resolve {
                url: url.to_owned(),
                host: with_port.clone(),
                source,
            })?
            .next()
            .ok_or_else(|| WatchError::Url(url.to_owned()))?;
        Ok(Self {
            addr,
            host: host.to_owned(),
            path: path.to_owned(),
        })
    }

    /// One check: `Ok(())` for a 200 within `timeout`, else why not.
    ///
    /// # Errors
    /// The check's failure, in words (refused, timed out, the status and body).
    pub fn check(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut stream =
            TcpStream::connect_timeout(&self.addr, timeout).map_err(|e| e.to_string())?;
        let left = || {
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1))
        };
        stream
            .set_write_timeout(Some(left()))
            .map_err(|e| e.to_string())?;
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.path, self.host
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        // The status line and a line of body are enough; a stuck server is a failure.
        while answer.len() < 4096 {
            stream
                .set_read_timeout(Some(left()))
                .map_err(|e| e.to_string())?;
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(e) => return Err(format!("no answer within {timeout:?} ({e})")),
            }
        }
        verdict(&String::from_utf8_lossy(&answer))
    }
}

/// A `/health` answer's verdict: 200 passes; anything else fails with its status and body.
fn verdict(answer: &str) -> Result<(), String> {
    let status = answer
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok());
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .lines()
        .next()
        .unwrap_or("")
        .trim();
    match status {
        Some(200) => Ok(()),
        Some(code) => Err(format!("{code} {body}")),
        None => Err("not an HTTP answer".into()),
    }
}

/// How [`run`] watches.
#[derive(Clone, Debug)]
pub struct Options {
    /// htbd's `/health`.
    pub url: HealthUrl,
    /// Between checks.
    pub interval: Duration,
    /// For one check.
    pub timeout: Duration,
    /// Failed checks in a row before going down.
    pub fall: u32,
    /// Passing checks for this long before going up.
    pub hold_down: Duration,
    /// Run (by `sh -c`) when going up.
    pub on_up: Option<String>,
    /// Run when going down.
    pub on_down: Option<String>,
    /// Written (atomically) with the [`Announce::track_file_value`] for keepalived.
    pub state_file: Option<PathBuf>,
    /// The most one command may take before it is killed (and retried).
    pub command_timeout: Duration,
    /// Interfaces that must be up too (the uplink): a check fails while one is not, so that
    /// a link that returns waits out the hold-down like a restarted htbd.
    pub uplinks: Vec<String>,
}

/// Whether interface `dev` is up, by the kernel's operational state (`/sys/class/net/DEV/
/// operstate`: `up`, or `unknown` for interfaces that do not report one, such as dummies).
///
/// # Errors
/// Why not, in words.
fn link_up(dev: &str) -> Result<(), String> {
    if dev.is_empty() || dev.contains('/') || dev == "." || dev == ".." {
        return Err(format!("{dev:?} is not an interface name"));
    }
    let path = Path::new("/sys/class/net").join(dev).join("operstate");
    let state = std::fs::read_to_string(&path).map_err(|e| format!("{dev}: {e}"))?;
    operstate_passes(dev, state.trim())
}

fn operstate_passes(dev: &str, state: &str) -> Result<(), String> {
    match state {
        "up" | "unknown" => Ok(()),
        other => Err(format!("{dev} is {other}")),
    }
}

/// One check: `/health`, then every uplink.
fn check(options: &Options) -> Result<(), String> {
    options
        .url
        .check(options.timeout)
        .map_err(|e| format!("/health failed: {e}"))?;
    options.uplinks.iter().try_for_each(|dev| link_up(dev))
}

/// Writes `value` to `path` by a rename, so that keepalived's inotify never reads a half-written
/// file.
fn write_state(path: &Path, value: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, value)?;
    std::fs::rename(&tmp, path)
}

/// Runs `command` by `sh -c`, killed after `timeout`.
fn run_command(command: &str, timeout: Duration) -> Result<(), String> {
    let mut child = Command::new("sh")
        .args(["-c", command])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run sh: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return Err(format!("{status}: {}", err.trim()));
            }
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("killed after {timeout:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Makes the routing daemons see `announce`: the state file, then the command.
fn apply(options: &Options, announce: Announce) -> Result<(), String> {
    if let Some(path) = &options.state_file {
        write_state(path, announce.track_file_value())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let command = match announce {
        Announce::Up => options.on_up.as_deref(),
        Announce::Down => options.on_down.as_deref(),
    };
    command.map_or(Ok(()), |c| {
        run_command(c, options.command_timeout).map_err(|e| format!("`{c}`: {e}"))
    })
}

/// Watches until killed, logging every change on `log`.
pub fn run(options: &Options, log: &mut impl Write) -> ! {
    let started = Instant::now();
    let mut watch = Watch::new(options.fall, options.hold_down);
    // What the routing daemons were last told successfully.
    let mut applied: Option<Announce> = None;
    loop {
        let now = Instant::now();
        let checked = check(options);
        if let Some(next) = watch.observe(now, checked.is_ok()) {
            let why = match (&checked, next) {
                (Err(e), _) => e.clone(),
                (Ok(()), Announce::Up) => {
                    format!("every check passed for {:?}", options.hold_down)
                }
                (Ok(()), Announce::Down) => "waiting for a hold-down of passing checks".into(),
            };
            let _ = writeln!(
                log,
                "htb-cli health-watch: {:.3} s: {} ({why})",
                started.elapsed().as_secs_f64(),
                match next {
                    Announce::Up => "up: announcing",
                    Announce::Down => "down: withdrawing",
                }
            );
        }
        if let Some(wanted) = watch.wanted()
            && applied != Some(wanted)
        {
            let applying = Instant::now();
            match apply(options, wanted) {
                Ok(()) => {
                    applied = Some(wanted);
                    // How long the routing daemons took to be told: a slow failover says
                    // here whether the watcher or what it ran was slow.
                    let _ = writeln!(
                        log,
                        "htb-cli health-watch: {:.3} s: told the routing daemons in {} ms",
                        started.elapsed().as_secs_f64(),
                        applying.elapsed().as_millis()
                    );
                }
                Err(e) => {
                    let _ = writeln!(log, "htb-cli health-watch: {e} (retried at the next check)");
                }
            }
        }
        std::thread::sleep(options.interval.saturating_sub(now.elapsed()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn it_starts_down_and_goes_up_only_after_a_hold_down_of_passing_checks() {
        let t0 = Instant::now();
        let mut w = Watch::new(2, Duration::from_millis(300));
        assert_eq!(w.observe(t0, true), Some(Announce::Down));
        assert_eq!(w.observe(at(t0, 100), true), None);
        // A failure restarts the hold-down.
        assert_eq!(w.observe(at(t0, 200), false), None);
        assert_eq!(w.observe(at(t0, 300), true), None);
        assert_eq!(w.observe(at(t0, 500), true), None);
        assert_eq!(w.observe(at(t0, 600), true), Some(Announce::Up));
        assert_eq!(w.observe(at(t0, 700), true), None);
        assert_eq!(w.wanted(), Some(Announce::Up));
    }

    #[test]
    fn it_goes_down_after_fall_failures_in_a_row_not_one() {
        let t0 = Instant::now();
        let mut w = Watch::new(3, Duration::ZERO);
        assert_eq!(w.observe(t0, true), Some(Announce::Up));
        assert_eq!(w.observe(at(t0, 1), false), None);
        assert_eq!(w.observe(at(t0, 2), false), None);
        assert_eq!(w.observe(at(t0, 3), true), None);
        assert_eq!(w.observe(at(t0, 4), false), None);
        assert_eq!(w.observe(at(t0, 5), false), None);
        assert_eq!(w.observe(at(t0, 6), false), Some(Announce::Down));
        // A zero hold-down comes back at the first passing check.
        assert_eq!(w.observe(at(t0, 7), true), Some(Announce::Up));
    }

    #[test]
    fn a_flapping_box_stays_down() {
        let t0 = Instant::now();
        let mut w = Watch::new(1, Duration::from_secs(5));
        assert_eq!(w.observe(t0, false), Some(Announce::Down));
        for i in 1..100 {
            assert_eq!(w.observe(at(t0, i * 100), i % 10 != 0), None, "check {i}");
        }
    }

    #[test]
    fn a_failing_first_check_is_down() {
        let mut w = Watch::new(5, Duration::ZERO);
        assert_eq!(w.observe(Instant::now(), false), Some(Announce::Down));
    }

    #[test]
    fn urls_are_read_with_their_defaults_and_others_refused() {
        let u = HealthUrl::parse("http://127.0.0.1:9469/health").unwrap();
        assert_eq!(u.addr, "127.0.0.1:9469".parse().unwrap());
        assert_eq!(u.path, "/health");
        let u = HealthUrl::parse("http://127.0.0.1").unwrap();
        assert_eq!((u.addr.port(), u.path.as_str()), (80, "/health"));
        let u = HealthUrl::parse("http://[::1]:9469/x").unwrap();
        assert_eq!(u.addr, "[::1]:9469".parse().unwrap());
        let u = HealthUrl::parse("http://[::1]/health").unwrap();
        assert_eq!(u.addr.port(), 80);
        for bad in [
            "https://127.0.0.1/health",
            "127.0.0.1:9469",
            "http:///health",
        ] {
            assert!(HealthUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_a_200_passes() {
        assert_eq!(
            verdict("HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok: every worker"),
            Ok(())
        );
        assert_eq!(
            verdict("HTTP/1.1 503 Service Unavailable\r\n\r\ndown: hung\n"),
            Err("503 down: hung".into())
        );
        assert!(verdict("").is_err());
        assert!(verdict("SSH-2.0-OpenSSH").is_err());
    }

    /// A real listener: a 200 passes, a 503 fails with its body, a closed port and a server
    /// that never answers fail within the timeout.
    #[test]
    fn checks_against_a_real_listener() {
        let serve = |answer: &'static str| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            std::thread::spawn(move || {
                if let Ok((mut s, _)) = l.accept() {
                    let mut buf = [0u8; 512];
                    let _ = s.read(&mut buf);
                    if !answer.is_empty() {
                        let _ = s.write_all(answer.as_bytes());
                    } else {
                        std::thread::sleep(Duration::from_secs(2));
                    }
                }
            });
            HealthUrl::parse(&format!("http://127.0.0.1:{port}/health")).unwrap()
        };
        let timeout = Duration::from_millis(300);
        assert_eq!(serve("HTTP/1.1 200 OK\r\n\r\nok\n").check(timeout), Ok(()));
        let err = serve("HTTP/1.1 503 Service Unavailable\r\n\r\ndown: x\n")
            .check(timeout)
            .unwrap_err();
        assert_eq!(err, "503 down: x");
        let started = Instant::now();
        let err = serve("").check(timeout).unwrap_err();
        assert!(err.contains("no answer"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(1));
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = HealthUrl::parse(&format!("http://127.0.0.1:{closed}/health")).unwrap();
        assert!(url.check(timeout).is_err());
    }

    #[test]
    fn links_pass_when_up_or_unknown() {
        assert_eq!(operstate_passes("up0", "up"), Ok(()));
        assert_eq!(operstate_passes("dummy0", "unknown"), Ok(()));
        assert_eq!(
            operstate_passes("up0", "lowerlayerdown"),
            Err("up0 is lowerlayerdown".into())
        );
        assert!(operstate_passes("up0", "down").is_err());
        // The loopback reports `unknown`; a missing interface or a path is refused.
        assert_eq!(link_up("lo"), Ok(()));
        assert!(link_up("htb-no-such-link").is_err());
        assert!(link_up("../lo").is_err());
    }

    #[test]
    fn the_state_file_is_replaced_whole_and_commands_report_failures() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("healthy");
        write_state(&path, Announce::Down.track_file_value()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n");
        write_state(&path, Announce::Up.track_file_value()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0\n");
        assert!(!dir.path().join("healthy.tmp").exists());
        assert_eq!(run_command("true", Duration::from_secs(5)), Ok(()));
        let err = run_command("echo nope >&2; exit 3", Duration::from_secs(5)).unwrap_err();
        assert!(err.contains("nope"), "{err}");
        let err = run_command("sleep 5", Duration::from_millis(100)).unwrap_err();
        assert!(err.contains("killed"), "{err}");
    }
}
