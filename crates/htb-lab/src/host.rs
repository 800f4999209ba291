//! What the lab needs of this machine: the project's binaries (built here or pointed at by
//! `HTBD_BIN`, `HTB_CLI_BIN`, `HTB_XDP_GEN_BIN`), root, network namespaces and the tools the
//! lab drives.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The project's root: `HTB_REPO`, else where this binary was built from, else the current
/// directory (a binary carried to another machine finds its tree there, not at the build path).
pub(crate) fn repo() -> PathBuf {
    if let Some(root) = std::env::var_os("HTB_REPO") {
        return PathBuf::from(root);
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if built.join("scripts/lab.sh").exists() {
        built
    } else {
        PathBuf::from(".")
    }
}

/// The htbd binary: `HTBD_BIN` (the test command points it at a release build, since shaping a
/// gigabit in a debug build is not a fair test), else `target/release/htbd`, else the debug one.
pub fn htbd_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("HTBD_BIN") {
        return PathBuf::from(bin);
    }
    let release = repo().join("target/release/htbd");
    if release.exists() {
        release
    } else {
        repo().join("target/debug/htbd")
    }
}

/// The htb-cli binary: `HTB_CLI_BIN`, else next to [`htbd_bin`].
pub fn cli_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("HTB_CLI_BIN") {
        return PathBuf::from(bin);
    }
    htbd_bin().with_file_name("htb-cli")
}

pub(crate) fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Why the lab cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1));
    if uid != Some("0") {
        return Some("needs root (network namespaces, XDP)".into());
    }
    for tool in ["ip", "iperf3", "ping", "ethtool", "python3", "setpriv"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            return Some(format!(
                "{tool} is not installed (scripts/setup.sh installs it)"
            ));
        }
    }
    let probe = run(Command::new("ip").args(["netns", "add", "htbt-probe"]));
    let _ = run(Command::new("ip").args(["netns", "del", "htbt-probe"]));
    (!probe.status.success()).then(|| {
        format!(
            "cannot create network namespaces: {}",
            String::from_utf8_lossy(&probe.stderr).trim()
        )
    })
}

/// The AF_XDP traffic generator: `HTB_XDP_GEN_BIN`, else next to [`htbd_bin`].
pub fn gen_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("HTB_XDP_GEN_BIN") {
        return PathBuf::from(bin);
    }
    htbd_bin().with_file_name("htb-xdp-gen")
}
