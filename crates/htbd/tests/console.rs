//! The operator's console against a live htbd in the netns lab, with real clients: headless
//! Chromium (Debian's `chromium` and `chromium-driver`, over WebDriver) loads every page,
//! searches a subscriber by address, name and MAC, follows its live throughput while a class is shaped, and
//! saves screenshots; a real Prometheus server (Debian's `prometheus`) scrapes `/metrics` with
//! the token. htbd listens on the router's management address (a veth from the host), so the
//! listener is not on loopback and every request for data needs the token.
//!
//! Needs root and network namespaces, so it is `#[ignore]`d; `scripts/test.sh` includes it as
//! root.

use std::process::Command;
use std::time::{Duration, Instant};

use htb_lab::prometheus_server::Prometheus;
use htb_lab::webdriver::Browser;
use htb_lab::{Htbd, Lab, N2};

const TOKEN: &str = "lab-console-token-0123456789";
const PORT: u16 = 9480;

/// A 100 Mbit/s root; the subscriber 10.201.2.2 in 1:10 at 20 Mbit/s, labelled as LibreQoS's
/// import labels a circuit; everything else in 1:20. Flow records kept (the subscriber's page
/// lists its flows).
fn config(http: &str, token: &std::path::Path) -> String {
    format!(
        "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\
         http = \"{http}\"\nhttp_token = \"{}\"\n\n[flows]\nentries = 4096\n\n\
         [[interface]]\nname = \"r1\"\n\n\
         [[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"20\"\n\
         [[interface.class]]\nid = \"1:1\"\nrate = \"100mbit\"\n\
         [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"20mbit\"\nceil = \"20mbit\"\n\
         label = {{ name = \"Ann O'Neil\", circuit = \"C-17\", devices = [{{ id = \"D-1\", name = \"Ann's router\", \
         mac = \"00:1a:2b:3c:4d:5e\", addresses = [\"10.201.2.2/32\"] }}] }}\n\
         [[interface.class]]\nid = \"1:20\"\nparent = \"1:1\"\nrate = \"10mbit\"\nceil = \"100mbit\"\n\
         [[interface.filter]]\nprio = 1\nmatch = {{ dst = \"10.201.2.2/32\" }}\nclassid = \"1:10\"\n",
        token.display()
    )
}

/// `curl` from the host with `args`: the HTTP status and the body.
fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "000"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

fn screenshots() -> std::path::PathBuf {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/htb-bench/console");
    std::fs::create_dir_all(&dir).expect("target/htb-bench/console");
    dir
}

fn class_bytes(htbd: &Htbd) -> (u64, Instant) {
    let stats = htbd.class_stats("r2", "1:10");
    (stats["bytes"].as_u64().expect("bytes"), Instant::now())
}

