//! Live control of htbd in the netns lab through `htb-cli` and the control socket: tc's
//! grammar round-trips, the seed lines run verbatim, a rate change under load, atomic
//! batches, hostile clients, permissions, and restarts keeping live changes. Every test needs
//! root and network namespaces, so each is `#[ignore]`d; `scripts/test.sh` includes them as root.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

use htb_lab::{Htbd, Lab, N1, N2, Promise, Reaped, cli_bin};
use serde_json::Value;

/// Router mode, r1 unshaped; r2 with `tree` (config TOML for r2's qdisc, classes, filters).
fn config(tree: &str) -> String {
    config_with(tree, 1)
}

/// As `config`, with `workers` data-plane workers.
fn config_with(tree: &str, workers: u32) -> String {
    format!(
        "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\
         workers = {workers}\n\n\
         [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n{tree}"
    )
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn tc_grammar_round_trips_through_a_live_htbd() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbc", "router");
        let htbd = Htbd::start(&lab, &config(""));
        let cli = |line: &str| htbd.cli_ok(&line.split_whitespace().collect::<Vec<_>>());

        // Seed lines, verbatim but for `tc` → `htb-cli` and the device name.
        cli("qdisc add dev r2 root handle 1: htb default 20");
        cli("class add dev r2 parent 1: classid 1:1 htb rate 100mbit");
        cli("class add dev r2 parent 1: classid 1:20 htb rate 180kbit ceil 180kbit");
        cli("class change dev r2 parent 1: classid 1:1 htb mtu 9000 rate 500mbit");
        let shown = cli("-s class show dev r2");
        assert!(
            shown.contains("class htb 1:20 root prio 0 rate 180Kbit ceil 180Kbit burst "),
            "{shown}"
        );
        assert!(
            shown.contains("class htb 1:1 root prio 0 rate 500Mbit ceil 500Mbit burst "),
            "{shown}"
        );
        assert!(
            shown.contains(" Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"),
            "{shown}"
        );
        assert!(
            shown.contains(" lended: 0 borrowed: 0 giants: 0\n"),
            "{shown}"
        );

        // qdisc: show, change in place (classes stay), JSON.
        assert_eq!(
            cli("qdisc show dev r2"),
            "qdisc htb 1: root r2q 10 default 0x20 direct_packets_stat 0 direct_qlen 1000\n"
        );
        cli("qdisc change dev r2 root handle 1: htb default 30 r2q 5 direct_qlen 500");
        let q = json(&cli("-j -s qdisc show dev r2"));
        assert_eq!(q[0]["options"]["default"], "0x30");
        assert_eq!(q[0]["options"]["r2q"], 5);
        assert_eq!(q[0]["options"]["direct_qlen"], 500);
        assert!(q[0]["bytes"].is_u64());
        cli("qdisc replace dev r2 root handle 1: htb default 20");
        assert!(
            cli("class show dev r2").contains("class htb 1:20"),
            "replace in place keeps classes"
        );

        // class: replace adds, then changes; change resets what is not given (tc semantics).
        cli("class replace dev r2 parent 1:1 classid 1:30 htb rate 10mbit ceil 50mbit prio 2");
        cli(
            "class replace dev r2 parent 1:1 classid 1:30 htb rate 20mbit ceil 50mbit prio 3 quantum 3000",
        );
        let c = json(&cli("-j -d class show dev r2 classid 1:30"));
        assert_eq!(c.as_array().unwrap().len(), 1);
        assert_eq!(c[0]["parent"], "1:1");
        assert_eq!(c[0]["rate"], 20_000_000 / 8, "bytes/s, as tc");
        assert_eq!(
            (c[0]["prio"].as_u64(), c[0]["quantum"].as_u64()),
            (Some(3), Some(3000))
        );
        assert_eq!(c[0]["level"], 0);
        let pretty = cli("-j -p class show dev r2 parent 1:1");
        assert!(
            pretty.contains("\n  {"),
            "pretty JSON is indented: {pretty}"
        );
        assert_eq!(
            json(&pretty).as_array().unwrap().len(),
            1,
            "only 1:1's children"
        );
        assert!(cli("-d class show dev r2 classid 1:1").contains(" level 7 "));

        // filters: u32 and flower, shown as tc shows them.
        cli(
            "filter add dev r2 parent 1: protocol ip prio 1 u32 match ip dst 10.201.2.0/24 match ip dport 5201 0xffff flowid 1:20",
        );
        cli(
            "filter add dev r2 parent 1: protocol ip prio 2 flower ip_proto udp dst_port 5202-5203 classid 1:30",
        );
        let filters = cli("filter show dev r2");
        assert!(
        filters.contains("filter parent 1: protocol ip pref 1 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 flowid 1:20 not_in_hw \n  match 0ac90200/ffffff00 at 16\n  match 00001451/0000ffff at 20\n"),
        "{filters}"
    );
        assert!(
            filters.contains(
                "handle 0x1 classid 1:30 \n  eth_type ipv4\n  ip_proto udp\n  dst_port 5202-5203\n"
            ),
            "{filters}"
        );
        let f = json(&cli("-j filter show dev r2"));
        assert!(
            f.as_array()
                .unwrap()
                .iter()
                .any(|f| f["options"]["flowid"] == "1:20")
        );
        // change, replace and get: the flower filter goes to 1:20 and back, keeping its handle.
        cli(
            "filter change dev r2 parent 1: protocol ip prio 2 handle 0x1 flower ip_proto udp dst_port 5202-5204 classid 1:20",
        );
        let got = cli("filter get dev r2 parent 1: protocol ip prio 2 handle 0x1 flower");
        assert!(
            got.contains(
                "handle 0x1 classid 1:20 \n  eth_type ipv4\n  ip_proto udp\n  dst_port 5202-5204\n"
            ) && !got.contains("pref 1 u32"),
            "{got}"
        );
        cli(
            "filter replace dev r2 parent 1: protocol ip prio 2 handle 0x1 flower ip_proto udp dst_port 5202-5203 classid 1:30",
        );
        assert_eq!(cli("filter show dev r2"), filters);
        let out = htbd.cli(&[
            "filter", "get", "dev", "r2", "parent", "1:", "prio", "2", "handle", "0x9", "flower",
        ]);
        assert!(
            !out.status.success() && stderr(&out).contains("no filter with prio 2 and handle 0x9"),
            "{}",
            stderr(&out)
        );

        // The filters classify real traffic: UDP to 5201 lands in 1:20 and is held to 180 kbit/s,
        // building a backlog that deleting the class then reports as dropped.
        let _server = lab.iperf_server(N2, 5201);
        let flow = lab.udp_flow(5201, "2M", 3);
        std::thread::sleep(Duration::from_millis(2500));
        let c = json(&cli("-j -s class show dev r2 classid 1:20"));
        assert!(c[0]["stats"]["packets"].as_u64().unwrap() > 10, "{c}");
        assert!(
            c[0]["stats"]["qlen"].as_u64().unwrap() > 0,
            "a 2 Mbit/s flow into 180 kbit/s queues up: {c}"
        );
        // monitor: two refreshes; the second has a measured rate for the busy class.
        let monitor = cli("monitor dev r2 interval 0.3 count 2");
        let refreshes: Vec<&str> = monitor.split("htb-cli monitor").skip(1).collect();
        assert_eq!(refreshes.len(), 2, "{monitor}");
        let row = refreshes[1]
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some("1:20"))
            .unwrap_or_else(|| panic!("{monitor}"));
        let bps: f64 = row.split_whitespace().nth(5).unwrap().parse().unwrap();
        assert!(
            (90e3..400e3).contains(&bps),
            "1:20 is held near 180 kbit/s: {row}"
        );
        let batch = htbd.dir().join("del.batch");
        std::fs::write(
            &batch,
            "filter del dev r2 parent 1: prio 1\nclass del dev r2 classid 1:20\n",
        )
        .unwrap();
        let out = htbd.cli(&["-b", batch.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("queued packet(s) dropped"),
            "{}",
            stderr(&out)
        );
        let _ = flow.wait_with_output();
        assert!(!cli("class show dev r2").contains("1:20"));

        // Deletes, and usage errors that send nothing.
        cli("filter del dev r2 parent 1: prio 2 handle 0x1 flower");
        assert_eq!(cli("filter show dev r2"), "");
        let out = htbd.cli(&[
            "class", "add", "dev", "r2", "parent", "1:1", "classid", "1:40", "htb", "ceil", "1mbit",
        ]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(stderr(&out), "\"rate\" is required.\n");
        let out = htbd.cli(&["class", "del", "dev", "r2", "classid", "1:1"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            stderr(&out).starts_with("Error: class 1:1 has children"),
            "{}",
            stderr(&out)
        );
        cli("qdisc del dev r2 root");
        assert_eq!(cli("qdisc show"), "");
        assert_eq!(
            lab.ping(N1, "10.201.2.2", 3, "0.2"),
            3,
            "unshaped, still forwarding"
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_rate_change_under_load_moves_the_rate_within_a_second_and_loses_nothing() {
    htb_lab::remeasured(|| {
        rate_change_under_load(1);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_rate_change_under_load_with_2_workers_loses_nothing() {
    htb_lab::remeasured(|| {
        rate_change_under_load(2);
    });
}

fn rate_change_under_load(workers: u32) {
    let lab = Lab::up_with_queues("htbc", "router", workers);
    // A deep queue: in the TCP phase no drops are needed to shape, so any loss would be the
    // change's fault.
    let htbd = Htbd::start(
        &lab,
        &config_with(
            "[interface.qdisc]\ndefault = \"10\"\n[[interface.class]]\nid = \"1:10\"\nrate = \"20mbit\"\nleaf = { kind = \"pfifo\", limit = 10000 }\n",
            workers,
        ),
    );
    assert_eq!(htbd.status().workers.len(), workers as usize);
    let change = |rate: &str| {
        htbd.cli_ok(&[
            "class", "change", "dev", "r2", "classid", "1:10", "htb", "rate", rate,
        ]);
    };

    // The rates: UDP at 72 Mbit/s (1.2× the higher rate) keeps the class full in every
    // one-second window, which each judges by what the class owed in it.
    let _server = lab.iperf_server(N2, 5201);
    let _flow = Reaped(lab.udp_flow(5201, "72M", 9));
    std::thread::sleep(Duration::from_millis(1500));
    let second = |what: &str, rate: f64, tolerance: f64| {
        htbd.assert_shapes(
            what,
            ("r2", "1:10"),
            &Promise::class(rate),
            tolerance,
            || lab.measure_load(Duration::ZERO, Duration::from_secs(1)),
        );
    };
    second("before the change", 20e6, 0.03);
    change("60mbit");
    second("first second after 20 → 60 Mbit/s", 60e6, 0.05);
    second("second second at 60", 60e6, 0.03);
    change("20mbit");
    // Going down, the queue built at 60 Mbit/s first drains at the new rate.
    second("first second after 60 → 20 Mbit/s", 20e6, 0.05);
    drop(_flow);
    htbd.wait_drained("r2");

    // Nothing lost: a TCP flow with a bounded window through the same changes retransmits
    // nothing, and htbd drops nothing.
    let dropped = |htbd: &Htbd| {
        json(&htbd.cli_ok(&["-j", "-s", "qdisc", "show", "dev", "r2"]))[0]["drops"]
            .as_u64()
            .unwrap_or(0)
    };
    let drops_before = dropped(&htbd);
    let _server = lab.iperf_server(N2, 5202);
    let client = lab.tcp_flow(5202, 7, "256K");
    std::thread::sleep(Duration::from_secs(2));
    change("60mbit");
    std::thread::sleep(Duration::from_secs(2));
    change("20mbit");
    let report: Value = serde_json::from_slice(&client.wait_with_output().unwrap().stdout).unwrap();
    let retransmits = report["end"]["sum_sent"]["retransmits"]
        .as_u64()
        .unwrap_or_else(|| panic!("premise failed: the TCP flow did not run: {report}"));
    let sent = report["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
    assert!(
        sent > 10_000_000,
        "premise failed: the TCP flow sent only {sent} bytes"
    );
    assert_eq!(retransmits, 0, "TCP retransmitted: packets were lost");
    assert_eq!(dropped(&htbd), drops_before, "htbd dropped packets");
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_batch_with_one_bad_line_changes_nothing() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbc", "router");
        let htbd = Htbd::start(
            &lab,
            &config(
                "[[interface.class]]\nid = \"1:1\"\nrate = \"100mbit\"\n[[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"10mbit\"\n",
            ),
        );
        let before = htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]);
        let file = htbd.dir().join("changes.batch");
        let write = |text: &str| std::fs::write(&file, text).unwrap();
        // Refused by htbd at line 3: nothing of lines 1-2 may stay.
        write(
            "class change dev r2 parent 1:1 classid 1:10 htb rate 50mbit\nclass add dev r2 parent 1:1 classid 1:20 htb rate 5mbit\nclass del dev r2 classid 1:99\n",
        );
        let out = htbd.cli(&["-b", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        let err = stderr(&out);
        assert!(err.contains("Error: class 1:99 does not exist"), "{err}");
        assert!(
            err.contains(&format!("Command failed {}:3", file.display())),
            "{err}"
        );
        assert_eq!(htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]), before);
        // Refused by the parser at line 2: nothing is sent.
        write(
            "class change dev r2 parent 1:1 classid 1:10 htb rate 50mbit\nclass add dev r2 parent 1:1 classid 1:20 htb rat 5mbit\n",
        );
        let out = htbd.cli(&["batch", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains(&format!("Command failed {}:2", file.display())),
            "{}",
            stderr(&out)
        );
        assert_eq!(htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]), before);
        // The good batch applies whole, and its show runs after it.
        write(
            "# good\nclass change dev r2 parent 1:1 classid 1:10 htb rate 50mbit\nclass add dev r2 parent 1:1 classid 1:20 htb rate 5mbit\nclass show dev r2 classid 1:20\n",
        );
        let shown = htbd.cli_ok(&["-b", file.to_str().unwrap()]);
        assert!(
            shown.starts_with("class htb 1:20 parent 1:1 prio 0 rate 5Mbit"),
            "{shown}"
        );
        assert!(
            htbd.cli_ok(&["class", "show", "dev", "r2", "classid", "1:10"])
                .contains("rate 50Mbit")
        );
    });
}

/// Sends raw bytes to the socket and returns the daemon's answer (its JSON body).
fn raw_exchange(socket: &std::path::Path, bytes: &[u8]) -> Value {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    // The daemon may answer and hang up before reading everything: ignore write errors.
    let _ = s.write_all(bytes);
    let mut header = [0u8; 4];
    s.read_exact(&mut header).expect("an error frame");
    let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
    s.read_exact(&mut body).unwrap();
    serde_json::from_slice(&body).unwrap()
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn hostile_clients_get_errors_while_forwarding_continues() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbc", "router");
        let htbd = Htbd::start(
            &lab,
            &config(
                "[interface.qdisc]\ndefault = \"10\"\n[[interface.class]]\nid = \"1:10\"\nrate = \"50mbit\"\n",
            ),
        );
        let _server = lab.iperf_server(N2, 5201);
        let flow = lab.udp_flow(5201, "20M", 6);
        std::thread::sleep(Duration::from_millis(500));
        let socket = htbd.socket();
        // Garbage: its first four bytes announce a 1.7 GB message.
        let answer = raw_exchange(&socket, b"hello, garbage\n");
        assert_eq!(answer["result"]["Err"]["code"], "too_large", "{answer}");
        // A 100 MB message.
        let mut huge = (100u32 << 20).to_be_bytes().to_vec();
        huge.extend(std::iter::repeat_n(b'x', 100 << 20));
        let answer = raw_exchange(&socket, &huge);
        assert_eq!(answer["result"]["Err"]["code"], "too_large", "{answer}");
        // Well framed, not JSON; then a request the daemon cannot parse; then the wrong version.
        for (body, code) in [
            (&b"{not json"[..], "bad_request"),
            (
                &br#"{"version":1,"request":{"type":"format_disk"}}"#[..],
                "bad_request",
            ),
            (
                &br#"{"version":99,"request":{"type":"ping"}}"#[..],
                "version",
            ),
        ] {
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(body);
            assert_eq!(raw_exchange(&socket, &frame)["result"]["Err"]["code"], code);
        }
        // A client that starts a frame and stalls holds nothing up.
        let mut stalled = UnixStream::connect(&socket).unwrap();
        stalled.write_all(&1000u32.to_be_bytes()).unwrap();
        htbd.cli_ok(&["qdisc", "show"]);
        let report: Value =
            serde_json::from_slice(&flow.wait_with_output().unwrap().stdout).unwrap();
        let lost = report["end"]["sum_received"]["lost_percent"]
            .as_f64()
            .unwrap();
        // Premise: the flow ran (20 Mbit/s for 6 s, under the class's 50): then what was lost is
        // what the abuse cost it.
        let sent = report["end"]["sum_sent"]["bytes"].as_f64().unwrap_or(0.0);
        assert!(
            sent >= 0.9 * 20e6 / 8.0 * 6.0,
            "premise failed: the UDP flow sent only {sent} bytes: {}",
            report["error"]
        );
        assert!(lost < 0.5, "{lost} % of the UDP flow lost during the abuse");
        drop(stalled);
        assert!(htbd.log_text().contains("htbd running"));
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_user_without_permission_is_refused() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbc", "router");
        let htbd = Htbd::start(&lab, &config(""));
        // A copy of htb-cli that nobody can run wherever the checkout lives.
        let as_nobody = |htbd: &Htbd| {
            let cli = htbd.dir().join("htb-cli");
            if !cli.exists() {
                std::fs::copy(cli_bin(), &cli).unwrap();
            }
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&cli)
                .arg("--socket")
                .arg(htbd.socket())
                .args(["qdisc", "show"])
                .output()
                .expect("setpriv")
        };
        // The socket file is 0660 root:root: nobody cannot even connect.
        let mode = std::fs::metadata(htbd.socket())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o660);
        std::fs::set_permissions(htbd.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = as_nobody(&htbd);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            stderr(&out).contains("Permission denied"),
            "{}",
            stderr(&out)
        );
        // Were the file opened up by mistake, the peer-credential check still refuses.
        std::fs::set_permissions(htbd.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
        let out = as_nobody(&htbd);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            stderr(&out).starts_with("Error: uid 65534 is not root nor htbd's user"),
            "{}",
            stderr(&out)
        );
        drop(htbd);
        // With socket_group, its members are let in.
        let htbd = Htbd::start(
            &lab,
            &config("").replace("realtime = 1", "realtime = 1\nsocket_group = \"65534\""),
        );
        std::fs::set_permissions(htbd.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = as_nobody(&htbd);
        assert!(out.status.success(), "{}", stderr(&out));
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn live_changes_survive_kill_and_restart() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbc", "router");
        let cfg = config(
            "[interface.qdisc]\ndefault = \"10\"\n[[interface.class]]\nid = \"1:10\"\nrate = \"10mbit\"\n",
        );
        let mut htbd = Htbd::start(&lab, &cfg);
        assert!(htbd.log_text().contains("no saved state"));
        htbd.cli_ok(&[
            "class", "change", "dev", "r2", "classid", "1:10", "htb", "rate", "30mbit",
        ]);
        htbd.cli_ok(&[
            "class", "add", "dev", "r2", "parent", "1:", "classid", "1:20", "htb", "rate", "5mbit",
        ]);
        htbd.cli_ok(&[
            "filter", "add", "dev", "r2", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "dport", "5202", "0xffff", "flowid", "1:20",
        ]);
        let before = htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]);
        let filters = htbd.cli_ok(&["filter", "show", "dev", "r2"]);
        htbd.kill9();
        let dir = htbd.into_dir();
        let htbd = Htbd::start_in(&lab, &cfg, dir);
        assert!(
            htbd.log_text()
                .contains("starting from the saved live state"),
            "{}",
            htbd.log_text()
        );
        assert_eq!(htbd.cli_ok(&["-d", "class", "show", "dev", "r2"]), before);
        assert_eq!(htbd.cli_ok(&["filter", "show", "dev", "r2"]), filters);
        // And the data plane runs the restored tree: 1:10 at 30 Mbit/s, not the file's 10.
        htbd.assert_shapes(
            "1:10 after restart",
            ("r2", "1:10"),
            &Promise::class(30e6),
            0.02,
            || lab.udp_load(5201, "60M", 4),
        );
    });
}
