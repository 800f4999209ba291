//! tc's ingress qdisc and IFB devices on the simulated UMEM: frames received on port a are
//! redirected by a's ingress filter into IFB port `ifb0`'s tree, and leave through port b at
//! that tree's rate; frames the filter does not take, or with no ingress qdisc, go straight
//! on; an ingress policer drops; every frame comes back.

use std::sync::Arc;

use htb_classify::{ControlAction, Filter, Match, Police, PoliceConfig};
use htb_core::{ClassSpec, Duration, Instant, Rate, Scheduler, SchedulerConfig};

use super::sim::SimRings;
use super::tests::{
    A, B, FRAME_SIZE, MAC_A, MAC_B, QUEUES, bare_port, built, class, solo_crew, udp_frame,
};
use super::{Dataplane, Mode, PortSetup, Progress};
use crate::plane_op::{IngressHook, PlaneOp};

/// The IFB's index: after the two interfaces.
const IFB: usize = 2;

/// A filter of a's ingress qdisc taking what goes to UDP port `dport` (every packet: `None`).
fn ingress_filter(dport: Option<&str>) -> Filter {
    Filter {
        police: None,
        prio: 10,
        matcher: Match {
            dport: dport.map(|p| p.parse().unwrap()),
            ..Match::default()
        },
        class: class(1),
    }
}

/// Bridge a ↔ b, nothing shaped on either; `ifb0` holds one class 1:1 of `rate`, the default;
/// a's ingress qdisc holds `ingress` (each filter with the port its mirred redirects to).
fn plane(rate: Rate, ingress: Option<Vec<(Filter, Option<String>)>>) -> Dataplane<SimRings> {
    let mut htb = Scheduler::new(SchedulerConfig {
        default_minor: 1,
        ..SchedulerConfig::default()
    });
    built(htb.add_class(Instant::ZERO, class(1), None, &ClassSpec::new(rate)));
    let port = bare_port;
    let mut a = port("a", MAC_A, Some(B));
    a.ingress = ingress.map(|f| Arc::new(IngressHook::new(f)));
    let ports = vec![
        a,
        port("b", MAC_B, Some(A)),
        PortSetup {
            trees: vec![(htb, None)],
            ifb: true,
            ..port("ifb0", [0; 6], None)
        },
    ];
    let rings = SimRings::new(8192, FRAME_SIZE, 512, &QUEUES, 1);
    Dataplane::new(
        rings,
        Mode::Bridge,
        ports,
        256,
        FRAME_SIZE as u32,
        solo_crew(),
    )
}

/// Offers `per_step` frames to UDP port `dport` on a's channels every 0.5 ms for one simulated
/// second; returns the bit/s that left b from 0.2 s on.
fn delivered(dp: &mut Dataplane<SimRings>, dport: u16, per_step: usize) -> f64 {
    let frame = udp_frame(1500, MAC_B, 0, 1000, dport);
    let mut now = Instant::ZERO;
    let mut start = 0;
    for i in 0..2000 {
        for n in 0..per_step {
            dp.rings_mut().deliver(n % 2, &frame);
        }
        now += Duration::from_micros(500);
        while dp.poll(now) == Progress::Moved {
            dp.rings_mut().send(B, usize::MAX);
        }
        if i == 399 {
            start = dp.rings().wire(B).sent_bytes;
        }
    }
    assert_eq!(dp.unaccounted_frames(), 0, "every frame is in one place");
    (dp.rings().wire(B).sent_bytes - start) as f64 * 8.0 / 0.8
}

#[test]
fn a_redirected_download_leaves_at_the_ifb_trees_rate() {
    let rate = Rate::from_mbit(20);
    let mut dp = plane(
        rate,
        Some(vec![(ingress_filter(None), Some("ifb0".into()))]),
    );
    // One 1500-byte frame per 0.5 ms offers 24 Mbit/s, 1.2 times the rate.
    let got = delivered(&mut dp, 80, 1);
    let want = rate.bits_per_sec() as f64;
    assert!(
        ((got - want) / want).abs() < 0.01,
        "{got:.0} bit/s through a 20 Mbit/s IFB tree"
    );
    let stats = dp.port_stats();
    assert!(
        stats[IFB].drops_queue > 0,
        "premise: the IFB's class was saturated"
    );
    assert_eq!(
        stats[IFB].rx_packets, stats[A].rx_packets,
        "every frame a received went through the IFB"
    );
    assert!(stats[IFB].tx_packets > 0 && stats[B].tx_packets >= stats[IFB].tx_packets - 512);
}

#[test]
fn what_no_ingress_filter_takes_goes_straight_on() {
    let rate = Rate::from_mbit(20);
    let mut dp = plane(
        rate,
        Some(vec![(ingress_filter(Some("5001")), Some("ifb0".into()))]),
    );
    // Port 80 is not the filter's: unshaped, all 24 Mbit/s arrive.
    let got = delivered(&mut dp, 80, 1);
    assert!(got > 1.19 * rate.bits_per_sec() as f64, "{got:.0} bit/s");
    assert_eq!(dp.port_stats()[IFB].rx_packets, 0);
    // Taking the ingress qdisc away leaves a's traffic unshaped too, and a new one redirecting
    // everything shapes it from the next frame on.
    let mut dp = plane(rate, None);
    assert!(delivered(&mut dp, 5001, 1) > 1.19 * rate.bits_per_sec() as f64);
    let hook = IngressHook::new(vec![(ingress_filter(None), Some("ifb0".into()))]);
    let op = PlaneOp::SetIngress {
        port: "a".into(),
        ingress: Some(Arc::new(hook)),
    };
    assert_eq!(dp.apply(Instant::ZERO, vec![op]).0, [Ok(0)]);
    let before = dp.port_stats()[IFB].rx_packets;
    delivered(&mut dp, 5001, 1);
    assert!(dp.port_stats()[IFB].rx_packets > before);
}

#[test]
fn an_ingress_policer_drops_what_exceeds_it() {
    let police = PoliceConfig {
        rate: Some(Rate::from_mbit(5)),
        burst: 15_000,
        exceed: ControlAction::Drop,
        ..PoliceConfig::default()
    };
    let filter = Filter {
        police: Some(Police::new(police)),
        ..ingress_filter(None)
    };
    // wondershaper 1.1a's download half: police on ingress, no redirect.
    let mut dp = plane(Rate::from_mbit(20), Some(vec![(filter, None)]));
    let got = delivered(&mut dp, 80, 2);
    let want = 5e6;
    assert!(
        ((got - want) / want).abs() < 0.03,
        "{got:.0} bit/s through a 5 Mbit/s ingress policer"
    );
    assert!(dp.port_stats()[A].drops_police > 0);
}