#[test]
#[ignore = "needs root, network namespaces, chromium and prometheus (scripts/test.sh runs it as root)"]
fn the_console_shows_a_shaped_subscriber_live_and_prometheus_scrapes_it() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbw", "router");
        let ip = lab.management_link();
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("http.token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        let base = format!("http://{ip}:{PORT}");
        let htbd = Htbd::start(&lab, &config(&format!("{ip}:{PORT}"), &token_file));

        // The token: data needs it, the health check does not.
        let (code, body) = curl(&[&format!("{base}/api/v1/overview")]);
        assert_eq!(code, 401, "{body}");
        let (code, _) = curl(&[&format!("{base}/metrics")]);
        assert_eq!(code, 401);
        let bearer = format!("Authorization: Bearer {TOKEN}");
        let (code, body) = curl(&["-H", &bearer, &format!("{base}/api/v1/overview")]);
        assert_eq!(code, 200, "{body}");
        let (code, body) = curl(&[&format!("{base}/health")]);
        assert!(code == 200 && body.starts_with("ok: "), "{code} {body}");
        // An oversized request head gets 431 from the real daemon too.
        let pad = format!("X-Pad: {}", "a".repeat(9000));
        let (code, _) = curl(&["-H", &pad, &format!("{base}/health")]);
        assert_eq!(code, 431);

        let prometheus = Prometheus::start(
            format!("{ip}:{PORT}").parse().unwrap(),
            Duration::from_secs(1),
            Some(&token_file),
        )
        .expect("prometheus");
        prometheus
            .wait_target_up(Duration::from_secs(20))
            .expect("prometheus scrapes htbd with the token");

        // The subscriber's class full for 32 s: 30 Mbit/s offered to a 20 Mbit/s class.
        let _server = lab.iperf_server(N2, 5201);
        let before = htbd.class_stats("r2", "1:10");
        let flow = lab.udp_flow(5201, "30M", 32);
        std::thread::sleep(Duration::from_secs(2));

        let shots = screenshots();
        let browser = Browser::start().expect("chromium");
        browser.goto(&format!("{base}/")).unwrap();
        // The page asks for the token once.
        let input = browser.find("#token").unwrap();
        input.send_keys(TOKEN).unwrap();
        browser.find("#token-form button").unwrap().click().unwrap();
        let health = browser
            .wait_for(
                "#health",
                |t| t.starts_with("ok: "),
                Duration::from_secs(10),
            )
            .expect("the overview's health line");
        eprintln!("overview: {health}");
        browser
            .wait_for("#ports", |t| t.contains("r2"), Duration::from_secs(5))
            .unwrap();
        browser.screenshot(&shots.join("overview.png")).unwrap();

        // Search by address: the filter that names it, and its class.
        let search = browser.find("#search").unwrap();
        search.send_keys(lab.n2_ip()).unwrap();
        browser
            .find("#search-form button")
            .unwrap()
            .click()
            .unwrap();
        let found = browser
            .wait_for("#results", |t| t.contains("1:10"), Duration::from_secs(5))
            .expect("the subscriber found by address");
        assert!(found.contains("dst 10.201.2.2/32"), "{found}");
        browser.find("#results a").unwrap().click().unwrap();
        let label = browser
            .wait_for("#label", |t| t.contains("C-17"), Duration::from_secs(5))
            .expect("the subscriber's label on its page");
        assert!(label.contains("Ann O'Neil"), "{label}");
        let devices = browser.find("#devices").unwrap().text().unwrap();
        assert!(
            devices.contains("00:1a:2b:3c:4d:5e") && devices.contains("10.201.2.2/32"),
            "{devices}"
        );

        // Search by name (part of it, any case) and by MAC: the label's class.
        for q in ["ann o'", "00:1A:2B:3C:4D:5E"] {
            let search = browser.find("#search").unwrap();
            search.clear().unwrap();
            search.send_keys(q).unwrap();
            browser
                .find("#search-form button")
                .unwrap()
                .click()
                .unwrap();
            let found = browser
                .wait_for(
                    "#results",
                    |t| t.contains("Ann O'Neil") || t.contains("Nothing found"),
                    Duration::from_secs(5),
                )
                .expect("search results");
            assert!(
                found.contains("1:10") && found.contains("Ann O'Neil"),
                "{q}: {found}"
            );
        }
        browser.screenshot(&shots.join("search.png")).unwrap();
        browser.find("#results a").unwrap().click().unwrap();

        // The subscriber's page: its live rate within 2 % of the class's 20 Mbit/s.
        let shown = |text: &str| text.contains("Mbit/s");
        browser
            .wait_for("#class-bps", shown, Duration::from_secs(10))
            .expect("a live rate on the subscriber's page");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = Vec::new();
        let live = loop {
            let bps: f64 = browser
                .find("#class-bps")
                .and_then(|e| e.attribute("data-bps"))
                .ok()
                .flatten()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            seen.push(bps);
            if (bps / 20e6 - 1.0).abs() <= 0.02 {
                break bps;
            }
            assert!(
                Instant::now() < deadline,
                "the page's live rate never came within 2 % of 20 Mbit/s: {seen:?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        };
        eprintln!("subscriber page: {live:.0} bit/s live (seen {seen:?})");

        // Its flows: the UDP download, as htbd's flow table has it (`htb-cli flows`), in its class.
        let flows = browser
            .wait_for(
                "#flows",
                |t| t.contains("10.201.2.2:5201"),
                Duration::from_secs(5),
            )
            .expect("the subscriber's flows on its page");
        assert!(flows.contains("udp"), "{flows}");
        let page_bytes: u64 = browser
            .find("#flows tr[data-dport='5201']")
            .and_then(|e| e.attribute("data-bytes"))
            .ok()
            .flatten()
            .and_then(|v| v.parse().ok())
            .expect("the flow's bytes on the page");
        let cli: serde_json::Value =
            serde_json::from_str(&htbd.cli_ok(&["-j", "flows", "dev", "r2", "class", "1:10"]))
                .expect("htb-cli -j flows");
        let cli_flow = cli["flows"]
            .as_array()
            .and_then(|f| f.iter().find(|f| f["dport"] == 5201))
            .unwrap_or_else(|| panic!("htb-cli flows has no flow to port 5201: {cli}"));
        let cli_bytes = cli_flow["bytes"].as_u64().unwrap_or(0);
        eprintln!("the flow on the page: {page_bytes} bytes; htb-cli, a moment later: {cli_bytes}");
        // Seconds of a 20 Mbit/s class: megabytes, and the page's read came first.
        assert!(
            page_bytes > 1_000_000 && page_bytes <= cli_bytes,
            "the page's {page_bytes} bytes against htb-cli's {cli_bytes}: {cli_flow}"
        );

        // The tree page lists the subscriber under 1:1 with its rate.
        browser.goto(&format!("{base}/#/tree/r2/1:1")).unwrap();
        browser
            .wait_for(
                "#classes",
                |t| t.contains("1:10") && t.contains("1:20"),
                Duration::from_secs(5),
            )
            .expect("the tree page");
        browser
            .wait_for(
                "#classes tr[data-class='1:10'] .bps",
                shown,
                Duration::from_secs(5),
            )
            .expect("the tree page's live rate");
        browser.screenshot(&shots.join("tree.png")).unwrap();

        // Prometheus's rate of the class against the class's own counters over the same span.
        let (b0, t0) = class_bytes(&htbd);
        let p0 = Instant::now();
        std::thread::sleep(Duration::from_secs(8));
        let (b1, t1) = class_bytes(&htbd);
        let counters_bps = (b1 - b0) as f64 * 8.0 / (t1 - t0).as_secs_f64();
        std::thread::sleep(Duration::from_secs(2));
        let window = (Instant::now() - p0).as_secs().max(8);
        let promql =
            format!("rate(htb_class_bytes_total{{dev=\"r2\",class=\"1:10\"}}[{window}s]) * 8");
        let rows = prometheus.query(&promql).expect("PromQL");
        let prom_bps = rows.first().map(|(_, v)| *v).expect("a series for 1:10");
        eprintln!(
            "PromQL rate {:.4} Mbit/s, counters {:.4} Mbit/s",
            prom_bps / 1e6,
            counters_bps / 1e6
        );
        assert!(
            (prom_bps / counters_bps - 1.0).abs() <= 0.01,
            "PromQL {prom_bps} against the counters' {counters_bps}"
        );
        // The subscriber's page again, its charts filled by the seconds since it was found.
        browser.goto(&format!("{base}/#/class/r2/1:10")).unwrap();
        browser
            .wait_for("#class-bps", shown, Duration::from_secs(5))
            .expect("the subscriber's page");
        browser.screenshot(&shots.join("subscriber.png")).unwrap();
        let after = htbd.class_stats("r2", "1:10");
        assert!(
            after["drops"].as_u64() > before["drops"].as_u64(),
            "premise: the class was full (it dropped): {before} → {after}"
        );
        let _ = flow.wait_with_output();
        htbd.wait_drained("r2");

        // At rest, the page, the CLI and Prometheus give the same counters.
        let cli = htbd.class_stats("r2", "1:10");
        browser.goto(&format!("{base}/#/class/r2/1:10")).unwrap();
        let drops = cli["drops"].as_u64().unwrap();
        let page_drops = browser
            .wait_for(
                "#class-drops",
                |t| t.replace(',', "") == drops.to_string(),
                Duration::from_secs(5),
            )
            .expect("the page's drops are the CLI's");
        std::thread::sleep(Duration::from_secs(3));
        let rows = prometheus
            .query("htb_class_drops_total{dev=\"r2\",class=\"1:10\"}")
            .expect("PromQL");
        let prom_drops = rows.first().map(|(_, v)| *v).expect("a series");
        assert_eq!(
            prom_drops as u64, drops,
            "Prometheus's drops against the CLI's"
        );
        eprintln!("at rest: {drops} drops on the page ({page_drops}), in Prometheus and the CLI");

        // A label given live with htb-cli: searchable at once, shown by `class show -d`.
        htbd.cli_ok(&[
            "class",
            "label",
            "dev",
            "r2",
            "classid",
            "1:20",
            "name",
            "Guest Wi-Fi",
            "comment",
            "everyone else",
        ]);
        // A number is a circuit id's part, not a class handle.
        let (code, body) = curl(&["-H", &bearer, &format!("{base}/api/v1/search?q=17")]);
        assert!(
            code == 200 && body.contains("\"class\":\"1:10\"") && body.contains("Ann O'Neil"),
            "{code} {body}"
        );
        let (code, body) = curl(&["-H", &bearer, &format!("{base}/api/v1/search?q=guest")]);
        assert!(
            code == 200 && body.contains("\"class\":\"1:20\"") && body.contains("Guest Wi-Fi"),
            "{code} {body}"
        );
        let shown = htbd.cli_ok(&["-d", "class", "show", "dev", "r2", "classid", "1:20"]);
        assert!(
            shown.contains(" label name \"Guest Wi-Fi\" comment \"everyone else\""),
            "{shown}"
        );

        // "Why this class?" from the data plane's classifier: a matched address, one that only the
        // default class takes, and, once that class is gone, one that goes to the direct queue.
        let explain = |addr: &str| htbd.cli_ok(&["explain", addr, "dev", "r2"]);
        let matched = explain("10.201.2.2");
        assert!(
        matched.contains(
            "dev r2 to 10.201.2.2: filter pref 1 (dst 10.201.2.2/32) -> class 1:10, path 1:10 < 1:1"
        ),
        "{matched}"
    );
        let default = explain("10.201.2.99");
        assert!(
            default.contains(
                "dev r2 to 10.201.2.99: no filter matches -> default class 1:20, path 1:20 < 1:1"
            ),
            "{default}"
        );
        htbd.cli_ok(&["class", "del", "dev", "r2", "classid", "1:20"]);
        let unmatched = explain("10.201.2.99");
        assert!(
        unmatched.contains(
            "dev r2 to 10.201.2.99: no filter matches, no default class -> direct queue (unshaped)"
        ),
        "{unmatched}"
    );
        let json: serde_json::Value =
            serde_json::from_str(&htbd.cli_ok(&["-j", "explain", "10.201.2.2"]))
                .expect("explain -j");
        assert_eq!(json["ports"][0]["dev"], "r1", "{json}");
        assert_eq!(json["ports"][0]["outcome"]["by"], "unshaped", "{json}");
        let (code, body) = curl(&[
            "-H",
            &bearer,
            &format!("{base}/api/v1/explain?addr=10.201.2.2&dev=r2"),
        ]);
        assert!(
            code == 200 && body.contains("\"class\":\"1:10\""),
            "{code} {body}"
        );
    });
}
