//! A real Prometheus server (Debian's `prometheus`, which `scripts/setup.sh` installs) scraping
//! one target for a lab test, and PromQL queries against it over its HTTP API.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::webdriver::{free_port, loopback_agent};

/// The server.
pub const PROMETHEUS: &str = "/usr/bin/prometheus";

/// Why Prometheus did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    /// The package is missing.
    #[error("{PROMETHEUS} is not installed: run scripts/setup.sh (Debian's prometheus)")]
    NotInstalled,
    /// It did not start, or not within its time.
    #[error("prometheus did not start: {0}")]
    Start(String),
    /// The HTTP exchange failed.
    #[error("asking prometheus: {0}")]
    Transport(String),
    /// A query was refused.
    #[error("PromQL {query:?}: {error}")]
    Query {
        /// The query.
        query: String,
        /// Prometheus's words.
        error: String,
    },
    /// The target did not come up.
    #[error("the target {target} is not up after {waited:?}: {last}")]
    NotUp {
        /// The target.
        target: SocketAddr,
        /// How long it was given.
        waited: Duration,
        /// Its health and last error as Prometheus saw them.
        last: String,
    },
}

type Result<T> = std::result::Result<T, PrometheusError>;

/// One series of a query's answer: its labels and value.
pub type Row = (serde_json::Map<String, Value>, f64);

/// A running Prometheus; dropping it stops it (its data is in a temporary directory).
#[derive(Debug)]
pub struct Prometheus {
    child: Child,
    base: String,
    target: SocketAddr,
    agent: ureq::Agent,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Whether it is installed.
    #[must_use]
    pub fn available() -> bool {
        Path::new(PROMETHEUS).exists()
    }

