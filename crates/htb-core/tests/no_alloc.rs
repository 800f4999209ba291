//! Enqueue and dequeue allocate nothing at steady state (counted with a counting allocator),
//! whatever the leaf discipline.

use htb_core::{
    ClassId, ClassSpec, Instant, LeafConfig, LeafSpec, Packet, Rate, Scheduler, SchedulerConfig,
    SfqSpec,
};

/// A packet of one of a few flows.
#[derive(Clone, Copy, Debug)]
struct Pkt(u32);

impl Packet for Pkt {
    fn len_bytes(&self) -> u32 {
        self.0
    }
    fn flow_hash(&self) -> u32 {
        (self.0 % 7).wrapping_mul(0x9e37_79b9)
    }
}

#[test]
fn steady_state_enqueue_dequeue_does_not_allocate() {
    let sfq = LeafSpec::Sfq(SfqSpec {
        perturb: Some(1),
        ..SfqSpec::default()
    })
    .resolve()
    .unwrap();
    for leaf in [
        LeafConfig::Pfifo { limit: 1000 },
        sfq,
        LeafConfig::default(),
    ] {
        steady_state(leaf);
    }
}

fn steady_state(leaf: LeafConfig) {
    let mut htb: Scheduler<Pkt> = Scheduler::new(SchedulerConfig {
        default_leaf: leaf,
        ..SchedulerConfig::default()
    });
    let root = ClassId::new(1, 1);
    let root_spec = ClassSpec::new(Rate::from_gbit(10));
    assert!(
        htb.add_class(Instant::ZERO, root, None, &root_spec)
            .unwrap()
            .purged
            .is_empty()
    );
    let leaves: Vec<ClassId> = (0x10..0x30).map(|m| ClassId::new(1, m)).collect();
    for (i, &leaf) in leaves.iter().enumerate() {
        let spec = ClassSpec::new(Rate::from_mbit(200))
            .with_ceil(Rate::from_gbit(10))
            .with_prio(i as u32 % 3);
        let change = htb
            .add_class(Instant::ZERO, leaf, Some(root), &spec)
            .unwrap();
        assert!(change.purged.is_empty());
    }
    // Warm-up: reach the steady-state backlog once so that the packet pool has grown.
    let mut now = 0u64;
    let cycle = |htb: &mut Scheduler<Pkt>, now: &mut u64| {
        for (i, &leaf) in leaves.iter().enumerate() {
            let len = 64 + (i as u32 * 97 + (*now / 50_000) as u32) % 1400;
            let _ = htb.enqueue(Instant::from_nanos(*now), leaf, Pkt(len));
        }
        *now += 50_000;
        while htb.dequeue(Instant::from_nanos(*now)).is_some() {}
        htb.drain_dropped().for_each(drop);
    };
    for _ in 0..2000 {
        cycle(&mut htb, &mut now);
    }
    let sent_before = htb.stats().packets_sent;
    let info = allocation_counter::measure(|| {
        for _ in 0..2000 {
            cycle(&mut htb, &mut now);
        }
    });
    let sent = htb.stats().packets_sent - sent_before;
    assert!(
        sent > 60_000,
        "the measured phase moved traffic ({sent} packets)"
    );
    assert_eq!(
        info.count_total, 0,
        "{leaf:?}: {sent} packets through enqueue/dequeue allocated: {info:?}"
    );
    htb.check().unwrap();
}
