//! Workers that hold only their own subtrees, through the fleet on the simulated rings: the
//! merged statistics of classes another worker owns, the resolution of their frames on a
//! worker that does not hold them, and a batch that fails part-way.

use std::sync::Arc;

use htb_classify::{Classifier, Filter, Match};
use htb_core::{
    ClassDef, ClassId, ClassSpec, Instant, LeafConfig, LeafDef, PortTree, Rate, SchedulerConfig,
    SplitChoice, Target, TreeSpec,
};

use super::sim::SimRings;
use super::tests::{B, class, planes, refs};
use super::{Dataplane, Mode};
use crate::fleet::Fleet;
use crate::plane_op::PlaneOp;

/// Port b's tree: 1:1 at 1 Gbit/s at the top, its children 1:100 and 1:101 (the default) at
/// 100 Mbit/s, each with a pfifo.
fn tree() -> PortTree {
    let def = |minor, parent: Option<u32>, leaf: bool| ClassDef {
        id: class(minor),
        parent: parent.map(class),
        spec: ClassSpec::new(if parent.is_none() {
            Rate::from_gbit(1)
        } else {
            Rate::from_mbit(100)
        }),
        leaf: leaf.then_some(LeafDef {
            handle: None,
            config: LeafConfig::Pfifo { limit: 100 },
        }),
    };
    PortTree {
        tree: TreeSpec {
            config: SchedulerConfig {
                default_minor: 0x101,
                ..SchedulerConfig::default()
            },
            classes: vec![
                def(1, None, false),
                def(0x100, Some(1), true),
                def(0x101, Some(1), true),
            ],
            warnings: Vec::new(),
        },
        mq_minor: None,
        split: std::collections::BTreeMap::new(),
    }
}

