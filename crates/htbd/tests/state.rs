//! Control-plane trust in the netns lab: SIGHUP reloads under traffic, the config file against
//! the saved state at restart, one htbd per state_dir, batches all or nothing through the data
//! plane, a crash at every step of compaction, slow clients and a hung daemon.
//!
//! Needs root, network namespaces and iperf3: `#[ignore]`d by default, run by `scripts/test.sh`
//! as root (the summary lists them as ignored otherwise).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use htb_lab::{Htbd, Lab, N2, Promise, R, assert_owed, cli_bin, htbd_bin, htbd_fails};
use serde_json::Value;

/// Router mode; r2 shapes 1:10 (dport 5201) and 1:20 (dport 5202) under 1:1.
fn config(rate_10: &str) -> String {
    format!(
        "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\n\
         [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n\
         [interface.qdisc]\ndefault = \"20\"\n\
         [[interface.class]]\nid = \"1:1\"\nrate = \"100mbit\"\n\
         [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"{rate_10}\"\n\
         [[interface.class]]\nid = \"1:20\"\nparent = \"1:1\"\nrate = \"20mbit\"\n\
         [[interface.filter]]\nprio = 1\nmatch = {{ dport = \"5201\" }}\nclassid = \"1:10\"\n\
         [[interface.filter]]\nprio = 1\nmatch = {{ dport = \"5202\" }}\nclassid = \"1:20\"\n"
    )
}

fn counter(stats: &Value, key: &str) -> u64 {
    stats[key].as_u64().unwrap_or(0)
}

