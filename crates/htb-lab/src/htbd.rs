//! htbd in a lab: started with a config in a temporary directory, asked through htb-cli,
//! signalled, restarted from its state; stopped (SIGKILL) when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::host::{cli_bin, htbd_bin, run};
use crate::lab::{Lab, N1, R};

/// htbd running in the lab's router namespace.
#[derive(Debug)]
pub struct Htbd {
    child: Option<Child>,
    /// Its stderr: the log.
    pub log: PathBuf,
    /// The config file it runs with.
    pub config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Htbd {
    /// Pings `dst` from node-1 120 times, one every 50 ms, while this htbd is stopped (SIGSTOP)
    /// for 3 s in the middle; returns how many replies came within 300 ms (a later one is as
    /// good as lost to a user). The fail-open tests' measurement, IPv4 or IPv6 by `dst`.
    ///
    /// # Panics
    /// When ping cannot run or htbd cannot be signalled.
    pub fn pings_answered_across_a_stop(&self, lab: &Lab, dst: &str) -> usize {
        let mut ping = lab.cmd(N1, "ping");
        if dst.contains(':') {
            ping.arg("-6");
        }
        let pinger = ping
            .args(["-n", "-c", "120", "-i", "0.05", "-W", "1", dst])
            .stdout(Stdio::piped())
            .spawn()
            .expect("ping");
        std::thread::sleep(Duration::from_millis(1500));
        self.signal("STOP");
        std::thread::sleep(Duration::from_secs(3));
        self.signal("CONT");
        let out = pinger.wait_with_output().expect("ping");
        let rtts = crate::rtts::Rtts::from_ping_output(&String::from_utf8_lossy(&out.stdout), 120);
        let prompt = (1..=120)
            .filter(|&i| rtts.quantile(f64::from(i) / 120.0) <= 300.0)
            .count();
        eprintln!(
            "{prompt} of 120 pings to {dst} answered within 300 ms ({} in all, max {} ms)",
            rtts.received(),
            rtts.quantile(1.0)
        );
        prompt
    }

    /// Waits until port `dev` holds no packets (a measurement starting with last
    /// phase's backlog still queued would share the class with it), up to ten seconds.
    ///
    /// # Panics
    /// When the backlog does not drain.
    pub fn wait_drained(&self, dev: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.cli_ok(&["-s", "-j", "qdisc", "show", "dev", dev]);
            let list: serde_json::Value = serde_json::from_str(&out).expect("qdisc show -j");
            let qlen = list[0]["qlen"].as_u64().unwrap_or(0);
            if qlen == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{dev} still holds {qlen} packets after 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Writes `config` (with `@SOCKET@` and `@STATE@` replaced by temporary paths) and starts
    /// htbd with it; waits until it logs that it runs.
    pub fn start(lab: &Lab, config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(lab, config, dir)
    }

    /// As [`start`](Self::start), keeping state in `dir` (to test restarts).
    pub fn start_in(lab: &Lab, config: &str, dir: tempfile::TempDir) -> Self {
        Self::start_with(lab, config, dir, &[])
    }

    /// As [`start_in`](Self::start_in), with extra environment variables (`HTBD_FAULTS`).
    pub fn start_with(
        lab: &Lab,
        config: &str,
        dir: tempfile::TempDir,
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_under(lab, config, dir, env, &[])
    }

    /// As [`start_with`](Self::start_with), run through `wrapper` (`setpriv …`), which gets
    /// htbd's path and arguments after its own.
    pub fn start_under(
        lab: &Lab,
        config: &str,
        dir: tempfile::TempDir,
        env: &[(&str, &str)],
        wrapper: &[&str],
    ) -> Self {
        let bin = htbd_bin();
        let (program, args) = match wrapper.split_first() {
            Some((program, args)) => (*program, args.to_vec()),
            None => (bin.to_str().unwrap(), Vec::new()),
        };
        let mut command = lab.cmd(R, program);
        command
            .args(args)
            .args(wrapper.first().map(|_| bin.to_str().unwrap()));
        Self::spawn(command, config, dir, env)
    }

    /// As [`start_with`](Self::start_with), in network namespace `ns` (a lab of several
    /// boxes: [`crate::fleet`]).
    pub fn start_in_namespace(
        ns: &str,
        config: &str,
        dir: tempfile::TempDir,
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", ns]).arg(htbd_bin());
        Self::spawn(command, config, dir, env)
    }

    /// Runs `command` (htbd, in its namespace) with `--config` and the config written into
    /// `dir`; waits until it logs that it runs.
    fn spawn(
        mut command: Command,
        config: &str,
        dir: tempfile::TempDir,
        env: &[(&str, &str)],
    ) -> Self {
        let path = dir.path().join("htbd.toml");
        std::fs::write(&path, with_paths(config, dir.path())).unwrap();
        let log = dir.path().join("htbd.log");
        let child = command
            .args(["--config", path.to_str().unwrap()])
            // `HTBD_LOG` (e.g. `info,htb_xdp=debug`) for a diagnostic run; tests read info.
            .env(
                "RUST_LOG",
                std::env::var("HTBD_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn htbd");
        let mut htbd = Self {
            child: Some(child),
            log,
            config: path,
            _dir: dir,
        };
        htbd.wait_for_log("htbd running", Duration::from_secs(10));
        htbd
    }

    /// Waits until the log contains `needle`; panics with the log otherwise.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.log_text().contains(needle) {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "htbd exited ({status}) before logging {needle:?}:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "htbd did not log {needle:?} within {timeout:?}:\n{}",
            self.log_text()
        );
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The temporary directory holding the config, log, socket and state.
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }

    /// The control socket.
    pub fn socket(&self) -> PathBuf {
        self._dir.path().join("htbd.sock")
    }

    /// Runs `htb-cli --socket SOCKET ARGS…` (outside the lab's namespaces: the socket is a
    /// file) and returns its output.
    pub fn cli(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(cli_bin());
        cmd.arg("--socket").arg(self.socket()).args(args);
        run(&mut cmd)
    }

    /// Runs htb-cli and panics with its stderr unless it succeeds; returns stdout.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "htb-cli {}: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            self.log_text()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The data plane's counters (`htb-cli -j status`): frames, ports, XDP verdicts.
    ///
    /// # Panics
    /// When htb-cli fails or answers something else.
    pub fn status(&self) -> htb_ipc::Status {
        status_at(&self.socket())
    }

    /// Counters of class `id` on `dev` (tc's `-s -j class show` object: `stats.drops`,
    /// `stats.overlimits`, `stats.packets` …).
    ///
    /// # Panics
    /// When htb-cli fails or the class does not exist.
    pub fn class_stats(&self, dev: &str, id: &str) -> serde_json::Value {
        let out = self.cli_ok(&["-s", "-j", "class", "show", "dev", dev, "classid", id]);
        let list: serde_json::Value = serde_json::from_str(&out).expect("class show -j");
        list.as_array()
            .and_then(|l| l.first())
            .map(|c| c["stats"].clone())
            .unwrap_or_else(|| panic!("no class {id} on {dev}: {out}"))
    }

    /// Proves that class `id` on `dev` was saturated in a measurement: its queue dropped or it
    /// hit its ceiling since `before` (a [`class_stats`](Self::class_stats) snapshot).
    ///
    /// # Panics
    /// When neither counter moved: the class had spare capacity, so a rate measured through it
    /// says nothing about shaping accuracy.
    pub fn assert_class_saturated(&self, dev: &str, id: &str, before: &serde_json::Value) {
        let after = self.class_stats(dev, id);
        let delta =
            |key: &str| after[key].as_u64().unwrap_or(0) - before[key].as_u64().unwrap_or(0);
        let (drops, overlimits) = (delta("drops"), delta("overlimits"));
        eprintln!("class {id} on {dev}: {drops} drops, {overlimits} overlimits in the window");
        assert!(
            drops > 0 || overlimits > 0,
            "premise failed: class {id} on {dev} neither dropped nor hit its limit, so it was \
             not saturated: {after}"
        );
    }

    /// The process id of htbd.
    ///
    /// # Panics
    /// When htbd was already stopped.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("htbd is running").id()
    }

