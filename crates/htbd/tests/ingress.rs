//! Both directions on one port: sqm-scripts' simplest.qos and wondershaper 1.4.1, each with
//! its download half (r2's ingress qdisc redirecting to an IFB, whose tree shapes what r2
//! receives), run verbatim through `htb-cli -b` against htbd. An upload (node-1 → node-2, out
//! of r2) and a download (node-2 → node-1, in through r2) run at once, each offered more than
//! its class's rate; each arrives within 1 % of what its class owed in the window at the rate
//! HTB's arithmetic gives it.
//!
//! Needs root and network namespaces, so it is `#[ignore]`d; `scripts/test.sh` includes it as
//! root.

use htb_lab::traffic::{FRAME as FRAME_LEN, FlowSpec, script, udp_flows, udp_flows_down};
use htb_lab::{Htbd, Lab, Promise, assert_owed};

/// Router mode, r1 and r2 unshaped, and the IFB the script redirects to: the script builds
/// the trees.
fn config(ifb: &str) -> String {
    format!(
        "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\n\
         [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n\n\
         [[interface]]\nname = \"{ifb}\"\ntype = \"ifb\"\n"
    )
}

/// The L2 length of the lab's UDP frames.
const FRAME: f64 = FRAME_LEN as f64;

/// Seconds each measurement runs, and the first ones it leaves out.
const SECS: u32 = 5;
const WARMUP: f64 = 1.5;

/// One direction's class: its device and id, the L2 rate HTB's arithmetic gives it, and what
/// is offered.
struct Direction {
    dev: &'static str,
    class: &'static str,
    expected_bps: f64,
    offered_bps: f64,
}

/// Applies `file` to a fresh htbd with IFB port `ifb`, runs the upload and the download at
/// once, and checks each against its class.
fn both_directions(lab: &Lab, file: &str, ifb: &str, up: &Direction, down: &Direction) {
    let htbd = Htbd::start(lab, &config(ifb));
    let path = script(file);
    htbd.cli_ok(&["-b", path.to_str().unwrap()]);
    // The ingress qdisc and its redirect read back as tc prints them.
    let qdiscs = htbd.cli_ok(&["qdisc", "show", "dev", "r2"]);
    assert!(
        qdiscs.contains("qdisc ingress ffff: parent ffff:fff1"),
        "{qdiscs}"
    );
    let filters = htbd.cli_ok(&["filter", "show", "dev", "r2", "parent", "ffff:"]);
    assert!(
        filters.contains(&format!("mirred (Egress Redirect to device {ifb})")),
        "{filters}"
    );
    let before = (
        htbd.class_stats(up.dev, up.class),
        htbd.class_stats(down.dev, down.class),
    );
    let spec = |d: &Direction| {
        vec![FlowSpec {
            port: 5201,
            offered_bps: d.offered_bps,
        }]
    };
    let ((upload, download), stalls) = htbd.accounted(|| {
        std::thread::scope(|s| {
            let download = s.spawn(|| udp_flows_down(lab, &spec(down), SECS, WARMUP));
            let upload = udp_flows(lab, &spec(up), SECS, WARMUP);
            (upload, download.join().expect("the download's measurement"))
        })
    });
    for (d, measured, stats) in [(up, &upload, &before.0), (down, &download, &before.1)] {
        let what = format!("{file}: {} {}", d.dev, d.class);
        // Premise: the class was over its limit, so the rate is the shaper's.
        htbd.assert_class_saturated(d.dev, d.class, stats);
        assert_owed(
            &what,
            &measured[0].counted,
            &Promise::class(d.expected_bps),
            &stalls,
            0.01,
        );
    }
    // What reached the IFB is what r2 received and redirected: the status counts both.
    let status = htbd.status();
    let port = |name: &str| {
        status
            .ports
            .iter()
            .find(|p| p.dev == name)
            .unwrap_or_else(|| panic!("no port {name} in status"))
            .clone()
    };
    let (r2, ifb_port) = (port("r2"), port(ifb));
    assert!(
        ifb_port.rx_packets > 0 && ifb_port.rx_packets <= r2.rx_packets,
        "{ifb}: {} frames in, r2 received {}",
        ifb_port.rx_packets,
        r2.rx_packets
    );
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn sqm_and_wondershaper_shape_both_directions_of_one_port() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbi", "router");
        // stab overhead 34: each 1442-byte frame counts 1476 bytes against its class.
        let stab = FRAME / (FRAME + 34.0);
        both_directions(
            &lab,
            "sqm-simplest-both.batch",
            "ifb4r2",
            &Direction {
                dev: "r2",
                class: "1:10",
                expected_bps: 20e6 * stab,
                offered_bps: 30e6,
            },
            &Direction {
                dev: "ifb4r2",
                class: "1:10",
                expected_bps: 30e6 * stab,
                offered_bps: 45e6,
            },
        );
        // wondershaper: the upload lands in the bulk class 1:20, which borrows up to its ceil of
        // 95 % of 20 Mbit/s; the download in ifb0's one class of 30 Mbit/s.
        both_directions(
            &lab,
            "wondershaper-1.4.1-both.batch",
            "ifb0",
            &Direction {
                dev: "r2",
                class: "1:20",
                expected_bps: 19e6,
                offered_bps: 30e6,
            },
            &Direction {
                dev: "ifb0",
                class: "2:1",
                expected_bps: 30e6,
                offered_bps: 45e6,
            },
        );
    });
}