/// Class `id`'s send rate over the next second, from its byte counter.
fn iperf_report(child: std::process::Child) -> Value {
    let out = child.wait_with_output().expect("iperf3");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "iperf3 report: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn sighup_applies_a_changed_rate_within_a_second_and_untouched_classes_go_on() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbs", "router");
        let mut htbd = Htbd::start(&lab, &config("10mbit"));
        let _s1 = lab.iperf_server(N2, 5201);
        let _s2 = lab.iperf_server(N2, 5202);
        let shaped = lab.udp_flow(5201, "20M", 8);
        let untouched = lab.udp_flow(5202, "5M", 8);
        std::thread::sleep(Duration::from_millis(1500));
        let saturated_from = htbd.class_stats("r2", "1:10");
        // One-second windows of 1:10's own counter (node-2 also receives 1:20's flow), each judged
        // by what the class owed in it.
        let second = |htbd: &Htbd| {
            htbd.accounted(|| htbd.class_bytes_over("r2", "1:10", Duration::from_secs(1)))
        };
        let before = second(&htbd);
        let line = htbd.reload(&config("15mbit"));
        assert!(line.contains("1 change(s) applied"), "{line}");
        let first = second(&htbd);
        let next = second(&htbd);
        htbd.assert_class_saturated("r2", "1:10", &saturated_from);
        for ((counted, stalls), what, rate, tolerance) in [
            (before, "1:10 before the reload", 10e6, 0.05),
            (first, "1:10 in the first second after SIGHUP", 15e6, 0.05),
            (next, "1:10 in the second second", 15e6, 0.03),
        ] {
            assert_owed(what, &counted, &Promise::class(rate), &stalls, tolerance);
        }
        let _ = iperf_report(shaped);
        let report = iperf_report(untouched);
        // The untouched class lost nothing, and its counters went on (not reset by the reload):
        // it counted every datagram of the flow.
        let sum = &report["end"]["sum"];
        let (lost, sent) = (counter(sum, "lost_packets"), counter(sum, "packets"));
        assert!(
            sent > 3000,
            "the 5 Mbit/s flow sent only {sent} datagrams: {sum}"
        );
        assert_eq!(lost, 0, "datagrams lost through the untouched class: {sum}");
        let untouched_stats = htbd.class_stats("r2", "1:20");
        assert!(
            counter(&untouched_stats, "packets") >= sent,
            "1:20 counted {} packets of the {sent} sent: its counters were reset",
            counter(&untouched_stats, "packets")
        );
        assert_eq!(counter(&untouched_stats, "drops"), 0);
        // The reload is journaled like any batch: a restart with this file keeps 15 Mbit/s.
        let dir = htbd.into_dir();
        let htbd = Htbd::start_in(&lab, &config("15mbit"), dir);
        assert!(
            htbd.log_text().contains("the saved live state"),
            "{}",
            htbd.log_text()
        );
        let shown = htbd.cli_ok(&["class", "show", "dev", "r2", "classid", "1:10"]);
        assert!(shown.contains("rate 15Mbit"), "{shown}");
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_bad_file_or_a_change_that_cannot_be_live_is_refused_and_nothing_changes() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbs", "router");
        let mut htbd = Htbd::start(&lab, &config("10mbit"));
        let before = htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]);
        let line =
            htbd.reload(&config("10mbit").replace("rate = \"20mbit\"", "rate = \"20 apples\""));
        assert!(
            line.contains("not reloaded, nothing changed") && line.contains("line"),
            "{line}"
        );
        let line = htbd.reload(&config("10mbit").replace("name = \"r1\"", "name = \"r3\""));
        assert!(line.contains("restart htbd"), "{line}");
        assert_eq!(htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]), before);
        // htbd is still there and still takes changes.
        htbd.cli_ok(&[
            "class", "change", "dev", "r2", "classid", "1:10", "htb", "rate", "12mbit",
        ]);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn an_edited_file_wins_at_restart_and_the_live_state_is_set_aside() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbs", "router");
        let htbd = Htbd::start(&lab, &config("10mbit"));
        htbd.cli_ok(&[
            "class", "change", "dev", "r2", "classid", "1:20", "htb", "rate", "30mbit",
        ]);
        let (status, dir) = htbd.terminate();
        assert!(status.success(), "{status}");
        // Unchanged file: the live change stays, and --check says so.
        let check = |dir: &tempfile::TempDir| {
            let out = lab
                .cmd(R, htbd_bin().to_str().unwrap())
                .args(["--check", "--config"])
                .arg(dir.path().join("htbd.toml"))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        assert!(
            check(&dir).contains("the saved live state"),
            "{}",
            check(&dir)
        );
        let htbd = Htbd::start_in(&lab, &config("10mbit"), dir);
        let shown = htbd.cli_ok(&["class", "show", "dev", "r2", "classid", "1:20"]);
        assert!(shown.contains("rate 30Mbit"), "{shown}");
        let (_, dir) = htbd.terminate();
        // The operator edits the file: it wins, and the live state is kept aside, named.
        std::fs::write(
            dir.path().join("htbd.toml"),
            std::fs::read_to_string(dir.path().join("htbd.toml"))
                .unwrap()
                .replace("rate = \"10mbit\"", "rate = \"12mbit\""),
        )
        .unwrap();
        let said = check(&dir);
        assert!(
            said.contains("trees changed") && said.contains("set aside"),
            "{said}"
        );
        let htbd = Htbd::start_in(&lab, &config("12mbit"), dir);
        let log = htbd.log_text();
        assert!(log.contains("set aside in"), "{log}");
        let shown = htbd.cli_ok(&["class", "show", "dev", "r2"]);
        assert!(
            shown.contains("rate 12Mbit") && shown.contains("rate 20Mbit"),
            "{shown}"
        );
        let aside: Vec<_> = std::fs::read_dir(htbd.dir().join("state"))
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("set-aside-"))
            .collect();
        assert_eq!(aside.len(), 1);
        let kept = std::fs::read_to_string(aside[0].path().join("state.toml")).unwrap();
        assert!(
            kept.contains("rate = \"30000000bit\"") || kept.contains("30000000"),
            "{kept}"
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_second_htbd_on_the_same_state_dir_is_refused() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbs", "router");
        let htbd = Htbd::start(&lab, &config("10mbit"));
        let state = htbd.dir().join("state");
        let other = config("10mbit").replace("@STATE@", &state.display().to_string());
        let err = htbd_fails(&lab, &other);
        assert!(
            err.contains("in use by another htbd") && err.contains(&format!("pid {}", htbd.pid())),
            "{err}"
        );
        // The first one is untouched.
        htbd.cli_ok(&["class", "show", "dev", "r2"]);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_step_the_data_plane_refuses_takes_the_whole_batch_back() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbs", "router");
        let dir = tempfile::tempdir().unwrap();
        let mut htbd = Htbd::start_with(
            &lab,
            &config("10mbit"),
            dir,
            &[("HTBD_FAULTS", "refuse-plane-op:1")],
        );
        let before = htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]);
        let batch = htbd.dir().join("batch.tc");
        std::fs::write(
            &batch,
            "class add dev r2 parent 1:1 classid 1:30 htb rate 5mbit\n\
         class change dev r2 parent 1:1 classid 1:10 htb rate 30mbit\n",
        )
        .unwrap();
        let out = htbd.cli(&["-b", batch.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("taken back"), "{err}");
        // Taken back in the model …
        assert_eq!(htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]), before);
        // … and in the data plane: adding 1:30 alone (one operation, not refused) works, which it
        // would not if the data plane still held the 1:30 of the refused batch.
        htbd.cli_ok(&[
            "class", "add", "dev", "r2", "parent", "1:1", "classid", "1:30", "htb", "rate", "5mbit",
        ]);
        htbd.wait_for_log(
            "the data plane refused a validated change",
            Duration::from_secs(1),
        );
        // … and in the journal: a restart holds exactly the acknowledged change.
        let expected = htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]);
        let dir = htbd.into_dir();
        let htbd = Htbd::start_in(&lab, &config("10mbit"), dir);
        assert_eq!(htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]), expected);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_crash_at_every_step_of_compaction_restarts_with_exactly_the_acknowledged_changes() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbs", "router");
        let mut dir = tempfile::tempdir().unwrap();
        for (n, step) in [
            "tmp-written",
            "tmp-synced",
            "renamed",
            "dir-synced",
            "journal-truncated",
        ]
        .into_iter()
        .enumerate()
        {
            let htbd = Htbd::start_in(&lab, &config("10mbit"), dir);
            // Two acknowledged batches in the journal …
            let rate = format!("{}mbit", 11 + n);
            htbd.cli_ok(&[
                "class", "change", "dev", "r2", "classid", "1:10", "htb", "rate", &rate,
            ]);
            htbd.cli_ok(&[
                "filter",
                "add",
                "dev",
                "r2",
                "parent",
                "1:",
                "protocol",
                "ip",
                "prio",
                "9",
                "u32",
                "match",
                "ip",
                "dport",
                &(6000 + n).to_string(),
                "0xffff",
                "flowid",
                "1:20",
            ]);
            let acknowledged = (
                htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]),
                htbd.cli_ok(&["filter", "show", "dev", "r2"]),
            );
            dir = htbd.into_dir();
            // … then a start that folds them into a snapshot and dies (SIGABRT) after `step`.
            let out = lab
                .cmd(R, htbd_bin().to_str().unwrap())
                .arg("--config")
                .arg(dir.path().join("htbd.toml"))
                .env("HTBD_FAULTS", format!("crash-in-compaction:{step}"))
                .stdout(Stdio::null())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!("crashing after compaction step {step}")),
                "{err}"
            );
            // The next start has exactly the acknowledged changes: none lost, none twice (a
            // filter replayed twice would show twice).
            let htbd = Htbd::start_in(&lab, &config("10mbit"), dir);
            let now = (
                htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]),
                htbd.cli_ok(&["filter", "show", "dev", "r2"]),
            );
            assert_eq!(now, acknowledged, "after a crash at {step}");
            dir = htbd.into_dir();
        }
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_half_sent_header_loses_its_slot_and_htb_cli_times_out_on_a_hung_htbd() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbs", "router");
        let htbd = Htbd::start(&lab, &config("10mbit"));
        // Four clients announce 64 MiB each and trickle: together they hold the 256 MiB that
        // requests being read may take, so a fifth is refused as busy, not buffered.
        let announce = |bytes: u32| {
            let mut s = UnixStream::connect(htbd.socket()).unwrap();
            s.write_all(&bytes.to_be_bytes()).unwrap();
            s.write_all(b"{\"version\"").unwrap();
            s
        };
        let _holders: Vec<UnixStream> = (0..4).map(|_| announce(64 << 20)).collect();
        std::thread::sleep(Duration::from_millis(300));
        let mut fifth = announce(64 << 20);
        fifth
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut answer = Vec::new();
        let _ = fifth.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer);
        assert!(
            text.contains("busy") && text.contains("being read"),
            "{text:?}"
        );
        // Three bytes of a header, then silence: an error within the frame timeout, then closed.
        let mut stream = UnixStream::connect(htbd.socket()).unwrap();
        stream.write_all(&[0, 0, 0]).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let t0 = Instant::now();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let waited = t0.elapsed();
        let text = String::from_utf8_lossy(&answer);
        assert!(text.contains("not complete within"), "{text:?}");
        assert!(waited < Duration::from_secs(15), "held for {waited:?}");
        // A hung htbd: htb-cli gives up after --timeout with a clear message.
        htbd.signal("STOP");
        let t0 = Instant::now();
        let out = std::process::Command::new(cli_bin())
            .args([
                "--socket",
                htbd.socket().to_str().unwrap(),
                "--timeout",
                "1",
            ])
            .args(["class", "show", "dev", "r2"])
            .output()
            .unwrap();
        let waited = t0.elapsed();
        htbd.signal("CONT");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("did not answer within 1s"),
            "{err}"
        );
        assert!(waited < Duration::from_secs(3), "htb-cli waited {waited:?}");
        htbd.cli_ok(&["class", "show", "dev", "r2"]);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn router_mode_refuses_to_start_without_ip_forward_and_changes_no_sysctl() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbs", "router");
        let forwarding = || {
            String::from_utf8_lossy(&lab.exec(R, &["sysctl", "-n", "net.ipv4.ip_forward"]).stdout)
                .trim()
                .to_owned()
        };
        lab.exec(R, &["sysctl", "-qw", "net.ipv4.ip_forward=0"]);
        let err = htbd_fails(&lab, &config("10mbit"));
        assert!(
            err.contains("net.ipv4.ip_forward is 0")
                && err.contains("sysctl -w net.ipv4.ip_forward=1"),
            "{err}"
        );
        assert_eq!(forwarding(), "0", "htbd changed the sysctl");
        lab.exec(R, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        let htbd = Htbd::start(&lab, &config("10mbit"));
        let (status, _) = htbd.terminate();
        assert!(status.success());
        assert_eq!(forwarding(), "1", "htbd changed the sysctl at stop");
    });
}

