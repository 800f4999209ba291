//! What each worker holds with many subscribers: 100 000 subscriber classes added through the
//! fleet to four workers on the simulated rings, counted per worker — the classes its root
//! tree's scheduler holds, and the part of the tree the assignment gives it (the top-level
//! classes, its own subtrees, the split ones). Counted, not an RSS: `htb-lab scale` measures
//! that. `cargo test -p htb-xdp memory_tests -- --nocapture` prints the figures.

use htb_core::{ClassDef, ClassId, ClassSpec, Instant, PortTree, Rate, SchedulerConfig, TreeSpec};

use super::tests::{B, class, planes, refs};
use super::{Dataplane, Mode};
use crate::assign::{Server, subtree_of};
use crate::fleet::Fleet;
use crate::plane_op::PlaneOp;
use crate::rings::Rings;
use crate::tree_view::TreeView;

const SUBSCRIBERS: u32 = 100_000;
const WORKERS: usize = 4;

/// The classes of `view` worker `w` serves: every top-level class, and the classes of the
/// subtrees it owns or every worker serves.
fn part_of(view: &TreeView, w: usize) -> usize {
    view.class_ids()
        .filter(|&id| match view.class(id).and_then(|c| c.parent) {
            None => true,
            Some(_) => match subtree_of(view, id).and_then(|top| view.server(top)) {
                Some(Server::Worker(o)) => usize::from(o) == w,
                Some(Server::Every) | None => true,
            },
        })
        .count()
}

/// Classes in worker `dp`'s root tree of port b.
fn held<R: Rings>(dp: &Dataplane<R>) -> usize {
    dp.root_tree_at(B)
        .map_or(0, htb_core::Scheduler::class_count)
}

#[test]
fn subscribers_per_worker_are_counted() {
    let mut planes = planes(Mode::Bridge, 64, 8, 8, 1, WORKERS);
    let mut fleet = Fleet::new(2, &mut refs(&mut planes), None, Vec::new());
    // LibreQoS's shape: the uplink at the top, one class per subscriber below it.
    let tree = TreeSpec {
        config: SchedulerConfig::default(),
        classes: vec![ClassDef {
            id: class(1),
            parent: None,
            spec: ClassSpec::new(Rate::from_gbit(10)),
            leaf: None,
        }],
        warnings: Vec::new(),
    };
    let op = PlaneOp::set_tree("b".into(), 1, Some(PortTree::root(tree)), WORKERS).unwrap();
    let (results, _) = fleet.apply(&mut refs(&mut planes), Instant::ZERO, vec![op]);
    assert!(results.iter().all(Result::is_ok));
    // In stages, as htb-cli's import sends them.
    let minors: Vec<u32> = (0..SUBSCRIBERS).map(|i| 0x100 + i).collect();
    for stage in minors.chunks(10_000) {
        let ops = stage
            .iter()
            .map(|&minor| PlaneOp::AddClass {
                port: "b".into(),
                id: ClassId::new(1, minor),
                parent: Some(class(1)),
                spec: ClassSpec::new(Rate::from_mbit(100)).with_ceil(Rate::from_gbit(1)),
            })
            .collect();
        let (results, _) = fleet.apply(&mut refs(&mut planes), Instant::ZERO, ops);
        assert!(results.iter().all(Result::is_ok));
    }
    let view = fleet.view(B).expect("port b's view");
    let total = SUBSCRIBERS as usize + 1;
    assert_eq!(
        view.class_ids().count(),
        total,
        "the view: every class, once"
    );
    let mut parts = 0;
    for (w, dp) in planes.iter().enumerate() {
        let held = held(dp);
        let part = part_of(view, w);
        println!(
            "worker {w}: holds {held} classes; its part (the top, its own subtrees) is {part}"
        );
        // The assignment balances the subscribers: a quarter each, and the top everywhere.
        assert_eq!(part, 1 + SUBSCRIBERS as usize / WORKERS, "worker {w}");
        // It holds its part, no more.
        assert_eq!(held, part, "worker {w}");
        parts += part - 1;
    }
    assert_eq!(
        parts, SUBSCRIBERS as usize,
        "each subscriber has one worker"
    );
    println!(
        "the view (one for all workers): {} classes of {} bytes each before the B-tree's own",
        view.class_ids().count(),
        size_of::<(ClassId, crate::tree_view::ClassView)>()
    );
}
