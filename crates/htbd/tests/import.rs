//! `htb-cli import ShapedDevices.csv` against a live htbd in the netns lab: LibreQoS's
//! subscriber list becomes one class per circuit in both trees (download on the port towards
//! the subscribers, upload on the port towards the upstream), and each direction of node-2's
//! traffic is shaped by its circuit's plan; Prometheus metrics report every circuit. Needs root and network namespaces, so each test is
//! `#[ignore]`d; `scripts/test.sh` includes them as root.

use std::fmt::Write as _;

use htb_lab::{Counted, Htbd, Lab, N1, Promise, assert_owed};
use serde_json::Value;

/// Router mode; both ports have an HTB tree with the circuits' parent 1:1, a node class 1:2
/// and the default 1:99. r2 faces node-2 (the subscriber side: download), r1 node-1 (upload).
const CONFIG: &str = "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\nmetrics = \"127.0.0.1:9469\"\n\n\
     [[interface]]\nname = \"r1\"\n[interface.qdisc]\ndefault = \"99\"\n\
     [[interface.class]]\nid = \"1:1\"\nrate = \"900mbit\"\n\
     [[interface.class]]\nid = \"1:2\"\nparent = \"1:1\"\nrate = \"100mbit\"\n\
     [[interface.class]]\nid = \"1:99\"\nrate = \"100mbit\"\n\n\
     [[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"99\"\n\
     [[interface.class]]\nid = \"1:1\"\nrate = \"900mbit\"\n\
     [[interface.class]]\nid = \"1:2\"\nparent = \"1:1\"\nrate = \"100mbit\"\n\
     [[interface.class]]\nid = \"1:99\"\nrate = \"100mbit\"\n";

/// Circuits besides node-2's.
const CIRCUITS: u32 = 3000;

const HEADER: &str = "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,\
                      Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n";

/// LibreQoS's format: node-2 is circuit "lab" (two devices: its address and an IPv6 prefix)
/// under node AP_LAB with 5 Mbit/s down and 3 Mbit/s up; the other circuits are subscribers
/// in 100.64.0.0/16 under nodes the import is not told about (they go under `--parent`), some
/// with two devices, some with fractional plans.
fn shaped_devices() -> String {
    let mut s = format!(
        "# LibreQoS ShapedDevices.csv\n{HEADER}\
         lab,\"Lab, node-2\",d-lab-1,node-2,AP_LAB,,10.201.2.2,,1,1,5,3,the lab's subscriber\n\
         lab,\"Lab, node-2\",d-lab-2,node-2 v6,AP_LAB,,,fd00:201:2::/64,1,1,5,3,\n"
    );
    for i in 0..CIRCUITS {
        let (hi, lo) = (i / 250, i % 250 + 1);
        let _ = writeln!(
            s,
            "c{i},\"Subscriber {i}\",d{i},cpe-{i},AP_{},,100.64.{hi}.{lo},,0.5,0.25,{}.5,10,",
            i % 40,
            20 + i % 7
        );
        if i % 100 == 0 {
            let _ = writeln!(
                s,
                "c{i},\"Subscriber {i}\",d{i}b,phone-{i},AP_{},,\"100.65.{hi}.{lo}, 100.66.{hi}.{lo}\",,0.5,0.25,{}.5,10,",
                i % 40,
                20 + i % 7
            );
        }
    }
    s
}

fn classes(htbd: &Htbd, dev: &str) -> Vec<Value> {
    let shown: Value =
        serde_json::from_str(&htbd.cli_ok(&["-j", "class", "show", "dev", dev])).unwrap();
    shown.as_array().unwrap().clone()
}

fn url(path: &str) -> String {
    format!("http://127.0.0.1:9469{path}")
}

/// `GET path` on htbd's metrics endpoint, from the router's namespace.
fn scrape(lab: &Lab, path: &str) -> String {
    let out = lab.exec(htb_lab::R, &["curl", "-sS", "--fail", &url(path)]);
    assert!(
        out.status.success(),
        "curl {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the exposition is UTF-8")
}

fn import(htbd: &Htbd, file: &std::path::Path) -> std::process::Output {
    import_with(htbd, file, &[])
}

