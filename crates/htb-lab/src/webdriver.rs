//! A headless Chromium for the console's lab tests, driven over W3C WebDriver by Debian's
//! `chromedriver` (packages `chromium` and `chromium-driver`, which `scripts/setup.sh`
//! installs): open a page, find elements by CSS, type, click, wait for text, save screenshots.
//! Blocking, as the lab tests are.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// The browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Its WebDriver server.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The W3C's key for an element reference in a JSON answer.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Why the browser did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// The packages are missing.
    #[error("{0} is not installed: run scripts/setup.sh (Debian's chromium and chromium-driver)")]
    NotInstalled(&'static str),
    /// chromedriver did not start or answer.
    #[error("chromedriver did not start: {0}")]
    Start(String),
    /// The HTTP exchange with chromedriver failed.
    #[error("talking to chromedriver: {0}")]
    Transport(String),
    /// WebDriver refused the command.
    #[error("webdriver: {error}: {message}")]
    WebDriver {
        /// The W3C error code (`no such element`, …).
        error: String,
        /// Its message.
        message: String,
    },
    /// A wait ran out.
    #[error("waited {waited:?} for {what}; last seen: {seen}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
        /// What was there at the end.
        seen: String,
    },
    /// Writing a screenshot failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

type Result<T> = std::result::Result<T, BrowserError>;

/// A headless Chromium session; dropping it ends the session and stops chromedriver.
#[derive(Debug)]
pub struct Browser {
    driver: Child,
    /// Chromium's profile and `TMPDIR` (dropped after the driver: fields drop in order).
    _scratch: tempfile::TempDir,
    base: String,
    agent: ureq::Agent,
}

/// An element of the current page.
#[derive(Debug)]
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