    /// Sends `signal` (`"HUP"`, `"STOP"`, …) to htbd.
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill -{signal} failed");
    }

    /// Rewrites the config file (placeholders as in [`start`](Self::start)), sends SIGHUP and
    /// waits for htbd to log the outcome; returns that log line.
    ///
    /// # Panics
    /// When htbd logs nothing about it within 10 s.
    pub fn reload(&mut self, config: &str) -> String {
        std::fs::write(&self.config, with_paths(config, self.dir())).unwrap();
        let before = self.log_text().matches("SIGHUP:").count();
        self.signal("HUP");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let log = self.log_text();
            if let Some(line) = log.lines().filter(|l| l.contains("SIGHUP:")).nth(before) {
                return line.to_owned();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("htbd logged nothing about SIGHUP:\n{}", self.log_text());
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops htbd (SIGKILL if it still runs) and hands back its directory, for a restart.
    pub fn into_dir(mut self) -> tempfile::TempDir {
        self.kill9();
        std::mem::replace(&mut self._dir, tempfile::tempdir().unwrap())
    }

    /// SIGTERM and wait; returns the exit status and keeps the temp dir for a restart.
    pub fn terminate(mut self) -> (std::process::ExitStatus, tempfile::TempDir) {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let status = child.wait().expect("wait htbd");
        let dir = std::mem::replace(&mut self._dir, tempfile::tempdir().unwrap());
        (status, dir)
    }
}

impl Drop for Htbd {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The status of the htbd listening on `socket` (`htb-cli -j status`), waited for up to a
/// minute: htbd answers once the request before it is done, and at a million subscribers on
/// two loaded vCPUs that can be a batch's last seconds (the answer's 10 s default failed a
/// `scale` run right after its import).
///
/// # Panics
/// When htb-cli fails or answers something else.
pub(crate) fn status_at(socket: &Path) -> htb_ipc::Status {
    let out = run(Command::new(cli_bin()).arg("--socket").arg(socket).args([
        "--timeout",
        "60",
        "-j",
        "status",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "htb-cli -j status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("htb-cli -j status: {e}: {text}"))
}

/// `config` with `@SOCKET@` and `@STATE@` replaced by paths in `dir`.
fn with_paths(config: &str, dir: &Path) -> String {
    config
        .replace("@SOCKET@", &dir.join("htbd.sock").display().to_string())
        .replace("@STATE@", &dir.join("state").display().to_string())
}

/// Runs htbd with `config` expecting it to fail; returns its stderr.
pub fn htbd_fails(lab: &Lab, config: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, with_paths(config, dir.path())).unwrap();
    let out = run(lab
        .cmd(R, htbd_bin().to_str().unwrap())
        .args(["--config", path.to_str().unwrap()]));
    assert!(!out.status.success(), "htbd should have failed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}