/// Two workers bridging a to b, port b's tree replaced by [`tree`] through the fleet.
fn setup() -> (Vec<Dataplane<SimRings>>, Fleet) {
    let mut planes = planes(Mode::Bridge, 4096, 256, 64, 1, 2);
    let mut fleet = Fleet::new(2, &mut refs(&mut planes), None, Vec::new());
    let op = PlaneOp::set_tree("b".into(), 1, Some(tree()), 2).unwrap();
    let (results, _) = fleet.apply(&mut refs(&mut planes), Instant::ZERO, vec![op]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    (planes, fleet)
}

/// The child of 1:1 that worker `w` owns.
fn owned_by(fleet: &Fleet, w: u16) -> ClassId {
    let view = fleet.view(B).expect("port b's view");
    [class(0x100), class(0x101)]
        .into_iter()
        .find(|&id| view.holder(id) == Some(w))
        .expect("each worker owns one of the two subtrees")
}

/// `tc -s class show` of idle classes: one that worker 1 owns (worker 0 has no copy) is shown,
/// and 1:1, whose copy on worker 0 has no children left, shows its real level and no leaf.
#[test]
fn idle_classes_of_other_workers_keep_their_statistics() {
    let (mut planes, fleet) = setup();
    let theirs = owned_by(&fleet, 1);
    let ours = owned_by(&fleet, 0);
    let delete = PlaneOp::DeleteClass {
        port: "b".into(),
        id: ours,
    };
    let mut fleet = fleet;
    let (results, _) = fleet.apply(&mut refs(&mut planes), Instant::ZERO, vec![delete]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let ids = [class(1), theirs];
    let each: Vec<_> = planes
        .iter()
        .map(|p| p.class_stats("b", &ids).unwrap())
        .collect();
    assert!(
        each[0].classes[1].is_none(),
        "premise: worker 0 does not hold {theirs}"
    );
    let top = |w: usize| each[w].classes[0].expect("1:1 is on every worker");
    assert!(
        top(0).level == 0 && top(1).level > 0,
        "premise: 1:1 has children on worker 1 only: {} {}",
        top(0).level,
        top(1).level
    );
    let real_level = top(1).level;
    let merged = crate::merge::snapshots(each);
    let stats = merged.classes[1].expect("worker 1's idle class is shown");
    assert_eq!(stats.id, theirs);
    assert!(merged.leaves[1].is_some(), "and its leaf");
    let top = merged.classes[0].expect("1:1 is shown");
    assert_eq!(top.level, real_level, "1:1 is an inner class");
    assert!(merged.leaves[0].is_none(), "1:1 has no leaf qdisc");
}

/// A frame whose class another worker owns (RSS sends most of a subtree's frames to workers
/// that hand them over) is resolved once: the filter's owner and class are kept, and the next
/// frame takes them from the cache without walking the view.
#[test]
fn a_class_of_another_worker_is_resolved_once() {
    let (mut planes, fleet) = setup();
    let theirs = owned_by(&fleet, 1);
    let port = &mut planes[0].ports[B];
    port.classifier = Arc::new(Classifier::new(vec![Filter {
        police: None,
        prio: 1,
        matcher: Match::default(),
        class: theirs,
    }]));
    port.reset_targets();
    assert_eq!(port.targets.get(0), None, "nothing resolved yet");
    let (slot, owner) = port.target(0, 0, 2);
    assert_eq!((owner, slot.target), (1, Target::Class(theirs)));
    let kept = port
        .targets
        .get(0)
        .expect("the first frame's resolution is kept");
    assert_eq!((kept.owner, kept.target), (1, Target::Class(theirs)));
    let (slot, owner) = port.target(0, 0, 2);
    assert_eq!(
        (owner, slot.target),
        (1, Target::Class(theirs)),
        "from the cache"
    );
    // New owners forget it.
    port.reset_targets();
    assert_eq!(port.targets.get(0), None);
}

/// A batch that fails part-way: the second delete of a class worker 0 owns fails (on worker 0
/// alone), and the class added after it, which every worker would get, is added by none — no
/// worker's tree is ahead of the fleet's view.
#[test]
fn no_worker_applies_what_follows_a_failure() {
    let (mut planes, mut fleet) = setup();
    let ours = owned_by(&fleet, 0);
    let delete = || PlaneOp::DeleteClass {
        port: "b".into(),
        id: ours,
    };
    let add = PlaneOp::AddClass {
        port: "b".into(),
        id: class(0x102),
        parent: Some(class(1)),
        spec: ClassSpec::new(Rate::from_mbit(100)),
    };
    let (results, _) = fleet.apply(
        &mut refs(&mut planes),
        Instant::ZERO,
        vec![delete(), delete(), add],
    );
    assert_eq!(
        results.len(),
        2,
        "the batch ends at the failure: {results:?}"
    );
    assert!(results[0].is_ok() && results[1].is_err(), "{results:?}");
    for (w, plane) in planes.iter().enumerate() {
        let htb = plane.root_tree_at(B).expect("port b's tree");
        assert!(!htb.contains(class(0x102)), "worker {w} added 1:102");
    }
    let view = fleet.view(B).expect("port b's view");
    assert!(view.class(class(0x102)).is_none());
    assert!(
        view.class(ours).is_none(),
        "the delete that succeeded is followed"
    );
}

/// A tree set under `mq` next to the root tree (another major) leaves the root tree's
/// subtrees with their owners: no reassignment, which would give a worker a subtree whose
/// classes it does not hold.
#[test]
fn a_tree_under_mq_leaves_the_root_tree_s_owners() {
    let (mut planes, mut fleet) = setup();
    let ours = owned_by(&fleet, 0);
    let theirs = owned_by(&fleet, 1);
    // Worker 1's subtree goes and a new one takes its place: in class-id order (1:1, whose
    // subtree is itself, first) a fresh assignment would give the two the other way round.
    let ops = vec![
        PlaneOp::DeleteClass {
            port: "b".into(),
            id: theirs,
        },
        PlaneOp::AddClass {
            port: "b".into(),
            id: class(0x102),
            parent: Some(class(1)),
            spec: ClassSpec::new(Rate::from_mbit(100)),
        },
    ];
    let (results, _) = fleet.apply(&mut refs(&mut planes), Instant::ZERO, ops);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let owners = |fleet: &Fleet| {
        let view = fleet.view(B).expect("port b's view");
        (view.holder(ours), view.holder(class(0x102)))
    };
    assert_eq!(owners(&fleet), (Some(0), Some(1)), "premise");
    let mq_child = PortTree {
        tree: TreeSpec {
            config: SchedulerConfig {
                major: 2,
                ..SchedulerConfig::default()
            },
            classes: Vec::new(),
            warnings: Vec::new(),
        },
        mq_minor: Some(1),
        split: std::collections::BTreeMap::new(),
    };
    let op = PlaneOp::set_tree("b".into(), 2, Some(mq_child), 2).unwrap();
    let (results, _) = fleet.apply(&mut refs(&mut planes), Instant::ZERO, vec![op]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(owners(&fleet), (Some(0), Some(1)), "the owners stay");
    for (w, id) in [(0, ours), (1, class(0x102))] {
        let htb = planes[w].root_tree_at(B).expect("port b's root tree");
        assert!(htb.contains(id), "worker {w} holds {id}, which it owns");
    }
}

/// A split subtree's classes that a worker does not take (its tree is not what the view says:
/// here worker 1 lost 1:1 behind the fleet's back) fail the op that split the subtree, so that
/// the control plane rebuilds the port.
#[test]
fn a_subtree_not_copied_fails_the_op_that_split_it() {
    let (mut planes, mut fleet) = setup();
    let ours = owned_by(&fleet, 0);
    let theirs = owned_by(&fleet, 1);
    for id in [theirs, class(1)] {
        let delete = PlaneOp::DeleteClass {
            port: "b".into(),
            id,
        };
        let (results, _) = planes[1].apply(Instant::ZERO, vec![delete]);
        assert!(results.iter().all(Result::is_ok), "premise: {results:?}");
    }
    let split = PlaneOp::SetSplit {
        port: "b".into(),
        id: ours,
        choice: Some(SplitChoice::Split),
    };
    let (results, _) = fleet.apply(&mut refs(&mut planes), Instant::ZERO, vec![split]);
    assert!(matches!(results[..], [Err(_)]), "{results:?}");
}

/// An import on 4 workers: new subtrees (each with a class below it) under 1:1, in batches.
/// Each is added only to the worker that will own it — the least-loaded, ties to the lowest
/// index, as the assignment places it — so no worker is given a class it does not serve and
/// nothing is deleted after the batch.
#[test]
fn an_import_adds_each_subtree_to_its_owner_alone() {
    let mut planes = planes(Mode::Bridge, 4096, 256, 64, 1, 4);
    let mut fleet = Fleet::new(2, &mut refs(&mut planes), None, Vec::new());
    let op = PlaneOp::set_tree("b".into(), 1, Some(tree()), 4).unwrap();
    let (results, _) = fleet.apply(&mut refs(&mut planes), Instant::ZERO, vec![op]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let settled = fleet.settled;
    let add = |id: u32, parent: u32| PlaneOp::AddClass {
        port: "b".into(),
        id: class(id),
        parent: Some(class(parent)),
        spec: ClassSpec::new(Rate::from_mbit(10)),
    };
    for batch in 0..4u32 {
        let ops: Vec<PlaneOp> = (0..10u32)
            .flat_map(|k| {
                let top = 0x200 + batch * 16 + k;
                [add(top, 1), add(0x1000 + top, top)]
            })
            .collect();
        let (results, _) = fleet.apply(&mut refs(&mut planes), Instant::ZERO, ops);
        assert_eq!(results.len(), 20, "{results:?}");
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }
    assert_eq!(
        fleet.settled, settled,
        "a worker was given a class it does not serve"
    );
    let view = fleet.view(B).expect("port b's view");
    for batch in 0..4u32 {
        for k in 0..10u32 {
            let top = 0x200 + batch * 16 + k;
            let owner = view.holder(class(top)).expect("an owned subtree");
            assert_eq!(view.holder(class(0x1000 + top)), Some(owner));
            for (w, plane) in planes.iter().enumerate() {
                let htb = plane.root_tree_at(B).expect("port b's tree");
                let mine = usize::from(owner) == w;
                assert_eq!(htb.contains(class(top)), mine, "worker {w}, 1:{top:x}");
                assert_eq!(htb.contains(class(0x1000 + top)), mine, "worker {w}");
            }
        }
    }
    // 1:1 and its 2 subtrees, and 40 new ones: the least-loaded rule keeps the 4 even.
    assert_eq!(
        (0..4).map(|w| fleet.subtrees(w)).collect::<Vec<_>>(),
        [11, 11, 11, 10]
    );
}