/// An HTTP client for a server this lab started on loopback: error statuses are answers (a
/// WebDriver or PromQL error comes in the body), each exchange within `timeout`.
pub(crate) fn loopback_agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// A free TCP port on loopback (bound, then released for the child to take).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Browser {
    /// Whether Chromium and chromedriver are installed.
    #[must_use]
    pub fn available() -> bool {
        Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists()
    }

    /// Starts chromedriver and a headless Chromium session (1280×900).
    ///
    /// # Errors
    /// [`BrowserError`]: not installed, or chromedriver does not come up within 10 s.
    pub fn start() -> Result<Self> {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            if !Path::new(binary).exists() {
                return Err(BrowserError::NotInstalled(binary));
            }
        }
        let port = free_port().map_err(|e| BrowserError::Start(e.to_string()))?;
        // Chromium's profile and scratch directories in one of ours, gone with the browser
        // (left in /tmp, a run's would pile up there).
        let scratch = tempfile::tempdir().map_err(|e| BrowserError::Start(e.to_string()))?;
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .env("TMPDIR", scratch.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| BrowserError::Start(e.to_string()))?;
        let profile = scratch.path().join("profile");
        let mut browser = Self {
            driver,
            _scratch: scratch,
            base: format!("http://127.0.0.1:{port}"),
            agent: loopback_agent(Duration::from_secs(60)),
        };
        let started = Instant::now();
        loop {
            let ready = browser
                .request("GET", "/status", None)
                .is_ok_and(|v| v["ready"] == true);
            if ready {
                break;
            }
            if started.elapsed() > Duration::from_secs(10) {
                return Err(BrowserError::Start(format!(
                    "{CHROMEDRIVER} did not answer on port {port} within 10 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let session = browser.request(
            "POST",
            "/session",
            Some(json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": CHROMIUM,
                    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--window-size=1280,900",
                             format!("--user-data-dir={}", profile.display())],
                },
            }}})),
        )?;
        let id = session["sessionId"]
            .as_str()
            .ok_or_else(|| BrowserError::Start(format!("no session id in {session}")))?;
        browser.base = format!("{}/session/{id}", browser.base);
        Ok(browser)
    }

    /// One WebDriver command: its `value`, or the error it answered.
    fn request(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let transport = |e: ureq::Error| BrowserError::Transport(format!("{method} {url}: {e}"));
        let mut response = match method {
            "GET" => self.agent.get(&url).call().map_err(transport)?,
            "DELETE" => self.agent.delete(&url).call().map_err(transport)?,
            _ => self
                .agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or_else(|| json!({})).to_string())
                .map_err(transport)?,
        };
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| BrowserError::Transport(format!("{method} {url}: {e}")))?;
        let answer: Value = serde_json::from_str(&text)
            .map_err(|e| BrowserError::Transport(format!("{method} {url}: {e}: {text}")))?;
        let value = answer["value"].clone();
        if let Some(error) = value.get("error").and_then(Value::as_str) {
            return Err(BrowserError::WebDriver {
                error: error.to_owned(),
                message: value["message"].as_str().unwrap_or_default().to_owned(),
            });
        }
        Ok(value)
    }

    /// Opens `url`.
    ///
    /// # Errors
    /// [`BrowserError`].
    pub fn goto(&self, url: &str) -> Result<()> {
        self.request("POST", "/url", Some(json!({ "url": url })))
            .map(drop)
    }

    /// The page's title.
    ///
    /// # Errors
    /// [`BrowserError`].
    pub fn title(&self) -> Result<String> {
        Ok(self
            .request("GET", "/title", None)?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// The first element matching `css`.
    ///
    /// # Errors
    /// [`BrowserError::WebDriver`] `no such element` when there is none.
    pub fn find(&self, css: &str) -> Result<Element<'_>> {
        let found = self.request(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        )?;
        Ok(self.element(&found))
    }

    /// Every element matching `css`.
    ///
    /// # Errors
    /// [`BrowserError`].
    pub fn find_all(&self, css: &str) -> Result<Vec<Element<'_>>> {
        let found = self.request(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        )?;
        Ok(found
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| self.element(v))
            .collect())
    }

    fn element(&self, found: &Value) -> Element<'_> {
        Element {
            browser: self,
            id: found[ELEMENT_KEY].as_str().unwrap_or_default().to_owned(),
        }
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    ///
    /// # Errors
    /// [`BrowserError`].
    pub fn execute(&self, script: &str, args: &[Value]) -> Result<Value> {
        self.request(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Polls every 100 ms until an element matching `css` has a text that `ok` accepts;
    /// returns that text.
    ///
    /// # Errors
    /// [`BrowserError::Timeout`] with the last text seen (or why there was none).
    pub fn wait_for(
        &self,
        css: &str,
        ok: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<String> {
        let started = Instant::now();
        loop {
            let seen = self.find(css).and_then(|e| e.text());
            if let Ok(text) = &seen
                && ok(text)
            {
                return Ok(text.clone());
            }
            if started.elapsed() > timeout {
                return Err(BrowserError::Timeout {
                    what: format!("{css} to show what was expected"),
                    waited: timeout,
                    seen: match seen {
                        Ok(text) => format!("{text:?}"),
                        Err(e) => e.to_string(),
                    },
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Saves the visible page as a PNG at `path`.
    ///
    /// # Errors
    /// [`BrowserError`].
    pub fn screenshot(&self, path: &Path) -> Result<()> {
        let data = self.request("GET", "/screenshot", None)?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap_or_default())
            .map_err(|e| BrowserError::Transport(format!("screenshot: {e}")))?;
        std::fs::write(path, png).map_err(|source| BrowserError::Write {
            path: path.display().to_string(),
            source,
        })
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.request("DELETE", "", None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Element<'_> {
    fn path(&self, what: &str) -> String {
        format!("/element/{}/{what}", self.id)
    }

    /// Its visible text.
    ///
    /// # Errors
    /// [`BrowserError`] (a stale element: the page re-rendered it).
    pub fn text(&self) -> Result<String> {
        Ok(self
            .browser
            .request("GET", &self.path("text"), None)?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// An attribute (`None`: it has none).
    ///
    /// # Errors
    /// [`BrowserError`].
    pub fn attribute(&self, name: &str) -> Result<Option<String>> {
        let value = self
            .browser
            .request("GET", &self.path(&format!("attribute/{name}")), None)?;
        Ok(value.as_str().map(str::to_owned))
    }

    /// Clicks it.
    ///
    /// # Errors
    /// [`BrowserError`].
    pub fn click(&self) -> Result<()> {
        self.browser
            .request("POST", &self.path("click"), Some(json!({})))
            .map(drop)
    }

    /// Empties it (an input's value).
    ///
    /// # Errors
    /// [`BrowserError`].
    pub fn clear(&self) -> Result<()> {
        self.browser
            .request("POST", &self.path("clear"), Some(json!({})))
            .map(drop)
    }

    /// Types `text` into it.
    ///
    /// # Errors
    /// [`BrowserError`].
    pub fn send_keys(&self, text: &str) -> Result<()> {
        self.browser
            .request("POST", &self.path("value"), Some(json!({ "text": text })))
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Serves `page` to every connection on a loopback port, until the test ends.
    fn serve(page: &'static str) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{page}",
                    page.len()
                );
            }
        });
        port
    }

    #[test]
    fn chromium_loads_a_page_clicks_waits_and_takes_a_screenshot() {
        assert!(
            Browser::available(),
            "{CHROMIUM} or {CHROMEDRIVER} is missing: run scripts/setup.sh"
        );
        let port = serve(
            "<!doctype html><title>lab page</title><p id=out>before</p>\
             <input id=in><button id=go onclick=\"setTimeout(() => \
             document.getElementById('out').textContent = 'after ' + \
             document.getElementById('in').value, 300)\">go</button>",
        );
        let browser = Browser::start().unwrap();
        browser.goto(&format!("http://127.0.0.1:{port}/")).unwrap();
        assert_eq!(browser.title().unwrap(), "lab page");
        assert_eq!(browser.find("#out").unwrap().text().unwrap(), "before");
        browser.find("#in").unwrap().send_keys("typed").unwrap();
        browser.find("#go").unwrap().click().unwrap();
        let text = browser
            .wait_for("#out", |t| t.starts_with("after"), Duration::from_secs(5))
            .unwrap();
        assert_eq!(text, "after typed");
        assert_eq!(browser.find_all("p").unwrap().len(), 1);
        assert_eq!(
            browser
                .execute("return arguments[0] + 1", &[json!(41)])
                .unwrap(),
            json!(42)
        );
        let missing = browser.find("#nothing").unwrap_err().to_string();
        assert!(missing.contains("no such element"), "{missing}");
        let timeout = browser
            .wait_for("#out", |t| t == "never", Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(timeout.contains("\"after typed\""), "{timeout}");
        let dir = tempfile::tempdir().unwrap();
        let shot = dir.path().join("page.png");
        browser.screenshot(&shot).unwrap();
        let png = std::fs::read(&shot).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }
}
