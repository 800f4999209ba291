//! htbd's `/health` endpoint (beside `/metrics`), as a BGP speaker or keepalived would poll it
//! to withdraw a box: 200 within a second of htbd running, 503 within a second of a hung data
//! plane, and no answer at all once htbd is killed. Needs root and network namespaces, so it
//! is `#[ignore]`d; `scripts/test.sh` includes it as root.

use std::time::{Duration, Instant};

use htb_lab::{Htbd, Lab, R};

const CONFIG: &str = "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\n\
     realtime = 1\nmetrics = \"127.0.0.1:9471\"\n\n\
     [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"1\"\n\
     [[interface.class]]\nid = \"1:1\"\nrate = \"100mbit\"\n";

/// `GET /health` from the router's namespace: the status (0: no answer) and the body.
fn health(lab: &Lab) -> (u16, String) {
    let out = lab.exec(
        R,
        &[
            "curl",
            "-s",
            "--max-time",
            "2",
            "-w",
            "\n%{http_code}",
            "http://127.0.0.1:9471/health",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "000"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// Polls `/health` every 50 ms until it answers `want`; returns how long that took.
fn until(lab: &Lab, want: u16, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let (code, body) = health(lab);
        if code == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "/health still answers {code} ({body:?}) after {limit:?}, not {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn health_is_200_while_the_data_plane_passes_503_once_it_hangs_and_silent_once_killed() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbh", "router");
        // The data plane hangs for good 4 s after start (htbd's fault injection).
        let mut htbd = Htbd::start_with(
            &lab,
            CONFIG,
            tempfile::tempdir().unwrap(),
            &[("HTBD_FAULTS", "hang-data-plane-after:4000")],
        );
        let ready = until(&lab, 200, Duration::from_secs(1));
        eprintln!("200 {ready:?} after htbd reported running");
        let (code, body) = health(&lab);
        assert_eq!(code, 200, "{body}");
        assert!(
            body.starts_with("ok: every data-plane worker passed"),
            "{body}"
        );

        htbd.wait_for_log("hanging the data plane", Duration::from_secs(10));
        let down = until(&lab, 503, Duration::from_secs(1));
        eprintln!("503 {down:?} after the data plane hung");
        let (code, body) = health(&lab);
        assert_eq!(code, 503, "{body}");
        assert!(
            body.starts_with("down: the data-plane workers have not all passed"),
            "{body}"
        );

        htbd.kill9();
        let (code, body) = health(&lab);
        assert_eq!(code, 0, "a killed htbd answered {code}: {body}");
    });
}
