//! tc's `mq` against a live htbd in the netns lab: LibreQoS's layout — an `mq` root, one HTB
//! tree per TX queue with fq_codel leaves — run verbatim through `htb-cli -b` on 2-queue veths
//! with two workers, each tree shaped on its own, with no rate shared between them.
//! Needs root and network namespaces, so each test is `#[ignore]`d; `scripts/test.sh` includes
//! them as root.

use htb_lab::{Htbd, Lab, Promise, assert_owed};

/// Router mode, two workers, no tree on either port: the batch builds r2's.
const NO_TREES: &str = "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\
     workers = 2\n\n[[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n";

/// LibreQoS's lines for two queues (`mq_setup`, with fq_codel as its sqm), then one circuit
/// per queue; each tree's root is 30 Mbit/s, each circuit may take all of it. htbd steers by
/// filters where LibreQoS steers by its XDP map: UDP port 5201 to queue 0's circuit, 5202 to
/// queue 1's.
const BATCH: &str = include_str!("../testdata/libreqos-mq.batch");

fn bytes(htbd: &Htbd, class: &str) -> u64 {
    htbd.class_stats("r2", class)["bytes"].as_u64().unwrap_or(0)
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn libreqos_mq_batch_shapes_each_queues_tree_on_its_own() {
    htb_lab::remeasured(|| {
        let lab = Lab::up_with_queues("htbm", "router", 2);
        let htbd = Htbd::start(&lab, NO_TREES);
        let file = htbd.dir().join("libreqos.batch");
        std::fs::write(&file, BATCH).unwrap();
        htbd.cli_ok(&["-b", file.to_str().unwrap()]);

        // tc's view of it.
        let qdiscs = htbd.cli_ok(&["qdisc", "show", "dev", "r2"]);
        for line in [
            "qdisc mq 7fff: root \n",
            "qdisc htb 1: parent 7fff:1 r2q 10 default 0x2 ",
            "qdisc htb 2: parent 7fff:2 r2q 10 default 0x2 ",
            "qdisc fq_codel 9004: parent 2:2 ",
        ] {
            assert!(qdiscs.contains(line), "{line:?} missing from:\n{qdiscs}");
        }
        let classes = htbd.cli_ok(&["class", "show", "dev", "r2"]);
        assert!(
            classes.starts_with("class mq 7fff:1 root leaf 1: \nclass mq 7fff:2 root leaf 2: \n"),
            "{classes}"
        );

        // Both circuits busy, each offered 1.5× its tree: each tree gives its 30 Mbit/s, 60
        // together (one root shared by the queues would give 30).
        let before = [htbd.class_stats("r2", "1:3"), htbd.class_stats("r2", "2:3")];
        let (b1, b2) = (bytes(&htbd, "1:3"), bytes(&htbd, "2:3"));
        let (load, stalls) = htbd.accounted(|| lab.udp_loads(&[(5201, "45M"), (5202, "45M")], 7));
        load.assert_saturates("two trees of 30 Mbit/s", 60e6);
        htbd.assert_class_saturated("r2", "1:3", &before[0]);
        htbd.assert_class_saturated("r2", "2:3", &before[1]);
        let (s1, s2) = (bytes(&htbd, "1:3") - b1, bytes(&htbd, "2:3") - b2);
        eprintln!("1:3 sent {s1} bytes, 2:3 {s2} bytes");
        let share = s1 as f64 / (s1 + s2) as f64;
        assert!(
            (0.45..=0.55).contains(&share),
            "each tree gets its own 30 Mbit/s: 1:3 had {:.1} % of the bytes",
            share * 100.0
        );
        // Two trees of 30 Mbit/s: their rates and bursts add up.
        let tree = Promise::class(30e6);
        assert_owed(
            "queue 0's and queue 1's trees together",
            &load.delivered,
            &Promise::class(60e6).with_burst(2.0 * tree.burst_bytes),
            &stalls,
            0.01,
        );
        let status = htbd.status();
        assert_eq!(status.workers.len(), 2, "{status:?}");
        assert!(
            status.workers.iter().all(|w| w.handoff_drops == 0),
            "{status:?}"
        );

        // Per-tree counters: mq's Sent is its trees' sum, as the kernel's mq_dump adds them.
        let stats = htbd.cli_ok(&["-s", "-j", "qdisc", "show", "dev", "r2"]);
        let list: serde_json::Value = serde_json::from_str(&stats).unwrap();
        let sent = |handle: &str| {
            list.as_array()
                .unwrap()
                .iter()
                .find(|q| q["handle"] == handle)
                .and_then(|q| q["bytes"].as_u64())
                .unwrap_or_else(|| panic!("no qdisc {handle}: {stats}"))
        };
        assert!(sent("1:") > 0 && sent("2:") > 0, "{stats}");
        assert_eq!(sent("7fff:"), sent("1:") + sent("2:"), "{stats}");

        // The layout survives a crash (journal) and a clean restart (state file).
        let mut htbd = htbd;
        htbd.kill9();
        let htbd = Htbd::start_in(&lab, NO_TREES, htbd.into_dir());
        assert_eq!(htbd.cli_ok(&["qdisc", "show", "dev", "r2"]), qdiscs);
        let (status, dir) = htbd.terminate();
        assert!(status.success(), "htbd stopped with {status}");
        let htbd = Htbd::start_in(&lab, NO_TREES, dir);
        assert_eq!(htbd.cli_ok(&["class", "show", "dev", "r2"]), classes);

        // Queue 1's tree goes alone: its circuit's traffic leaves unclassified, through queue 0's
        // tree's default class (a tree of the worker that received it, or the only one left);
        // queue 0's circuit keeps its rate.
        htbd.cli_ok(&[
            "qdisc", "del", "dev", "r2", "parent", "7fff:2", "handle", "2:",
        ]);
        htbd.assert_shapes(
            "queue 0's tree, the only one left",
            ("r2", "1:2"),
            &Promise::class(30e6),
            0.01,
            || lab.udp_loads(&[(5201, "45M"), (5202, "45M")], 5),
        );
    });
}