/// What the service manager hears (`NOTIFY_SOCKET`), with when.
fn notifications(
    socket: std::os::unix::net::UnixDatagram,
) -> std::sync::Arc<std::sync::Mutex<Vec<(Instant, String)>>> {
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&heard);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            sink.lock().unwrap().push((Instant::now(), text));
        }
    });
    heard
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn the_service_manager_hears_ready_reload_status_stopping_and_a_watchdog_only_a_live_data_plane_feeds()
 {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbs", "router");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let heard = notifications(std::os::unix::net::UnixDatagram::bind(&path).unwrap());
        let started = Instant::now();
        let mut htbd = Htbd::start_with(
            &lab,
            &config("10mbit"),
            dir,
            &[
                ("NOTIFY_SOCKET", path.to_str().unwrap()),
                ("WATCHDOG_USEC", "1000000"),
                ("HTBD_FAULTS", "hang-data-plane-after:4000"),
            ],
        );
        std::thread::sleep(Duration::from_millis(1000));
        let line = htbd.reload(&config("12mbit"));
        assert!(line.contains("1 change(s) applied"), "{line}");
        htbd.wait_for_log("hanging the data plane", Duration::from_secs(6));
        let hung = Instant::now();
        std::thread::sleep(Duration::from_millis(2500));
        htbd.signal("TERM");
        std::thread::sleep(Duration::from_millis(500));
        let heard = heard.lock().unwrap().clone();
        let texts: Vec<&str> = heard.iter().map(|(_, t)| t.as_str()).collect();
        eprintln!(
            "{} notifications: {:?}",
            texts.len(),
            texts
                .iter()
                .filter(|t| !t.starts_with("WATCHDOG"))
                .collect::<Vec<_>>()
        );
        let first = |needle: &str| texts.iter().position(|t| t.contains(needle));
        let ready = first("READY=1").expect("READY=1");
        assert!(
            texts[ready].contains("STATUS=shaping: ports 2 (r1, r2), classes 3"),
            "{}",
            texts[ready]
        );
        let reloading = first("RELOADING=1").expect("RELOADING=1");
        assert!(
            texts[reloading].contains("MONOTONIC_USEC="),
            "{}",
            texts[reloading]
        );
        assert!(reloading > ready && texts[reloading + 1..].iter().any(|t| t.contains("READY=1")));
        assert!(
            first("STOPPING=1").is_some_and(|i| i > reloading),
            "{texts:?}"
        );
        // Fed about every 500 ms while the data plane runs; never once it hangs.
        let fed = |from: Instant, to: Instant| {
            heard
                .iter()
                .filter(|(at, t)| *at >= from && *at < to && t.contains("WATCHDOG=1"))
                .count()
        };
        let before = fed(started, started + Duration::from_millis(3500));
        let after = fed(hung + Duration::from_millis(600), Instant::now());
        eprintln!("WATCHDOG=1: {before} in the first 3.5 s, {after} after the data plane hung");
        assert!(
            before >= 4,
            "watchdog fed only {before} times while the data plane ran"
        );
        assert_eq!(after, 0, "the watchdog was fed by a hung data plane");
        assert!(
            htbd.log_text().contains("did not answer"),
            "{}",
            htbd.log_text()
        );
    });
}