fn import_with(htbd: &Htbd, file: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["import", file.to_str().unwrap()];
    args.extend(extra);
    args.extend(["--download-dev", "r2", "--upload-dev", "r1"]);
    args.extend(["--parent", "1:1", "--node", "AP_LAB=1:2"]);
    let out = htbd.cli(&args);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_shaped_devices_csv_is_imported_in_one_batch_and_shapes_both_directions() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbi", "router");
        let htbd = Htbd::start(&lab, CONFIG);
        let file = htbd.dir().join("ShapedDevices.csv");
        std::fs::write(&file, shaped_devices()).unwrap();

        // A file with an error changes nothing, and the error names the line and column.
        let bad = htbd.dir().join("bad.csv");
        let mut text = shaped_devices();
        text.push_str("x1,\"Overlap\",dx,cpe-x,AP_1,,100.64.0.7,,1,1,10,10,\n");
        std::fs::write(&bad, text).unwrap();
        let out = import(&htbd, &bad);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!(
                "line {}: 100.64.0.7/32 overlaps 100.64.0.7/32 of circuit \"c6\"",
                CIRCUITS + 3 + CIRCUITS / 100 + 2
            )),
            "{err}"
        );
        assert_eq!(classes(&htbd, "r2").len(), 3, "the bad file changed r2");

        let started = std::time::Instant::now();
        let out = import(&htbd, &file);
        let elapsed = started.elapsed();
        assert!(out.status.success(), "{}", htbd.log_text());
        eprintln!("{} circuits imported in {elapsed:?}", CIRCUITS + 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
        err.contains(&format!(
            "synced {} circuits (classes 1:100..1:{:x}): {} classes added, 0 changed, 0 deleted; {} filters added, 0 deleted; 0 leaf qdiscs set; {} labels set",
            CIRCUITS + 1,
            0x100 + CIRCUITS,
            2 * (CIRCUITS + 1),
            2 * (2 + CIRCUITS + 2 * (CIRCUITS / 100)),
            2 * (CIRCUITS + 1)
        )),
        "{err}"
    );
        assert!(
            err.contains("40 parent node(s) without --node went under 1:1"),
            "{err}"
        );

        // Both trees: the circuit's class under its node, the plan as rate and ceil (tc's JSON
        // gives rates in bytes per second).
        for (dev, ceil) in [("r2", 5_000_000_u64), ("r1", 3_000_000)] {
            let all = classes(&htbd, dev);
            assert_eq!(all.len() as u32, 3 + CIRCUITS + 1, "{dev}");
            let lab_class = all.iter().find(|c| c["handle"] == "1:100").unwrap();
            assert_eq!(lab_class["parent"], "1:2", "{dev}: {lab_class}");
            assert_eq!(
                lab_class["ceil"].as_u64(),
                Some(ceil / 8),
                "{dev}: {lab_class}"
            );
            assert_eq!(
                lab_class["rate"].as_u64(),
                Some(1_000_000 / 8),
                "{dev}: {lab_class}"
            );
            let sub = all.iter().find(|c| c["handle"] == "1:101").unwrap();
            assert_eq!(sub["parent"], "1:1", "{dev}: {sub}");
            // The circuit's label: its name, id and both devices with their addresses.
            let label = &lab_class["label"];
            assert_eq!(
                (&label["name"], &label["circuit"], &label["comment"]),
                (
                    &Value::from("Lab, node-2"),
                    &Value::from("lab"),
                    &Value::from("the lab's subscriber")
                ),
                "{dev}: {lab_class}"
            );
            assert_eq!(label["devices"][1]["name"], "node-2 v6", "{dev}: {label}");
            assert_eq!(
                label["devices"][1]["addresses"][0], "fd00:201:2::/64",
                "{dev}: {label}"
            );
        }
        let shown = htbd.cli_ok(&["-d", "class", "show", "dev", "r2", "classid", "1:101"]);
        assert!(
            shown.contains(
                " label name \"Subscriber 0\" circuit \"c0\" device \"d0\" name \"cpe-0\""
            ),
            "{shown}"
        );
        let filters = htbd.cli_ok(&["filter", "show", "dev", "r1"]);
        assert!(
            filters.contains("match 0ac90202/ffffffff at 12") && filters.contains("flowid 1:100"),
            "the upload filter matches node-2's source:\n{}",
            &filters[..filters.len().min(2000)]
        );

        // Download: node-1 → node-2 through r2, shaped by the lab circuit's 5 Mbit/s.
        assert_eq!(lab.ping(N1, "10.201.2.2", 1, "0.2"), 1);
        htbd.assert_shapes(
            "download shaped by the circuit (5 Mbit/s)",
            ("r2", "1:100"),
            &Promise::class(5e6),
            0.03,
            || lab.udp_load(5201, "20M", 5),
        );

        // Upload: node-2 → node-1 through r1 (iperf3 -R), shaped by its 3 Mbit/s; the class
        // counted the flow and hit its limit.
        let before = htbd.class_stats("r1", "1:100");
        let _server = lab.iperf_server(N1, 5202);
        let (report, stalls) =
            htbd.accounted(|| lab.iperf("n2", "10.201.1.2", 5202, 5, Some("20M"), false));
        htbd.assert_class_saturated("r1", "1:100", &before);
        let after = htbd.class_stats("r1", "1:100");
        let sent = after["packets"].as_u64().unwrap() - before["packets"].as_u64().unwrap();
        assert!(
            sent > 1000,
            "the upload flow went to 1:100 on r1: {sent} packets"
        );
        // iperf3's receiver counts UDP payload; the class shapes frames (1442 bytes per 1400).
        // Its window includes the flow's start, hence 5 %.
        let received = &report["end"]["sum_received"];
        let (Some(bytes), Some(secs)) = (received["bytes"].as_f64(), received["seconds"].as_f64())
        else {
            panic!("no receiver sum in {report}");
        };
        assert_owed(
            "upload shaped by the circuit (3 Mbit/s)",
            &Counted::exact(bytes * 1442.0 / 1400.0, secs),
            &Promise::class(3e6),
            &stalls,
            0.05,
        );

        // Prometheus sees every class of both trees, with the counters `class show -s` gives. The
        // download's backlog may still be draining through 1:100 at 5 Mbit/s, so the scrape is
        // judged between what `class show` says just before and just after it.
        let bytes_before = htbd.class_stats("r2", "1:100")["bytes"].as_u64().unwrap();
        let started = std::time::Instant::now();
        let metrics = scrape(&lab, "/metrics");
        eprintln!(
            "scrape of {} classes: {} bytes in {:?}",
            2 * (3 + CIRCUITS + 1),
            metrics.len(),
            started.elapsed()
        );
        let value = |series: &str| -> f64 {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("no {series} in the scrape"))
        };
        let bytes = value("htb_class_bytes_total{dev=\"r2\",class=\"1:100\"}");
        let bytes_after = htbd.class_stats("r2", "1:100")["bytes"].as_u64().unwrap();
        assert!(
            bytes >= bytes_before as f64 && bytes <= bytes_after as f64,
            "scraped {bytes} bytes, class show said {bytes_before} before the scrape and \
         {bytes_after} after"
        );
        assert_eq!(
            value("htb_class_ceil_bits_per_second{dev=\"r1\",class=\"1:100\",parent=\"1:2\"}"),
            3e6
        );
        for dev in ["r1", "r2"] {
            let series = format!("htb_class_packets_total{{dev=\"{dev}\",");
            let n = metrics.lines().filter(|l| l.starts_with(&series)).count();
            assert_eq!(n as u32, 3 + CIRCUITS + 1, "{dev}'s classes in the scrape");
        }
        assert!(value("htb_ipc_requests_total{request=\"apply\",outcome=\"ok\"}") >= 1.0);
        assert!(value("htb_xdp_verdicts_total{verdict=\"redirected\"}") > 1000.0);
        assert!(metrics.ends_with("# EOF\n"), "the exposition is cut short");
        for (path, code) in [("/nothing", "404"), ("/", "200")] {
            let out = lab.exec(
                htb_lab::R,
                &[
                    "curl",
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    &url(path),
                ],
            );
            assert_eq!(String::from_utf8_lossy(&out.stdout), code, "GET {path}");
        }

        // The import survives a crash (journal replay).
        let shown = htbd.cli_ok(&["filter", "show", "dev", "r2"]);
        let mut htbd = htbd;
        htbd.kill9();
        let htbd = Htbd::start_in(&lab, CONFIG, htbd.into_dir());
        assert_eq!(htbd.cli_ok(&["filter", "show", "dev", "r2"]), shown);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_changed_file_syncs_only_its_changes_and_untouched_circuits_lose_nothing() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbi", "router");
        let htbd = Htbd::start(&lab, CONFIG);
        let file = htbd.dir().join("ShapedDevices.csv");
        std::fs::write(&file, shaped_devices()).unwrap();
        assert!(import(&htbd, &file).status.success(), "{}", htbd.log_text());
        // The same file again: nothing to do.
        let out = import(&htbd, &file);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success()
                && err
                    .contains("0 classes added, 0 changed, 0 deleted; 0 filters added, 0 deleted")
                && err.contains("0 labels set"),
            "{err}"
        );

        // 100 plans change (c1000..c1099 get 40 Mbit/s down), 5 circuits go (c2000..c2004, whose
        // filters go with them), 5 come (n0..n4).
        let mut changed = String::new();
        for line in shaped_devices().lines() {
            let id: u32 = line
                .strip_prefix('c')
                .and_then(|l| l.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(u32::MAX);
            if (2000..2005).contains(&id) {
                continue;
            }
            if (1000..1100).contains(&id) {
                let plan = format!(",0.5,0.25,{}.5,10,", 20 + id % 7);
                assert!(line.contains(&plan), "{line}");
                changed += &line.replace(&plan, ",0.5,0.25,40,10,");
            } else {
                changed += line;
            }
            changed.push('\n');
        }
        for i in 0..5 {
            let _ = writeln!(
                changed,
                "n{i},New {i},dn{i},cpe-n{i},AP_1,,100.70.0.{},,1,1,8,4,",
                i + 1
            );
        }
        let file2 = htbd.dir().join("ShapedDevices-2.csv");
        std::fs::write(&file2, &changed).unwrap();

        // The dry run says what would happen and changes nothing.
        let out = import_with(&htbd, &file2, &["--dry-run"]);
        let batch = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(batch.matches("class change").count(), 100, "{batch}");
        assert_eq!(batch.matches("class del").count(), 2 * 5, "{batch}");
        assert_eq!(batch.matches("class add").count(), 2 * 5, "{batch}");
        assert_eq!(
            batch.matches("class label").count(),
            2 * 5,
            "only the new circuits' labels: {batch}"
        );
        assert!(
            !batch.contains("10.201.2.2"),
            "the lab circuit is untouched:\n{batch}"
        );

        // Under a steady flow through the lab circuit (3 of its 5 Mbit/s), the sync goes in.
        let before = htbd.class_stats("r2", "1:100");
        let _server = lab.iperf_server(htb_lab::N2, 5201);
        let client = lab.udp_flow_sized(5201, "3M", 6, 1200);
        std::thread::sleep(std::time::Duration::from_secs(2));
        let started = std::time::Instant::now();
        let out = import(&htbd, &file2);
        let elapsed = started.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        eprintln!(
            "the sync of {} circuits took {elapsed:?} end to end",
            CIRCUITS + 1
        );
        assert!(
            err.contains("10 classes added, 100 changed, 10 deleted;"),
            "{err}"
        );
        let report: Value =
            serde_json::from_slice(&client.wait_with_output().unwrap().stdout).unwrap();
        let sum = &report["end"]["sum"];
        let (lost, sent) = (sum["lost_packets"].as_u64(), sum["packets"].as_u64());
        eprintln!("the lab circuit's flow: {sent:?} datagrams, {lost:?} lost");
        // Premise: the flow ran across the sync.
        assert!(sent.unwrap_or(0) > 1500, "{report}");
        assert_eq!(
            lost,
            Some(0),
            "the untouched circuit lost packets: {report}"
        );
        // Its class kept its counters (not a new class) and dropped nothing.
        let after = htbd.class_stats("r2", "1:100");
        let delta = |k: &str| after[k].as_u64().unwrap() - before[k].as_u64().unwrap();
        assert!(delta("packets") > 1500, "{before} → {after}");
        assert_eq!(delta("drops"), 0, "{before} → {after}");
        // The changed plans run; the deleted circuits are gone, the new ones there.
        let all = classes(&htbd, "r2");
        let ceil_of = |minor: u32| {
            all.iter()
                .find(|c| c["handle"] == format!("1:{:x}", 0x101 + minor))
                .map(|c| c["ceil"].as_u64().unwrap())
        };
        assert_eq!(ceil_of(1000), Some(40_000_000 / 8));
        assert_eq!(
            ceil_of(999),
            Some((20 + 999 % 7) * 1_000_000 / 8 + 500_000 / 8)
        );
        assert_eq!(ceil_of(2000), None);
        assert_eq!(all.len() as u32, 3 + CIRCUITS + 1, "5 gone, 5 new");
        // And a third run finds nothing to do.
        let out = import(&htbd, &file2);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("0 classes added, 0 changed, 0 deleted"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}
