use std::time::Duration as StdDuration;

use super::*;

const S: u64 = 1_000_000_000;

fn key(sport: u16) -> FlowKey {
    FlowKey {
        src: "10.0.0.1".parse().unwrap(),
        dst: "10.0.0.2".parse().unwrap(),
        proto: 17,
        sport,
        dport: 53,
        vlan: None,
        ingress: 0,
        egress: 1,
    }
}

fn table(entries: usize) -> FlowTable {
    FlowTable::new(FlowConfig {
        entries,
        ..FlowConfig::default()
    })
}

fn class() -> Option<ClassId> {
    Some(ClassId::new(1, 0x10))
}

#[test]
fn packets_of_a_flow_add_up_in_one_record() {
    let mut t = table(64);
    for i in 0..10 {
        t.observe(7, &key(1000), class(), 100 + i, 0, i as u64 * 1000);
    }
    t.observe(7, &key(1001), None, 60, 0, 50_000);
    let live = t.live(|_| true);
    assert_eq!(live.len(), 2, "two flows with one hash are two records");
    let r = live.iter().find(|r| r.key.sport == 1000).unwrap();
    assert_eq!((r.bytes, r.packets), (1045, 10));
    assert_eq!((r.first_ns, r.last_ns, r.class), (0, 9000, class()));
    assert_eq!(t.counters().live, 2);
    assert_eq!(t.take_outbox().count(), 0);
}

#[test]
fn idle_records_leave_after_the_idle_timeout_and_active_ones_start_a_new_interval() {
    let mut t = table(64);
    t.observe(1, &key(1), class(), 100, 0, 0);
    t.observe(2, &key(2), class(), 100, 0, 0);
    // Flow 2 keeps sending for 70 s; flow 1 stops.
    for s in 1..=70 {
        t.observe(2, &key(2), class(), 100, 0, s * S);
        t.sweep(s * S);
    }
    let out: Vec<FlowRecord> = t.take_outbox().collect();
    let idle: Vec<_> = out
        .iter()
        .filter(|r| r.end == Some(FlowEnd::Idle))
        .collect();
    let active: Vec<_> = out
        .iter()
        .filter(|r| r.end == Some(FlowEnd::Active))
        .collect();
    assert_eq!(idle.len(), 1, "{out:?}");
    assert_eq!((idle[0].key.sport, idle[0].packets), (1, 1));
    assert_eq!(active.len(), 1, "{out:?}");
    assert_eq!(active[0].key.sport, 2);
    assert_eq!(active[0].first_ns, 0);
    // The sweep saw it at 60 s: 61 packets by then.
    assert_eq!(active[0].packets, 61);
    let live = t.live(|_| true);
    assert_eq!(live.len(), 1);
    // The new interval starts at its first packet, after the timeout.
    assert_eq!((live[0].first_ns, live[0].packets), (61 * S, 10));
    assert_eq!(t.counters().exported, 2);
}

#[test]
fn fin_or_rst_ends_a_tcp_record_at_once() {
    let mut t = table(64);
    let mut k = key(443);
    k.proto = 6;
    t.observe(9, &k, class(), 60, 0x02, 0);
    t.observe(9, &k, class(), 1500, 0x10, 10);
    t.observe(9, &k, class(), 60, 0x11, 20);
    let out: Vec<FlowRecord> = t.take_outbox().collect();
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].end, out[0].tcp_flags, out[0].packets),
        (Some(FlowEnd::EndOfFlow), 0x13, 3)
    );
    assert_eq!(t.counters().live, 0);
}