/// The capabilities `dist/htbd.service` bounds htbd to, as setpriv names them.
fn unit_capabilities() -> String {
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/htbd.service"),
    )
    .unwrap();
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit bounds capabilities");
    line.split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn htbd_shapes_with_only_the_capabilities_the_unit_grants() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbs", "router");
        let caps = format!("-all,{}", unit_capabilities());
        assert_eq!(caps, "-all,+net_admin,+net_raw,+bpf,+perfmon,+sys_nice");
        // Without CAP_IPC_LOCK the UMEM counts against RLIMIT_MEMLOCK, which the unit lifts
        // (LimitMEMLOCK=infinity) but this sandbox cannot: a UMEM that fits in 8 MiB.
        let small = config("10mbit").replace(
            "realtime = 1",
            "realtime = 1\nframes = 3072\nring_size = 256",
        );
        let htbd = Htbd::start_under(
            &lab,
            &small,
            tempfile::tempdir().unwrap(),
            &[],
            &[
                "setpriv",
                "--bounding-set",
                &caps,
                "--inh-caps=-all",
                "--no-new-privs",
            ],
        );
        let status = std::fs::read_to_string(format!("/proc/{}/status", htbd.pid())).unwrap();
        let effective = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        // CAP_NET_ADMIN 12, CAP_NET_RAW 13, CAP_SYS_NICE 23, CAP_PERFMON 38, CAP_BPF 39.
        let granted = (1u64 << 12) | (1 << 13) | (1 << 23) | (1 << 38) | (1 << 39);
        assert_eq!(effective & !granted, 0, "htbd has more: {effective:x}");
        htbd.assert_shapes(
            "1:20 with the unit's capabilities",
            ("r2", "1:20"),
            &Promise::class(20e6),
            0.03,
            || lab.udp_load(5202, "30M", 4),
        );
    });
}
