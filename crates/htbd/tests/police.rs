//! `action police` on filters against a live htbd in the netns lab: a policer passes its rate
//! and drops (or hands on) the rest, as the kernel's `act_police` does. This kernel has no
//! act_police, so the reference is its arithmetic: a saturated policer passes `rate` (its
//! burst drains in the first milliseconds, before the measurement window).
//!
//! Needs root and network namespaces, so each test is `#[ignore]`d; `scripts/test.sh` includes
//! them as root.

use htb_lab::traffic::{FlowSpec, udp_flows};
use htb_lab::{Htbd, Lab, Promise, assert_owed};
use serde_json::Value;

const NO_TREES: &str = "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\n\
     [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n";

/// A 100 Mbit/s tree whose default class 1:20 takes 3 Mbit/s; port 5201 policed at 5 Mbit/s
/// with drop (u32's own `police`), port 5202 at 5 Mbit/s with `continue` (the `action` form),
/// its excess then unclassified, so in the default class.
const SCRIPT: &str = "\
qdisc add dev r2 root handle 1: htb default 20
class add dev r2 parent 1: classid 1:1 htb rate 100mbit
class add dev r2 parent 1:1 classid 1:10 htb rate 50mbit ceil 100mbit
class add dev r2 parent 1:1 classid 1:20 htb rate 3mbit ceil 3mbit
filter add dev r2 parent 1: protocol ip prio 1 u32 match ip dport 5201 0xffff police rate 5mbit burst 20k drop flowid 1:10
filter add dev r2 parent 1: protocol ip prio 2 u32 match ip dport 5202 0xffff action police rate 5mbit burst 20k conform-exceed continue/ok flowid 1:10
";

fn police_stats(htbd: &Htbd, prio: u64) -> Value {
    let out = htbd.cli_ok(&["-s", "-j", "filter", "show", "dev", "r2"]);
    let list: Value = serde_json::from_str(&out).expect("filter show -j");
    list.as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["pref"] == prio)
        .find_map(|f| f["options"]["actions"].get(0).cloned())
        .unwrap_or_else(|| panic!("no policer at prio {prio}: {out}"))
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_policer_passes_its_rate_and_drops_or_hands_on_the_rest() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbp", "router");
        let htbd = Htbd::start(&lab, NO_TREES);
        let file = htbd.dir().join("police.batch");
        std::fs::write(&file, SCRIPT).unwrap();
        htbd.cli_ok(&["-b", file.to_str().unwrap()]);
        let shown = htbd.cli_ok(&["filter", "show", "dev", "r2"]);
        assert!(
            shown.contains("police 0x1 rate 5Mbit burst 20Kb mtu 2Kb action drop overhead 0b"),
            "{shown}"
        );
        // conform ok is tc's default: no TCA_POLICE_RESULT, so no "/pass".
        assert!(shown.contains("action continue overhead 0b"), "{shown}");

        let flows = [
            FlowSpec {
                port: 5201,
                offered_bps: 20e6,
            },
            FlowSpec {
                port: 5202,
                offered_bps: 20e6,
            },
        ];
        let (got, stalls) = htbd.accounted(|| udp_flows(&lab, &flows, 7, 2.0));
        // Premise: both policers were over their rate (else the generator set the rate).
        for prio in [1, 2] {
            let s = police_stats(&htbd, prio);
            let over = s["stats"]["overlimits"].as_u64().unwrap_or(0);
            let packets = s["stats"]["packets"].as_u64().unwrap_or(0);
            eprintln!("prio {prio}: {packets} packets through the policer, {over} over its rate");
            assert!(
                over > packets / 3,
                "prio {prio}: premise failed: the policer was rarely over its rate ({s})"
            );
        }
        // Drop: the policer's rate. Continue: the rate through 1:10, the rest through the default
        // class's 3 Mbit/s.
        // The policer's burst (20 KB) is 33 ms of its rate: longer than a stall.
        let policer = Promise::class(5e6).with_burst(20_480.0);
        assert_owed(
            "5201, police … drop",
            &got[0].counted,
            &policer,
            &stalls,
            0.01,
        );
        assert_owed(
            "5202, police … continue",
            &got[1].counted,
            &Promise::class(8e6),
            &stalls,
            0.01,
        );
        // The drops show where the kernel counts them: the policer's and the root qdisc's.
        let dropped = police_stats(&htbd, 1)["stats"]["drops"]
            .as_u64()
            .unwrap_or(0);
        assert!(dropped > 1000, "policer drops: {dropped}");
        let qdisc: Value =
            serde_json::from_str(&htbd.cli_ok(&["-s", "-j", "qdisc", "show", "dev", "r2"]))
                .unwrap();
        let qdisc_drops = qdisc[0]["drops"].as_u64().unwrap_or(0);
        assert!(
            qdisc_drops >= dropped,
            "qdisc drops {qdisc_drops} < policer drops {dropped}"
        );
        assert_eq!(
            police_stats(&htbd, 2)["stats"]["drops"].as_u64(),
            Some(0),
            "continue drops nothing"
        );
    });
}