#[test]
fn a_full_window_evicts_its_least_recently_seen_record() {
    let mut t = table(64);
    // WINDOW + 1 flows on one hash: the window holds WINDOW.
    for sport in 0..WINDOW as u16 {
        t.observe(5, &key(sport), None, 100, 0, u64::from(sport) + 100);
    }
    t.observe(5, &key(0), None, 100, 0, 1000); // flow 0 is now the most recent
    t.observe(5, &key(99), None, 100, 0, 2000);
    let out: Vec<FlowRecord> = t.take_outbox().collect();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].key.sport, out[0].end), (1, Some(FlowEnd::Evicted)));
    let c = t.counters();
    assert_eq!(
        (c.live, c.evicted, c.started),
        (WINDOW as u64, 1, WINDOW as u64 + 1)
    );
    assert!(t.live(|r| r.key.sport == 99).len() == 1);
}

#[test]
fn round_trips_retransmits_and_drops_go_to_their_record() {
    let mut t = table(64);
    t.observe(3, &key(80), class(), 100, 0, 0);
    for us in [900, 300, 500, 700, 100] {
        t.note_rtt(3, &key(80), us * 1000);
    }
    t.note_rtt(3, &key(81), 5); // no record: nothing
    t.note_retransmit(3, &key(80));
    t.note_drop(3);
    t.note_drop(4); // no record with that hash
    let r = t.live(|_| true)[0];
    assert_eq!(
        (r.rtt_min_ns, r.rtt_median_ns),
        (Some(100_000), Some(500_000))
    );
    assert_eq!((r.retransmits, r.leaf_drops), (1, 1));
}

#[test]
fn one_in_n_sampling_takes_every_nth_packet() {
    let mut t = FlowTable::new(FlowConfig {
        entries: 16,
        sampling: 4,
        ..FlowConfig::default()
    });
    let taken = (0..100).filter(|_| t.sample()).count();
    assert_eq!(taken, 25);
    let mut all = table(16);
    assert!((0..10).all(|_| all.sample()));
}

#[test]
fn a_sweep_covers_the_table_in_a_second_however_the_passes_fall() {
    let mut t = table(1024);
    for sport in 0..500 {
        t.observe(u32::from(sport) * 7919, &key(sport), None, 100, 0, 5 * S);
    }
    // Passes every 10 ms from 19 s: 10.24 places each, the fractions carried from pass to
    // pass (rounded down and forgotten, a sweep would take 1.024 s). The records go idle at
    // 20 s; every one is found within a second of it.
    let mut now = 19 * S;
    t.sweep(now);
    assert_eq!(t.counters().live, 500, "none idle at 19 s");
    while now < 21 * S + 10_000_000 {
        now += 10_000_000;
        t.sweep(now);
    }
    assert_eq!(t.counters().live, 0);
    assert_eq!(t.take_outbox().count(), 500);
}

#[test]
fn flush_hands_over_every_record_and_memory_is_stated() {
    let mut t = table(100);
    for sport in 0..20 {
        t.observe(u32::from(sport), &key(sport), None, 100, 0, 0);
    }
    t.flush();
    let out: Vec<FlowRecord> = t.take_outbox().collect();
    assert_eq!(out.len(), 20);
    assert!(out.iter().all(|r| r.end == Some(FlowEnd::Forced)));
    let per = FlowConfig::default().memory_bytes() / 65_536;
    assert!((100..400).contains(&per), "{per} bytes per record");
}

#[test]
fn an_interval_that_saw_nothing_is_freed_without_a_record() {
    let mut t = FlowTable::new(FlowConfig {
        entries: 64,
        active_timeout: StdDuration::from_secs(10),
        ..FlowConfig::default()
    });
    for s in 0..=10 {
        t.observe(1, &key(1), class(), 100, 0, s * S);
    }
    t.sweep(10 * S);
    let active: Vec<FlowRecord> = t.take_outbox().collect();
    assert_eq!(active.len(), 1);
    assert_eq!(
        (active[0].end, active[0].packets),
        (Some(FlowEnd::Active), 11)
    );
    // Quiet from then on: at the idle timeout the empty interval goes, exporting nothing.
    t.sweep(26 * S);
    assert_eq!(t.take_outbox().count(), 0);
    let c = t.counters();
    assert_eq!((c.live, c.exported), (0, 1));
}
