//! A real IPFIX collector in the lab: Debian's `nfcapd` (nfdump 1.7) receiving in the router's
//! namespace, where htbd exports to it, and `nfdump` reading back what it stored, as JSON.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::lab::{Lab, R, Reaped};

/// `nfcapd` listening on `127.0.0.1:port` in the router's namespace, storing under its own
/// directory; stopped (and its file closed) by [`stop`](Self::stop) or on drop.
#[derive(Debug)]
pub struct Nfcapd {
    child: Option<Reaped>,
    dir: PathBuf,
    port: u16,
}

impl Nfcapd {
    /// Starts it, storing in `dir` (made if missing).
    ///
    /// # Panics
    /// When nfcapd cannot be started (`scripts/setup.sh` installs nfdump).
    #[must_use]
    pub fn start(lab: &Lab, port: u16, dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("nfcapd's directory");
        let child = lab
            .cmd(R, "nfcapd")
            .args(["-b", "127.0.0.1", "-p", &port.to_string()])
            .arg("-w")
            .arg(dir)
            .args(["-t", "3600"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Reaped)
            .unwrap_or_else(|e| {
                panic!("cannot start nfcapd (scripts/setup.sh installs nfdump): {e}")
            });
        // Listening once its socket shows in the namespace.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = lab.exec(R, &["ss", "-Hlun", &format!("sport = :{port}")]);
            if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "nfcapd does not listen on port {port} after 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child: Some(child),
            dir: dir.to_owned(),
            port,
        }
    }

    /// The port it listens on.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops it with SIGTERM, which writes out and closes its file, and waits.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.0.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.0.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Every record stored so far (stop it first: the current file is written at stop), as
    /// `nfdump -o json` prints them.
    ///
    /// # Panics
    /// When nfdump cannot be run or prints something that is not JSON.
    #[must_use]
    pub fn records(&self) -> Vec<Value> {
        let out = Command::new("nfdump")
            .arg("-R")
            .arg(&self.dir)
            .args(["-q", "-o", "json"])
            .output()
            .expect("nfdump");
        let text = String::from_utf8_lossy(&out.stdout);
        // nfdump 1.7 prints the records as a JSON array; with -q, without its brackets.
        let body = text
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim()
            .trim_end_matches(',');
        serde_json::from_str::<Vec<Value>>(&format!("[{body}]"))
            .unwrap_or_else(|e| panic!("nfdump -o json ({e}): {text}"))
    }
}

impl Drop for Nfcapd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A number in an nfdump JSON record.
#[must_use]
pub fn number(record: &Value, key: &str) -> u64 {
    record[key].as_u64().unwrap_or(0)
}

/// A record's source and destination addresses (nfdump's `src4_addr` or `src6_addr`).
#[must_use]
pub fn addresses(record: &Value) -> (String, String) {
    let addr = |k4: &str, k6: &str| {
        record[k4]
            .as_str()
            .or_else(|| record[k6].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    (
        addr("src4_addr", "src6_addr"),
        addr("dst4_addr", "dst6_addr"),
    )
}
