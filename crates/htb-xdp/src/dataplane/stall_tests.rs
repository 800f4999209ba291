//! A worker kept from forwarding, in virtual time: passes every 20 µs through the same
//! [`StallWatch`] the engine's workers use, and none for 4 ms every 50 ms, as the lab imitates
//! a noisy host. With stall credit the class sends its rate over the run exactly; without, it
//! loses each stall beyond its burst, as the kernel's HTB does.

use htb_core::{ClassId, ClassSpec, Duration, Instant, Rate, Scheduler, SchedulerConfig};

use super::tests::{B, MAC_B, built, planes, set_tree, udp_frame};
use super::{Dataplane, Mode};
use crate::stall_watch::StallWatch;

const PASS: Duration = Duration::from_micros(20);

/// The L2 bit/s one class of `rate` sends from port b over two simulated seconds (after half a
/// second of warm-up), offered 1.5 times its rate, with the worker stalled for `stall` every
/// 50 ms and `credit` per stall.
fn sent_through_stalls(rate: Rate, stall: Duration, credit: Option<Duration>) -> f64 {
    let mut dp: Dataplane<_> = planes(Mode::Bridge, 16_384, 1024, 256, 1, 1).remove(0);
    let mut htb = Scheduler::new(SchedulerConfig {
        default_minor: 1,
        ..SchedulerConfig::default()
    });
    built(htb.add_class(
        Instant::ZERO,
        ClassId::new(1, 1),
        None,
        &ClassSpec::new(rate),
    ));
    assert_eq!(
        dp.apply(Instant::ZERO, vec![set_tree("b", htb, None)]).0,
        [Ok(0)]
    );
    let frame = udp_frame(1514, MAC_B, 0, 1000, 80);
    let offered = rate.bytes_per_sec() as f64 * 1.5;
    let mut watch = StallWatch::new(credit);
    let (mut now, mut arrived, mut start) = (Instant::ZERO, 0.0, 0);
    let (warm_up, end) = (
        Instant::from_nanos(500_000_000),
        Instant::from_nanos(2_500_000_000),
    );
    while now < end {
        // Frames keep arriving while the worker is away; they wait in the RX rings.
        arrived += offered * PASS.as_nanos() as f64 / 1e9;
        while arrived >= frame.len() as f64 {
            arrived -= frame.len() as f64;
            dp.rings_mut().deliver(0, &frame);
        }
        let in_period = now.as_nanos() % 50_000_000;
        if in_period >= 10_000_000 && in_period < 10_000_000 + stall.as_nanos() {
            now += PASS;
            continue;
        }
        if let Some(s) = watch.pass_begins(now) {
            dp.credit_stall(s.from, s.to, s.at_most);
        }
        dp.poll(now);
        dp.rings_mut().send(B, usize::MAX);
        if now == warm_up {
            start = dp.rings().wire(B).sent_bytes;
        }
        now += PASS;
    }
    assert!(
        dp.port_stats()[B].drops_queue > 0,
        "premise: the class was saturated (it dropped)"
    );
    (dp.rings().wire(B).sent_bytes - start) as f64 * 8.0 / 2.0
}

#[test]
fn stall_credit_keeps_a_full_class_at_its_rate_within_a_thousandth() {
    let stall = Duration::from_millis(4);
    for mbit in [10, 100, 500, 1000] {
        let rate = Rate::from_mbit(mbit);
        let want = rate.bits_per_sec() as f64;
        let err = |got: f64| (got - want) / want;
        let credited = err(sent_through_stalls(
            rate,
            stall,
            Some(Duration::from_millis(10)),
        ));
        let without = err(sent_through_stalls(rate, stall, None));
        eprintln!(
            "{mbit} Mbit/s: with credit {:+.4} %, without {:+.4} %",
            credited * 100.0,
            without * 100.0
        );
        assert!(
            credited.abs() < 0.001,
            "{mbit} Mbit/s with credit: {credited:+.5}"
        );
        // Without: each 4 ms stall costs what the 1 ms (+ an MTU) burst does not cover.
        let burst_ms = 1.0 + 1514.0 * 8.0 * 1e3 / want;
        let lost = (4.0 - burst_ms).max(0.0) / 50.0;
        assert!(
            (without + lost).abs() < 0.005,
            "{mbit} Mbit/s without credit: {without:+.5}, expected −{lost:.5}"
        );
    }
}

#[test]
fn a_quiet_worker_is_exact_with_or_without_credit() {
    let rate = Rate::from_mbit(100);
    let want = rate.bits_per_sec() as f64;
    for credit in [None, Some(Duration::from_millis(10))] {
        let got = sent_through_stalls(rate, Duration::ZERO, credit);
        assert!((got - want).abs() / want < 0.001, "{credit:?}: {got}");
    }
}
