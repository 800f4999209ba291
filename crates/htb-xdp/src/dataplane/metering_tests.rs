//! Flow metering on the data plane: each frame counts in its flow's record with its class,
//! round trips and retransmissions; ended records reach the export ring, and a full ring loses
//! them, counted.

use std::time::Duration as StdDuration;

use htb_core::{Duration, Instant};

use super::rtt_tests::plane;
use super::tests::class;
use crate::flow_table::{FlowConfig, FlowEnd, FlowTable};
use crate::rtt::tests::{ACK, tcp};

const MS: u64 = 1_000_000;

fn metered(
    ring: usize,
) -> (
    super::Dataplane<super::sim::SimRings>,
    std::sync::mpsc::Receiver<crate::flow_table::FlowRecord>,
) {
    let mut dp = plane();
    let (sink, records) = std::sync::mpsc::sync_channel(ring);
    dp.set_metering(
        FlowTable::new(FlowConfig {
            entries: 64,
            idle_timeout: StdDuration::from_secs(2),
            ..FlowConfig::default()
        }),
        sink,
    );
    (dp, records)
}

#[test]
fn each_frame_counts_in_its_flows_record_with_its_class_and_round_trip() {
    let (mut dp, records) = metered(16);
    let (n1, n2) = ([10, 0, 1, 1], [10, 0, 2, 2]);
    let data = tcp(n1, n2, (40000, 5201), 1, ACK, Some((500, 9)), 1000);
    dp.rings_mut().deliver(0, &data);
    dp.poll(Instant::from_nanos(MS));
    let ack = tcp(n2, n1, (5201, 40000), 1, ACK, Some((77, 500)), 0);
    dp.rings_mut().deliver(2, &ack);
    dp.poll(Instant::from_nanos(7 * MS + MS / 2));
    // The same segment again: a retransmission.
    dp.rings_mut().deliver(0, &data);
    dp.poll(Instant::from_nanos(8 * MS));
    let live = dp.flow_table().unwrap().live(|_| true);
    assert_eq!(live.len(), 2, "{live:?}");
    let down = live.iter().find(|r| r.key.dport == 5201).unwrap();
    assert_eq!((down.key.ingress, down.key.egress), (0, 1));
    assert_eq!(down.class, Some(class(0x10)), "b's default class");
    assert_eq!(down.packets, 2);
    assert_eq!(down.bytes, 2 * (data.len() as u64 - 14), "IP bytes");
    assert_eq!((down.first_ns, down.last_ns), (MS, 8 * MS));
    assert_eq!(down.tcp_flags, ACK);
    // The ACK's echo is the data direction's round trip.
    assert_eq!(down.rtt_min_ns, Some(6 * MS + MS / 2));
    assert_eq!(down.rtt_median_ns, Some(6 * MS + MS / 2));
    assert_eq!(down.retransmits, 1);
    let up = live.iter().find(|r| r.key.sport == 5201).unwrap();
    assert_eq!(
        (up.packets, up.class, up.rtt_min_ns),
        (1, None, None),
        "a has no tree"
    );
    // Idle for 2 s: both end and go to the ring.
    dp.poll(Instant::from_nanos(3_000 * MS));
    let ended: Vec<_> = records.try_iter().collect();
    assert_eq!(ended.len(), 2, "{ended:?}");
    assert!(ended.iter().all(|r| r.end == Some(FlowEnd::Idle)));
    assert_eq!(dp.flow_table().unwrap().counters().live, 0);
    super::tests::drain(&mut dp, Instant::ZERO + Duration::from_secs(4));
}

#[test]
fn a_full_export_ring_loses_records_counted_and_the_rest_go_at_stop() {
    let (mut dp, records) = metered(1);
    for port in 0..3 {
        let f = tcp(
            [10, 0, 1, 1],
            [10, 0, 2, 2],
            (1000 + port, 80),
            1,
            ACK,
            None,
            100,
        );
        dp.rings_mut().deliver(0, &f);
    }
    dp.poll(Instant::from_nanos(MS));
    dp.poll(Instant::from_nanos(3_000 * MS));
    let counters = dp.flow_table().unwrap().counters();
    assert_eq!(
        (counters.exported, counters.export_drops),
        (3, 2),
        "{counters:?}"
    );
    assert_eq!(records.try_iter().count(), 1);
    // At stop, the flows still running are forced out.
    let f = tcp([10, 0, 1, 1], [10, 0, 2, 2], (2000, 80), 1, ACK, None, 100);
    dp.rings_mut().deliver(0, &f);
    dp.poll(Instant::from_nanos(3_001 * MS));
    dp.flush_flows(Instant::from_nanos(3_002 * MS));
    let forced: Vec<_> = records.try_iter().collect();
    assert_eq!(forced.len(), 1);
    assert_eq!(forced[0].end, Some(FlowEnd::Forced));
    super::tests::drain(&mut dp, Instant::ZERO + Duration::from_secs(4));
}
