//! Round trips on the data plane: a port that measures them puts each TCP round trip down to
//! the class of the segment whose timestamp came back.

use htb_core::{ClassId, Duration, Instant};

use super::sim::SimRings;
use super::tests::{A, B, FRAME_SIZE, MAC_A, MAC_B, QUEUES, bare_port, class, solo_crew};
use super::{Dataplane, Mode, PortSetup};
use crate::rtt::tests::{ACK, tcp};

pub(super) fn plane() -> Dataplane<SimRings> {
    let crew = solo_crew();
    let mut tree = htb_core::Scheduler::new(htb_core::SchedulerConfig {
        default_minor: 0x10,
        ..htb_core::SchedulerConfig::default()
    });
    let spec = htb_core::ClassSpec::new(htb_core::Rate::from_mbit(100));
    let _ = tree
        .add_class(Instant::ZERO, class(0x10), None, &spec)
        .unwrap();
    let ports = vec![
        bare_port("a", MAC_A, Some(B)),
        PortSetup {
            trees: vec![(tree, None)],
            rtt: true,
            ..bare_port("b", MAC_B, Some(A))
        },
    ];
    let rings = SimRings::new(4096, FRAME_SIZE, 256, &QUEUES, 1);
    Dataplane::new(rings, Mode::Bridge, ports, 64, FRAME_SIZE as u32, crew)
}

#[test]
fn a_round_trip_is_put_down_to_the_class_the_timestamp_left_through() {
    let mut dp = plane();
    let (n1, n2) = ([10, 0, 1, 1], [10, 0, 2, 2]);
    // Data towards node-2 leaves through b (1:10, the default), TSval 500, at 1 ms ...
    let data = tcp(n1, n2, (40000, 5201), 1, ACK, Some((500, 9)), 1000);
    dp.rings_mut().deliver(0, &data);
    dp.poll(Instant::from_nanos(1_000_000));
    // ... and node-2's ACK echoing it comes back through a at 7.5 ms; a retransmitted
    // segment counts for the class too.
    let ack = tcp(n2, n1, (5201, 40000), 1, ACK, Some((77, 500)), 0);
    dp.rings_mut().deliver(2, &ack);
    dp.poll(Instant::from_nanos(7_500_000));
    dp.rings_mut().deliver(0, &data);
    dp.poll(Instant::from_nanos(8_000_000));
    let s = dp.class_stats("b", &[class(0x10)]).unwrap();
    let rtt = s.rtt[0].clone().expect("1:10 has round trips");
    assert_eq!(rtt.samples, 1);
    assert_eq!(rtt.quantile(0.5), Some(6_500), "µs");
    assert_eq!(rtt.retransmits, 1);
    // Port a does not measure: node-2's segments count nowhere.
    let a = dp.class_stats("a", &[ClassId::new(1, 0x10)]).unwrap();
    assert_eq!(a.rtt[0], None);
    super::tests::drain(&mut dp, Instant::ZERO + Duration::from_millis(10));
}