    /// Starts Prometheus scraping `target`'s `/metrics` every `interval`, sending the token in
    /// `token_file` as a bearer token when given; waits until it is ready.
    ///
    /// # Errors
    /// [`PrometheusError`]: not installed, or not ready within 20 s.
    pub fn start(
        target: SocketAddr,
        interval: Duration,
        token_file: Option<&Path>,
    ) -> Result<Self> {
        if !Self::available() {
            return Err(PrometheusError::NotInstalled);
        }
        let dir = tempfile::tempdir().map_err(|e| PrometheusError::Start(e.to_string()))?;
        let port = free_port().map_err(|e| PrometheusError::Start(e.to_string()))?;
        // Prometheus's durations are whole units: `500ms`, not `0.5s`.
        let ms = interval.as_millis().max(1);
        let auth = token_file.map_or_else(String::new, |f| {
            format!(
                "    authorization:\n      type: Bearer\n      credentials_file: {}\n",
                f.display()
            )
        });
        let config = format!(
            "global:\n  scrape_interval: {ms}ms\n  scrape_timeout: {ms}ms\n\
             scrape_configs:\n  - job_name: htbd\n    metrics_path: /metrics\n{auth}\
             \x20   static_configs:\n      - targets: [\"{target}\"]\n"
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).map_err(|e| PrometheusError::Start(e.to_string()))?;
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| PrometheusError::Start(e.to_string()))?;
        let mut prometheus = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            target,
            agent: loopback_agent(Duration::from_secs(10)),
            _dir: dir,
        };
        let started = Instant::now();
        while !prometheus.ready() {
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                return Err(PrometheusError::Start(format!("it exited: {status}")));
            }
            if started.elapsed() > Duration::from_secs(20) {
                return Err(PrometheusError::Start("not ready within 20 s".into()));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(prometheus)
    }

    fn ready(&self) -> bool {
        self.agent
            .get(format!("{}/-/ready", self.base))
            .call()
            .is_ok_and(|r| r.status() == 200)
    }

    fn get(&self, path_and_query: &str) -> Result<Value> {
        let url = format!("{}{path_and_query}", self.base);
        let mut response = self
            .agent
            .get(&url)
            .call()
            .map_err(|e| PrometheusError::Transport(format!("{url}: {e}")))?;
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| PrometheusError::Transport(format!("{url}: {e}")))?;
        serde_json::from_str(&text)
            .map_err(|e| PrometheusError::Transport(format!("{url}: {e}: {text}")))
    }

    /// The target's health (`up`, `down`, `unknown`; `None` before Prometheus lists it) and
    /// the last scrape's error.
    ///
    /// # Errors
    /// [`PrometheusError::Transport`].
    pub fn target_health(&self) -> Result<(Option<String>, String)> {
        let targets = self.get("/api/v1/targets?state=active")?;
        let ours = targets["data"]["activeTargets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| {
                t["scrapeUrl"]
                    .as_str()
                    .is_some_and(|u| u.contains(&self.target.to_string()))
            })
            .cloned()
            .unwrap_or(Value::Null);
        Ok((
            ours["health"].as_str().map(str::to_owned),
            ours["lastError"].as_str().unwrap_or_default().to_owned(),
        ))
    }

    /// Waits until the last scrape of the target succeeded.
    ///
    /// # Errors
    /// [`PrometheusError::NotUp`] with the target's last error.
    pub fn wait_target_up(&self, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            let (health, error) = self.target_health()?;
            if health.as_deref() == Some("up") {
                return Ok(());
            }
            if started.elapsed() > timeout {
                return Err(PrometheusError::NotUp {
                    target: self.target,
                    waited: timeout,
                    last: format!(
                        "health {} ({error})",
                        health.as_deref().unwrap_or("not listed yet")
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// An instant PromQL query now.
    ///
    /// # Errors
    /// [`PrometheusError`]: refused, or an answer that is not a vector of numbers.
    pub fn query(&self, promql: &str) -> Result<Vec<Row>> {
        self.query_path(promql, &format!("/api/v1/query?query={}", encode(promql)))
    }

    /// An instant PromQL query at unix time `at` (seconds).
    ///
    /// # Errors
    /// As [`query`](Self::query).
    pub fn query_at(&self, promql: &str, at: f64) -> Result<Vec<Row>> {
        self.query_path(
            promql,
            &format!("/api/v1/query?query={}&time={at:.3}", encode(promql)),
        )
    }

    fn query_path(&self, promql: &str, path: &str) -> Result<Vec<Row>> {
        let answer = self.get(path)?;
        if answer["status"] != "success" {
            return Err(PrometheusError::Query {
                query: promql.to_owned(),
                error: answer["error"]
                    .as_str()
                    .unwrap_or("no error given")
                    .to_owned(),
            });
        }
        let bad = |what: &str| PrometheusError::Query {
            query: promql.to_owned(),
            error: format!("{what} in {answer}"),
        };
        answer["data"]["result"]
            .as_array()
            .ok_or_else(|| bad("no result list"))?
            .iter()
            .map(|row| {
                let value = row["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok())
                    .ok_or_else(|| bad("a value that is not a number"))?;
                let labels = row["metric"].as_object().cloned().unwrap_or_default();
                Ok((labels, value))
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter (RFC 3986's unreserved characters stay).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A scrape target on loopback: `lab_metric 42` for requests that carry `token`, 401 for
    /// others.
    fn target(token: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut buf = [0u8; 8192];
                let n = stream.read(&mut buf).unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
                let (status, body) = if head.contains(&format!("authorization: bearer {token}")) {
                    ("200 OK", "# TYPE lab_metric gauge\nlab_metric 42\n")
                } else {
                    ("401 Unauthorized", "token please\n")
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        addr
    }

    #[test]
    fn prometheus_scrapes_with_the_token_and_answers_promql() {
        assert!(
            Prometheus::available(),
            "{PROMETHEUS} is missing: run scripts/setup.sh"
        );
        let token = "lab-token-0123456789abcdef";
        let addr = target("lab-token-0123456789abcdef");
        // Without the token the target refuses, and the wait says so.
        let without = Prometheus::start(addr, Duration::from_millis(500), None).unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        let (health, error) = loop {
            let (health, error) = without.target_health().unwrap();
            if health.as_deref() == Some("down") || Instant::now() > deadline {
                break (health, error);
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(health.as_deref(), Some("down"), "{error}");
        assert!(error.contains("401"), "{error}");
        drop(without);

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, format!("{token}\n")).unwrap();
        let prometheus = Prometheus::start(addr, Duration::from_millis(500), Some(&file)).unwrap();
        prometheus.wait_target_up(Duration::from_secs(15)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let rows = loop {
            let rows = prometheus.query("lab_metric{job=\"htbd\"}").unwrap();
            if !rows.is_empty() || Instant::now() > deadline {
                break rows;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].1, 42.0);
        assert_eq!(rows[0].0["instance"], addr.to_string());
        let e = prometheus.query("rate(up[").unwrap_err().to_string();
        assert!(e.contains("PromQL"), "{e}");
        assert_eq!(encode("a{b=\"c\"} 1"), "a%7Bb%3D%22c%22%7D%201");
    }
}
