//! tc's `mq` on the data plane: a port with one tree per `mq` class, each served by the worker
//! owning its queue; a filter steers its packets to the tree of the class it names, and
//! unclassified packets stay on a tree of the worker that received them.

use std::sync::Arc;

use htb_classify::{Classifier, Filter, Match};
use htb_core::{ClassId, ClassSpec, Instant, Rate, Scheduler, SchedulerConfig};

use super::sim::{SimParcel, SimRings};
use super::tests::{
    A, B, FRAME_SIZE, MAC_A, MAC_B, QUEUES, bare_port, built, crews, drain, udp_frame,
};
use super::{Dataplane, Mode, PortSetup};
use crate::crew::Crew;
use crate::frame::Frame;
use crate::rings::Rings;

/// Tree `major:` of LibreQoS's shape: `major:1` at 100 Mbit/s, `major:2` (its default) and
/// `major:10`, each 10 Mbit/s borrowing up to the root.
fn tree(major: u16) -> Scheduler<Frame> {
    let id = |minor| ClassId::new(major, minor);
    let mut htb = Scheduler::new(SchedulerConfig {
        major,
        default_minor: 2,
        ..SchedulerConfig::default()
    });
    let root = Rate::from_mbit(100);
    built(htb.add_class(Instant::ZERO, id(1), None, &ClassSpec::new(root)));
    for minor in [2, 0x10] {
        built(htb.add_class(
            Instant::ZERO,
            id(minor),
            Some(id(1)),
            &ClassSpec::new(Rate::from_mbit(10)).with_ceil(root),
        ));
    }
    htb
}

/// UDP port 5001 → `1:10`, 5002 → `2:10`.
fn filters() -> Vec<Filter> {
    [(5001, 1), (5002, 2)]
        .into_iter()
        .map(|(port, major)| Filter {
            police: None,
            prio: 1,
            matcher: Match {
                dport: Some(format!("{port}").parse().unwrap()),
                ..Match::default()
            },
            class: ClassId::new(major, 0x10),
        })
        .collect()
}

/// Worker `me` of `workers`, bridging a to b; port b has mq trees `1:` (class 1, TX queue 0)
/// and `2:` (class 2, TX queue 1). Returns the other workers' crews too.
fn plane(me: usize, workers: usize) -> (Dataplane<SimRings>, Vec<Crew<SimParcel>>) {
    let mut crews = crews(workers);
    let crew = crews.remove(me);
    let ports = vec![
        bare_port("a", MAC_A, Some(B)),
        PortSetup {
            trees: vec![(tree(1), Some(1)), (tree(2), Some(2))],
            classifier: Arc::new(Classifier::new(filters())),
            ..bare_port("b", MAC_B, Some(A))
        },
    ];
    let rings = SimRings::new(4096, FRAME_SIZE, 256, &QUEUES, 1);
    let dp = Dataplane::new(rings, Mode::Bridge, ports, 64, FRAME_SIZE as u32, crew);
    (dp, crews)
}

/// Delivers `n` frames to each of UDP ports 5001, 5002 and 9999 (unclassified) on port a.
fn deliver(dp: &mut Dataplane<SimRings>, n: usize) {
    for dport in [5001, 5002, 9999] {
        let frame = udp_frame(1000, MAC_B, 0, 7, dport);
        for _ in 0..n {
            dp.rings_mut().deliver(0, &frame);
        }
    }
}

fn packets(dp: &Dataplane<SimRings>, class: &str) -> u64 {
    let id: ClassId = class.parse().unwrap();
    let snapshot = dp.class_stats("b", &[id]).unwrap();
    let stats = snapshot.classes[0].unwrap();
    stats.queue.packets + stats.queue.backlog_packets
}

#[test]
fn one_worker_serves_every_tree_and_filters_steer_between_them() {
    let (mut dp, _) = plane(0, 1);
    deliver(&mut dp, 20);
    drain(&mut dp, Instant::ZERO);
    assert_eq!(packets(&dp, "1:10"), 20);
    assert_eq!(packets(&dp, "2:10"), 20);
    // Worker 0 serves queue 0's tree: its unclassified frames take that tree's default.
    assert_eq!(packets(&dp, "1:2"), 20);
    assert_eq!(packets(&dp, "2:2"), 0);
    let snapshot = dp.class_stats("b", &[]).unwrap();
    let majors: Vec<u16> = snapshot.schedulers.iter().map(|(m, _)| *m).collect();
    assert_eq!(majors, [1, 2]);
    let sent: Vec<u64> = snapshot
        .schedulers
        .iter()
        .map(|(_, s)| s.packets_sent)
        .collect();
    assert_eq!(sent, [40, 20]);
}

/// With two workers each tree belongs to its queue's worker: a frame for the other's tree is
/// handed over, an unclassified one stays on a tree of the worker that received it.
#[test]
fn each_tree_is_served_by_its_queues_worker() {
    for me in 0..2 {
        let (mut dp, mut others) = plane(me, 2);
        deliver(&mut dp, 10);
        dp.poll(Instant::ZERO);
        let mine = ClassId::new(u16::try_from(me).unwrap() + 1, 0x10);
        let theirs = ClassId::new(2 - u16::try_from(me).unwrap(), 0x10);
        assert_eq!(packets(&dp, &mine.to_string()), 10, "worker {me}");
        assert_eq!(packets(&dp, &theirs.to_string()), 0, "worker {me}");
        let default = ClassId::new(u16::try_from(me).unwrap() + 1, 2);
        assert_eq!(packets(&dp, &default.to_string()), 10, "worker {me}");
        assert_eq!(dp.handoffs().handed_out, 10, "worker {me}");
        // The other worker finds them, classified by the filter that names its tree.
        let other = &mut others[0];
        let mut taken = 0;
        while let Some(h) = other.receive() {
            taken += 1;
            assert_eq!(h.filter, Some(u32::try_from(1 - me).unwrap()));
            let chunk = dp.rings_mut().take_over(h.parcel);
            dp.rings_mut().release(chunk);
        }
        assert_eq!(taken, 10, "worker {me}");
    }
}

/// A tree deleted under traffic: its filter's frames leave unclassified (as behind the
/// kernel's default qdisc of that queue), the other tree keeps its queue.
#[test]
fn a_tree_taken_out_leaves_the_other_alone() {
    let (mut dp, _) = plane(0, 1);
    // Port b takes nothing for now: the frames wait in their trees.
    dp.rings_mut().limit_tx(B, Some(0));
    deliver(&mut dp, 5);
    dp.poll(Instant::ZERO);
    let (results, _) = dp.apply(
        Instant::ZERO,
        vec![crate::PlaneOp::SetTree {
            port: "b".into(),
            major: 2,
            tree: None,
            schedulers: Vec::new(),
        }],
    );
    assert_eq!(results, [Ok(5)], "tree 2's five frames purged");
    assert_eq!(dp.tree_majors("b"), [1]);
    assert_eq!(packets(&dp, "1:10"), 5, "tree 1 kept its queue");
    deliver(&mut dp, 5);
    drain(&mut dp, Instant::ZERO);
    assert_eq!(packets(&dp, "1:10"), 10);
    assert_eq!(
        packets(&dp, "1:2"),
        15,
        "5002's frames joined the unclassified"
    );
}
