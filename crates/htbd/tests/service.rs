//! `dist/htbd.service` is a unit systemd accepts, with the hardening the README promises.
//!
//! Needs `systemd-analyze` (Debian's `systemd` package): `#[ignore]`d by default, run by
//! `scripts/test.sh` (which installs it) — the summary lists it as ignored otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A root for `systemd-analyze --root`: the unit at its installed place, the programs it runs,
/// and the system's unit files (for the targets it names).
fn unit_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for dir in [
        "usr/local/bin",
        "etc/systemd/system",
        "bin",
        "usr/lib/systemd",
    ] {
        std::fs::create_dir_all(r.join(dir)).unwrap();
    }
    std::fs::copy(
        repo().join("dist/htbd.service"),
        r.join("etc/systemd/system/htbd.service"),
    )
    .unwrap();
    // Any executable will do for the check that ExecStart= and ExecReload= can run.
    std::fs::copy("/bin/kill", r.join("bin/kill")).unwrap();
    std::fs::copy("/bin/kill", r.join("usr/local/bin/htbd")).unwrap();
    let copied = Command::new("cp")
        .args(["-a", "/usr/lib/systemd/system"])
        .arg(r.join("usr/lib/systemd/"))
        .status()
        .unwrap();
    assert!(copied.success());
    root
}

fn verify(root: &Path) -> std::process::Output {
    Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .arg("/etc/systemd/system/htbd.service")
        .output()
        .expect("systemd-analyze (apt install systemd)")
}

fn security(root: &Path) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(format!("--root={}", root.display()))
        .arg("htbd.service")
        .output()
        .expect("systemd-analyze (apt install systemd)")
}

#[test]
#[ignore = "needs systemd-analyze (scripts/test.sh installs and runs it)"]
fn the_unit_verifies_and_is_hardened() {
    let root = unit_root();
    let out = verify(root.path());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
    // A broken unit does fail the check (the test can fail).
    let unit = root.path().join("etc/systemd/system/htbd.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    std::fs::write(&unit, text.replace("Type=notify", "Type=notfy")).unwrap();
    let out = verify(root.path());
    assert!(!String::from_utf8_lossy(&out.stderr).trim().is_empty());
    std::fs::write(&unit, &text).unwrap();

    let out = security(root.path());
    let report = String::from_utf8_lossy(&out.stdout);
    let exposure: f64 = report
        .lines()
        .find_map(|l| l.split("Overall exposure level for htbd.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{report}"));
    eprintln!("systemd-analyze security: exposure {exposure} (0 = locked down, 10 = none)");
    assert!(exposure <= 3.0, "exposure {exposure}:\n{report}");
    for line in [
        "Type=notify",
        "WatchdogSec=",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "ProtectSystem=strict",
        "StateDirectory=htbd",
        "RuntimeDirectory=htbd",
    ] {
        assert!(text.contains(line), "the unit lacks {line}");
    }
}
