//! `dist/htbd.service` and `dist/htbd-health-watch.service` are units systemd accepts, with
//! the hardening the book promises (`docs/service.md`).
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
    std::fs::create_dir_all(r.join("usr/sbin")).unwrap();
    for unit in ["htbd.service", "htbd-health-watch.service"] {
        std::fs::copy(
            repo().join("dist").join(unit),
            r.join("etc/systemd/system").join(unit),
        )
        .unwrap();
    }
    // Any executable will do for the check that ExecStart= and ExecReload= can run.
    for program in [
        "bin/kill",
        "bin/sh",
        "usr/local/bin/htbd",
        "usr/local/bin/htb-cli",
        "usr/sbin/birdc",
    ] {
        std::fs::copy("/bin/kill", r.join(program)).unwrap();
    }
    let copied = Command::new("cp")
        .args(["-a", "/usr/lib/systemd/system"])
        .arg(r.join("usr/lib/systemd/"))
        .status()
        .unwrap();
    assert!(copied.success());
    root
}

fn verify(root: &Path) -> std::process::Output {
    verify_unit(root, "htbd.service")
}

fn verify_unit(root: &Path, unit: &str) -> std::process::Output {
    Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .arg(format!("/etc/systemd/system/{unit}"))
        .output()
        .expect("systemd-analyze (apt install systemd)")
}

fn security(root: &Path) -> std::process::Output {
    security_of(root, "htbd.service")
}

fn security_of(root: &Path, unit: &str) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(format!("--root={}", root.display()))
        .arg(unit)
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

#[test]
#[ignore = "needs systemd-analyze (scripts/test.sh installs and runs it)"]
fn the_health_watch_unit_verifies_withdraws_on_stop_and_is_hardened() {
    let root = unit_root();
    let unit = "htbd-health-watch.service";
    let out = verify_unit(root.path(), unit);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
    let path = root.path().join("etc/systemd/system").join(unit);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("Type=exec", "Type=exce")).unwrap();
    let out = verify_unit(root.path(), unit);
    assert!(!String::from_utf8_lossy(&out.stderr).trim().is_empty());
    std::fs::write(&path, &text).unwrap();

    let out = security_of(root.path(), unit);
    let report = String::from_utf8_lossy(&out.stdout);
    let exposure: f64 = report
        .lines()
        .find_map(|l| {
            l.split(&format!("Overall exposure level for {unit}: "))
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{report}"));
    eprintln!("systemd-analyze security: exposure {exposure}");
    assert!(exposure <= 3.0, "exposure {exposure}:\n{report}");
    // The watcher tells both daemons, and stopping it withdraws the box from both.
    for line in [
        "--on-down \"birdc disable htbd_subscribers\"",
        "--state-file /run/htbd-health/healthy",
        "ExecStopPost=-/usr/sbin/birdc disable htbd_subscribers",
        "ExecStopPost=/bin/sh -c 'echo 1 > /run/htbd-health/healthy'",
        "RuntimeDirectoryPreserve=yes",
    ] {
        assert!(text.contains(line), "the unit lacks {line}");
    }
}
