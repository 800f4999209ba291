//! The model against tc's rules: batches all or nothing, and the saved state round trip.

use super::*;
use htb_core::{LeafConfig, LeafKind, LeafSpec, Rate};
use htb_ipc::{
    ClassSpec as WireClass, FilterHandle, FilterSpec, LeafQdiscSpec, Match, PortRange, QdiscSpec,
    RawKey,
};

/// `text`'s commands as `htb-cli -b` sends them (the model's tests of mq and root leaves
/// use it too).
pub(super) fn batch(text: &str) -> Vec<Command> {
    htb_cli::tc::parse::parse_batch(text)
        .unwrap_or_else(|(line, e)| panic!("line {line}: {}", e.0))
        .into_iter()
        .map(|(_, action)| match action {
            htb_cli::tc::parse::Action::Change(c) => c,
            other => panic!("not a change: {other:?}"),
        })
        .collect()
}

fn model() -> Model {
    Model {
        ports: vec![
            PortModel::new("r1".parse().unwrap(), 4),
            PortModel::new("r2".parse().unwrap(), 4),
        ],
    }
}

fn qdisc_add(dev: &str) -> Command {
    Command::QdiscAdd(Box::new(QdiscSpec {
        handle: Some(ClassId::new(1, 0)),
        default_minor: Some(0x20),
        ..QdiscSpec::new(dev.parse().unwrap())
    }))
}

fn class(op: fn(Box<WireClass>) -> Command, id: &str, parent: &str, mbit: u64) -> Command {
    op(Box::new(WireClass {
        parent: Some(parent.parse().unwrap()),
        ..WireClass::new(
            "r2".parse().unwrap(),
            id.parse().unwrap(),
            Rate::from_mbit(mbit),
        )
    }))
}

fn filter(class: &str, dport: u16, prio: Option<u32>, kind: &str) -> Command {
    Command::FilterAdd(Box::new(filter_spec(class, dport, prio, kind)))
}

/// An IP filter on r2's `1:` sending UDP/TCP port `dport` to `class`.
fn filter_spec(class: &str, dport: u16, prio: Option<u32>, kind: &str) -> FilterSpec {
    FilterSpec {
        parent: Some(ClassId::new(1, 0)),
        protocol: Protocol::parse("ip").unwrap(),
        prio,
        kind: FilterKind::parse(kind).unwrap(),
        handle: None,
        matcher: Match {
            dport: Some(PortRange {
                first: dport,
                last: dport,
            }),
            ..Match::default()
        },
        class: class.parse().ok(),
        ..FilterSpec::new("r2".parse().unwrap())
    }
}

fn base() -> Model {
    let mut m = model();
    let plan = m
        .apply(&[
            qdisc_add("r2"),
            class(Command::ClassAdd, "1:1", "1:", 100),
            class(Command::ClassAdd, "1:20", "1:1", 10),
            filter("1:20", 5201, Some(1), "u32"),
        ])
        .unwrap();
    assert_eq!(plan.effects.len(), 4, "{:?}", plan.effects);
    m
}

/// `m`'s state file, which must contain `line`, read back into a model that saves the same
/// file.
fn saved_and_read_back(m: &Model, line: &str) -> Model {
    let text = m.to_toml();
    assert!(text.contains(line), "{line} not in:\n{text}");
    let back = Model::from_trees(crate::config::parse_state(&text).unwrap(), &|_| 4).unwrap();
    assert_eq!(back.to_toml(), text);
    // The generation is the saved text's hash, though hashed without making the text.
    assert_eq!(m.generation(), htb_ipc::Generation::of_text(&text));
    assert_eq!(back.generation(), m.generation());
    back
}

#[test]
fn a_refused_batch_changes_nothing() {
    let mut m = base();
    let before = m.to_toml();
    let e = m
        .apply(&[
            class(Command::ClassAdd, "1:30", "1:1", 5),
            class(Command::ClassChange, "1:20", "1:1", 20),
            Command::ClassDelete(htb_ipc::ClassDelete {
                dev: "r2".parse().unwrap(),
                id: "1:1".parse().unwrap(),
            }),
        ])
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InUse);
    assert_eq!(e.command, Some(2));
    assert_eq!(m.to_toml(), before);
    // The shadow was rolled back too: 1:30 can be added now, 1:20 still has 10 Mbit/s.
    let q = m.ports[1].htb().unwrap();
    assert_eq!(
        q.class_info("1:20".parse().unwrap()).unwrap().config.rate,
        Rate::from_mbit(10)
    );
    assert!(q.class_info("1:30".parse().unwrap()).is_none());
    m.apply(&[class(Command::ClassAdd, "1:30", "1:1", 5)])
        .unwrap();
}

#[test]
fn tc_rules_for_classes_filters_and_qdiscs() {
    let mut m = base();
    use ErrorCode::{Exists, InUse, Invalid, NoDevice, NotFound};
    let refused = [
        (Exists, qdisc_add("r2")),
        (NoDevice, qdisc_add("eth9")),
        (Exists, class(Command::ClassAdd, "1:20", "1:1", 1)),
        (NotFound, class(Command::ClassChange, "1:99", "1:1", 1)),
        (NotFound, class(Command::ClassAdd, "1:30", "1:9", 1)),
        (Invalid, class(Command::ClassAdd, "1:30", "1:1", 0)),
        (Invalid, class(Command::ClassAdd, "2:30", "1:1", 1)),
        // A filter points at it.
        (
            InUse,
            Command::ClassDelete(htb_ipc::ClassDelete {
                dev: "r2".parse().unwrap(),
                id: "1:20".parse().unwrap(),
            }),
        ),
        (NotFound, filter("1:99", 1, None, "u32")),
        (Invalid, filter("1:20", 1, Some(1), "flower")),
    ];
    for (want, command) in refused {
        let what = format!("{command:?}");
        assert_eq!(m.apply(&[command]).unwrap_err().code, want, "{what}");
    }
    // Replace adds, then changes.
    m.apply(&[class(Command::ClassReplace, "1:30", "1:1", 1)])
        .unwrap();
    m.apply(&[class(Command::ClassReplace, "1:30", "1:1", 2)])
        .unwrap();
    // Automatic priorities and handles, as the kernel assigns them.
    m.apply(&[
        filter("1:30", 5202, Some(1), "u32"),
        filter("1:30", 5203, None, "flower"),
    ])
    .unwrap();
    let q = m.ports[1].htb().unwrap();
    let shown: Vec<(u32, String)> = q
        .filters
        .iter()
        .map(|f| (f.prio, FilterHandle(f.handle).display(f.kind).to_string()))
        .collect();
    let expected: Vec<(u32, String)> = vec![
        (1, "800::800".into()),
        (1, "800::801".into()),
        (2, "0x1".into()),
    ];
    assert_eq!(
        shown, expected,
        "no room below prio 1: one above the highest"
    );
    // Deleting one u32 filter by handle, then a whole prio.
    m.apply(&[Command::FilterDelete(htb_ipc::FilterDelete {
        dev: "r2".parse().unwrap(),
        parent: None,
        prio: Some(1),
        handle: Some(FilterHandle(0x8000_0801)),
    })])
    .unwrap();
    assert_eq!(m.ports[1].htb().unwrap().filters.len(), 2);
    m.apply(&[Command::FilterDelete(htb_ipc::FilterDelete {
        dev: "r2".parse().unwrap(),
        parent: None,
        prio: Some(1),
        handle: None,
    })])
    .unwrap();
    m.apply(&[Command::ClassDelete(htb_ipc::ClassDelete {
        dev: "r2".parse().unwrap(),
        id: "1:20".parse().unwrap(),
    })])
    .unwrap();
    // Deleting the qdisc takes everything.
    let plan = m
        .apply(&[Command::QdiscDelete {
            dev: "r2".parse().unwrap(),
        }])
        .unwrap();
    assert!(matches!(
        plan.effects[0].1,
        PlaneChange::SetTree { tree: None, .. }
    ));
    assert!(m.ports[1].htb().is_none());
}

#[test]
fn the_state_file_round_trips_through_the_config_parser() {
    let mut m = base();
    m.apply(&[Command::ClassChange(Box::new(WireClass {
        parent: Some("1:1".parse().unwrap()),
        ceil: Some(Rate::from_bits_per_sec(2_000_000_001)),
        burst: Some(15_000),
        prio: Some(3),
        quantum: Some(3000),
        overhead: Some(24),
        mpu: Some(64),
        linklayer: Some(htb_core::LinkLayer::Atm),
        ..WireClass::new(
            "r2".parse().unwrap(),
            "1:20".parse().unwrap(),
            Rate::from_bits_per_sec(1_234_567_891),
        )
    }))])
    .unwrap();
    // A filter with u32 general keys (wondershaper's small-ACK words) survives the trip.
    m.apply(&[Command::FilterAdd(Box::new(FilterSpec {
        parent: Some(ClassId::new(1, 0)),
        protocol: Protocol::parse("ip").unwrap(),
        prio: Some(2),
        kind: FilterKind::U32,
        matcher: Match {
            proto: Some(6),
            raw: htb_config::filter::RawKeys::new(&[
                RawKey {
                    at: 0,
                    nexthdr: false,
                    mask: 0x0f00_ffc0,
                    value: 0x0500_0000,
                },
                RawKey {
                    at: 32,
                    nexthdr: false,
                    mask: 0x00ff_0000,
                    value: 0x0010_0000,
                },
            ])
            .unwrap(),
            ..Match::default()
        },
        class: Some("1:20".parse().unwrap()),
        ..FilterSpec::new("r2".parse().unwrap())
    }))])
    .unwrap();
    let back = saved_and_read_back(
        &m,
        r#"raw = ["05000000/0f00ffc0 at 0", "00100000/00ff0000 at 32"]"#,
    );
    let q = back.ports[1].htb().unwrap();
    assert_eq!(q.config.default_minor, 0x20);
    let f = q.filters.first().unwrap();
    assert_eq!(
        FilterHandle(f.handle).display(f.kind).to_string(),
        "800::800"
    );
    assert_eq!(
        q.classes
            .get("1:20".parse().unwrap())
            .unwrap()
            .spec()
            .rate
            .bits_per_sec(),
        1_234_567_891
    );
}

fn leaf(
    op: fn(Box<LeafQdiscSpec>) -> Command,
    class: &str,
    handle: Option<u16>,
    spec: LeafSpec,
) -> Command {
    op(Box::new(LeafQdiscSpec {
        dev: "r2".parse().unwrap(),
        parent: Some(class.parse().unwrap()),
        handle: handle.map(|h| ClassId::new(h, 0)),
        leaf: spec,
        stab: None,
    }))
}

fn leaf_of(m: &Model, class: &str) -> Option<LeafDef> {
    m.ports[1]
        .htb()
        .unwrap()
        .classes
        .get(class.parse().unwrap())
        .unwrap()
        .leaf()
}

fn sfq(perturb: u32) -> LeafSpec {
    LeafSpec::Sfq(htb_core::SfqSpec {
        perturb: Some(perturb),
        ..htb_core::SfqSpec::default()
    })
}

#[test]
fn leaf_qdiscs_follow_tc_modify_qdisc() {
    let mut m = base();
    let code = |m: &mut Model, c: Command| m.apply(&[c]).unwrap_err().code;
    // add: an automatic handle from 8001:, then the class is taken.
    let plan = m
        .apply(&[leaf(Command::LeafAdd, "1:20", None, sfq(10))])
        .unwrap();
    assert!(matches!(
        plan.effects[0].1,
        PlaneChange::SetLeaf { leaf: Some(_), .. }
    ));
    assert_eq!(leaf_of(&m, "1:20").unwrap().handle, Some(0x8001));
    assert_eq!(
        code(&mut m, leaf(Command::LeafAdd, "1:20", Some(0x20), sfq(5))),
        ErrorCode::Exists
    );
    // Inner classes, unknown classes and taken handles are refused.
    assert_eq!(
        code(&mut m, leaf(Command::LeafAdd, "1:1", None, sfq(0))),
        ErrorCode::Invalid
    );
    assert_eq!(
        code(&mut m, leaf(Command::LeafAdd, "1:99", None, sfq(0))),
        ErrorCode::NotFound
    );
    m.apply(&[class(Command::ClassAdd, "1:30", "1:1", 5)])
        .unwrap();
    assert_eq!(
        code(&mut m, leaf(Command::LeafAdd, "1:30", Some(1), sfq(0))),
        ErrorCode::Exists,
        "1: is the htb qdisc's"
    );
    // change: same kind only, options merged the kernel's way.
    let codel = LeafSpec::FqCodel(htb_core::FqCodelSpec {
        target: Some(Duration::from_millis(10)),
        ..htb_core::FqCodelSpec::default()
    });
    assert_eq!(
        code(&mut m, leaf(Command::LeafChange, "1:20", None, codel)),
        ErrorCode::Invalid,
        "Invalid qdisc name"
    );
    assert_eq!(
        code(&mut m, leaf(Command::LeafChange, "1:30", None, codel)),
        ErrorCode::NotFound,
        "the default leaf cannot be changed"
    );
    let plan = m
        .apply(&[leaf(Command::LeafChange, "1:20", Some(0x8001), sfq(20))])
        .unwrap();
    assert!(matches!(plan.effects[0].1, PlaneChange::ChangeLeaf { .. }));
    let LeafConfig::Sfq(c) = leaf_of(&m, "1:20").unwrap().config else {
        panic!()
    };
    assert_eq!(c.perturb, 20);
    // replace: same kind and handle changes in place; another kind under the same handle is
    // refused (the kernel changes that qdisc, whose kind must match); without a handle,
    // another kind is a new qdisc.
    assert_eq!(
        code(
            &mut m,
            leaf(Command::LeafReplace, "1:20", Some(0x8001), codel)
        ),
        ErrorCode::Invalid,
        "must match existing qdisc"
    );
    let plan = m
        .apply(&[leaf(Command::LeafReplace, "1:20", None, codel)])
        .unwrap();
    assert!(matches!(
        plan.effects[0].1,
        PlaneChange::SetLeaf {
            leaf: Some(LeafConfig::FqCodel(_)),
            ..
        }
    ));
    assert_eq!(
        leaf_of(&m, "1:20").unwrap().handle,
        Some(0x8002),
        "a new qdisc, a new handle"
    );
    // del: back to the default leaf; the default cannot be deleted.
    assert_eq!(
        code(&mut m, delete_1_20_leaf(Some(ClassId::new(0x99, 0)), None)),
        ErrorCode::Invalid
    );
    let plan = m
        .apply(&[delete_1_20_leaf(None, Some(LeafKind::FqCodel))])
        .unwrap();
    assert!(matches!(
        plan.effects[0].1,
        PlaneChange::SetLeaf { leaf: None, .. }
    ));
    assert_eq!(leaf_of(&m, "1:20"), None);
    assert_eq!(
        code(&mut m, delete_1_20_leaf(None, None)),
        ErrorCode::NotFound,
        "Cannot delete qdisc with handle of zero"
    );
}

#[test]
fn a_refused_batch_restores_leaves_and_a_parent_loses_its_leaf() {
    let mut m = base();
    m.apply(&[leaf(Command::LeafAdd, "1:20", Some(0x20), sfq(10))])
        .unwrap();
    let before = m.to_toml();
    // A child under 1:20 makes it inner (its leaf goes), then a bad command: all rolled back.
    let e = m
        .apply(&[
            class(Command::ClassAdd, "1:21", "1:20", 1),
            leaf_delete(LeafQdiscSpec {
                dev: "r2".parse().unwrap(),
                parent: Some("1:21".parse().unwrap()),
                handle: None,
                leaf: sfq(0),
                stab: None,
            }),
        ])
        .unwrap_err();
    assert_eq!(e.command, Some(1));
    assert_eq!(m.to_toml(), before);
    assert_eq!(leaf_of(&m, "1:20").unwrap().handle, Some(0x20));
    // Accepted, the leaf is gone with the leaf class.
    m.apply(&[class(Command::ClassAdd, "1:21", "1:20", 1)])
        .unwrap();
    assert_eq!(leaf_of(&m, "1:20"), None);
    // The shadow agrees: 1:20 takes no qdisc now.
    assert_eq!(
        m.apply(&[leaf(Command::LeafAdd, "1:20", None, sfq(0))])
            .unwrap_err()
            .code,
        ErrorCode::Invalid
    );
}

/// `qdisc del dev r2 parent 1:20 [handle H] [KIND]`.
fn delete_1_20_leaf(handle: Option<ClassId>, kind: Option<LeafKind>) -> Command {
    Command::LeafDelete {
        dev: "r2".parse().unwrap(),
        parent: "1:20".parse().unwrap(),
        handle,
        kind,
    }
}

fn leaf_delete(op: LeafQdiscSpec) -> Command {
    Command::LeafDelete {
        dev: op.dev,
        parent: op.parent.expect("a class's leaf"),
        handle: op.handle,
        kind: Some(op.leaf.kind()),
    }
}

#[test]
fn leaves_survive_the_state_file() {
    let mut m = base();
    m.apply(&[
        class(Command::ClassAdd, "1:30", "1:1", 5),
        leaf(Command::LeafAdd, "1:20", Some(0x20), sfq(10)),
        leaf(
            Command::LeafAdd,
            "1:30",
            None,
            LeafSpec::FqCodel(htb_core::FqCodelSpec {
                ecn: Some(false),
                ce_threshold: Some(Duration::from_micros(1500)),
                ..htb_core::FqCodelSpec::default()
            }),
        ),
    ])
    .unwrap();
    let back = saved_and_read_back(&m, "");
    assert_eq!(leaf_of(&back, "1:20"), leaf_of(&m, "1:20"));
    assert_eq!(leaf_of(&back, "1:30"), leaf_of(&m, "1:30"));
}

#[test]
fn class_ids_without_a_major_take_the_qdiscs() {
    let mut m = base();
    m.apply(&[
        class(Command::ClassAdd, ":30", ":1", 5),
        filter(":30", 5301, Some(1), "u32"),
    ])
    .unwrap();
    let q = m.ports[1].htb().unwrap();
    let info = q.class_info("1:30".parse().unwrap()).expect("1:30 added");
    assert_eq!(info.parent, Some("1:1".parse().unwrap()));
    assert!(
        q.filters
            .iter()
            .any(|f| f.class == Some("1:30".parse().unwrap())),
        "the filter points at 1:30"
    );
    // 1:20, found by its short id, still has its filter.
    let e = m
        .apply(&[Command::ClassDelete(htb_ipc::ClassDelete {
            dev: "r2".parse().unwrap(),
            id: ":20".parse().unwrap(),
        })])
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InUse, "{e:?}");
}

#[test]
fn filter_change_and_replace_keep_the_handle_and_take_the_new_match() {
    let mut m = base();
    m.apply(&[class(Command::ClassAdd, "1:30", "1:1", 5)])
        .unwrap();
    let handle = {
        let f = m.ports[1].htb().unwrap().filters.first().unwrap();
        FilterHandle(f.handle).display(f.kind).to_string()
    };
    let spec =
        |op: fn(Box<FilterSpec>) -> Command, handle: Option<&str>, class: &str, dport: u16| {
            let Command::FilterAdd(mut f) = filter(class, dport, Some(1), "u32") else {
                unreachable!()
            };
            f.handle = handle.map(|h| FilterHandle::parse(Some(FilterKind::U32), h).unwrap());
            op(f)
        };
    m.apply(&[spec(Command::FilterChange, Some(&handle), "1:30", 6000)])
        .unwrap();
    let q = m.ports[1].htb().unwrap();
    assert_eq!(q.filters.len(), 1);
    let f = q.filters.first().unwrap();
    assert_eq!(FilterHandle(f.handle).display(f.kind).to_string(), handle);
    assert_eq!(f.class, Some("1:30".parse().unwrap()));
    assert_eq!(f.matcher().dport.map(|p| p.first), Some(6000));
    // change needs an existing filter; replace adds one.
    let e = m
        .apply(&[spec(Command::FilterChange, Some("800::999"), "1:30", 1)])
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    m.apply(&[spec(Command::FilterReplace, Some("800::999"), "1:20", 7000)])
        .unwrap();
    m.apply(&[spec(Command::FilterReplace, None, "1:20", 7001)])
        .unwrap();
    assert_eq!(m.ports[1].htb().unwrap().filters.len(), 3);
    // A refused batch puts the changed filter back as it was.
    let before = m.to_toml();
    m.apply(&[
        spec(Command::FilterChange, Some(&handle), "1:20", 8000),
        class(Command::ClassAdd, "1:20", "1:1", 1),
    ])
    .unwrap_err();
    assert_eq!(m.to_toml(), before);
}

#[test]
fn a_u32_bucket_holds_2048_filters_as_the_kernels_and_says_so() {
    let mut m = base();
    let adds: Vec<Command> = (0..2047)
        .map(|i| filter("1:20", 10_000 + i, Some(1), "u32"))
        .collect();
    m.apply(&adds).unwrap();
    // 800::800 (base's) to 800::fff: the bucket is full.
    let e = m
        .apply(&[filter("1:20", 9999, Some(1), "u32")])
        .unwrap_err();
    assert!(
        e.message.contains("no free node id") && e.message.contains("divisor"),
        "{e}"
    );
    // Another prio has its own root table.
    m.apply(&[filter("1:20", 9999, Some(2), "u32")]).unwrap();
}

#[test]
fn a_size_table_is_kept_changed_removed_and_saved_as_tc_does() {
    let stab = |overhead, link_layer| htb_ipc::SizeSpec {
        overhead,
        link_layer: Some(link_layer),
        ..htb_ipc::SizeSpec::default()
    };
    let with_stab = |s: Option<htb_ipc::SizeSpec>, op: fn(Box<QdiscSpec>) -> Command| {
        op(Box::new(QdiscSpec {
            handle: Some(ClassId::new(1, 0)),
            default_minor: Some(0x20),
            stab: s,
            ..QdiscSpec::new("r2".parse().unwrap())
        }))
    };
    let mut m = model();
    let plan = m
        .apply(&[
            with_stab(
                Some(stab(34, htb_core::LinkLayer::Ethernet)),
                Command::QdiscAdd,
            ),
            class(Command::ClassAdd, "1:1", "1:", 100),
        ])
        .unwrap();
    assert!(!plan.effects.is_empty());
    let table = |m: &Model| m.ports[1].htb().unwrap().config.stab;
    assert_eq!(table(&m).unwrap().pkt_len(1500), 1534);
    // Saved and read back, the same table; the state file says it as the config does.
    let back = saved_and_read_back(
        &m,
        "stab = { overhead = 34, mpu = 0, mtu = 0, tsize = 0, linklayer = \"ethernet\" }",
    );
    assert_eq!(table(&back), table(&m));
    // `qdisc change` with another table takes it; its effect carries it to the data plane.
    let plan = m
        .apply(&[with_stab(
            Some(stab(44, htb_core::LinkLayer::Atm)),
            Command::QdiscChange,
        )])
        .unwrap();
    assert!(
        matches!(&plan.effects[..], [(_, PlaneChange::SetQdisc { config, .. })] if config.stab.is_some_and(|t| t.pkt_len(1500) == 33 * 53)),
        "{:?}",
        plan.effects
    );
    // Without one it removes it, as the kernel's qdisc_change does.
    m.apply(&[with_stab(None, Command::QdiscChange)]).unwrap();
    assert_eq!(table(&m), None);
    // What tc or the kernel refuse comes back as an error, changing nothing.
    let before = m.to_toml();
    let e = m
        .apply(&[with_stab(
            Some(htb_ipc::SizeSpec {
                mtu: 1500,
                ..htb_ipc::SizeSpec::default()
            }),
            Command::QdiscChange,
        )])
        .unwrap_err();
    assert!(e.message.contains("stab needs overhead"), "{}", e.message);
    assert_eq!(m.to_toml(), before);
    // Under a class a size table is refused, naming where it belongs.
    let e = m
        .apply(&[Command::LeafAdd(Box::new(LeafQdiscSpec {
            dev: "r2".parse().unwrap(),
            parent: Some("1:1".parse().unwrap()),
            handle: None,
            leaf: sfq(10),
            stab: Some(stab(4, htb_core::LinkLayer::Ethernet)),
        }))])
        .unwrap_err();
    assert!(e.message.contains("root htb qdisc"), "{}", e.message);
}

#[test]
fn a_classless_root_keeps_its_size_table_through_changes_and_the_state_file() {
    let mut m = model();
    let cake = |op: fn(Box<LeafQdiscSpec>) -> Command, s: Option<htb_ipc::SizeSpec>| {
        op(Box::new(LeafQdiscSpec {
            dev: "r2".parse().unwrap(),
            parent: None,
            handle: Some(ClassId::new(1, 0)),
            leaf: LeafSpec::Pfifo { limit: Some(100) },
            stab: s,
        }))
    };
    let atm = htb_ipc::SizeSpec {
        overhead: 44,
        link_layer: Some(htb_core::LinkLayer::Atm),
        ..htb_ipc::SizeSpec::default()
    };
    m.apply(&[cake(Command::LeafAdd, Some(atm))]).unwrap();
    let Root::Leaf(q) = &m.ports[1].root else {
        panic!("no classless root");
    };
    assert_eq!(q.config.stab.unwrap().spec().tsize, 512);
    saved_and_read_back(&m, "[interface.qdisc]\nstab = ");
    // A change without the table removes it, as tc sends none.
    let plan = m.apply(&[cake(Command::LeafChange, None)]).unwrap();
    assert!(
        plan.effects.iter().any(
            |(_, e)| matches!(e, PlaneChange::SetQdisc { config, .. } if config.stab.is_none())
        ),
        "{:?}",
        plan.effects
    );
    assert!(!m.to_toml().contains("stab"));
}

#[test]
fn protocol_arp_filters_are_kept_and_refuse_ip_addresses() {
    let mut m = base();
    let arp = |dst: Option<&str>| {
        Command::FilterAdd(Box::new(FilterSpec {
            protocol: Protocol::Arp,
            matcher: Match {
                dst: dst.map(|d| d.parse().unwrap()),
                ..Match::default()
            },
            ..filter_spec("1:20", 0, Some(3), "u32")
        }))
    };
    let e = m.apply(&[arp(Some("10.0.0.0/8"))]).unwrap_err();
    assert!(e.message.contains("protocol arp"), "{}", e.message);
    m.apply(&[arp(None)]).unwrap();
    let q = m.ports[1].htb().unwrap();
    let f = q
        .filters
        .iter()
        .find(|f| f.protocol == Protocol::Arp)
        .unwrap();
    assert!(f.matcher().arp);
    saved_and_read_back(&m, "protocol = \"arp\"");
}

#[test]
fn a_policed_filter_keeps_its_policer_through_the_state_file_and_other_changes() {
    let mut m = base();
    let policed = |exceed| {
        Command::FilterAdd(Box::new(FilterSpec {
            police: Some(Box::new(htb_ipc::PoliceConfig {
                rate: Some(Rate::from_mbit(5)),
                burst: 20_000,
                exceed,
                ..htb_ipc::PoliceConfig::default()
            })),
            ..filter_spec("1:20", 5202, Some(1), "u32")
        }))
    };
    m.apply(&[policed(htb_ipc::ControlAction::Drop)]).unwrap();
    let police = |m: &Model| {
        m.ports[1]
            .htb()
            .unwrap()
            .filters
            .iter()
            .find_map(|f| f.police().cloned())
            .unwrap()
    };
    let before = police(&m);
    // The data plane's filters carry the same policer (one bucket, shared).
    let flat = m.ports[1].htb().unwrap().data_filters().unwrap();
    let shared = flat.iter().find_map(|f| f.police.clone()).unwrap();
    assert!(std::ptr::eq(&*shared, &*before));
    // Another filter's change leaves this policer (and its bucket) in place.
    m.apply(&[filter("1:20", 5203, Some(4), "u32")]).unwrap();
    assert!(std::ptr::eq(&*police(&m), &*before));
    // The state file keeps its options; read back, the same filter.
    let back = saved_and_read_back(
        &m,
        "police = { rate = 5000000, burst = 20000, overhead = 0, mpu = 0, exceed = \"drop\", conform = \"pass\" }",
    );
    assert_eq!(police(&back), before);
    // A policer on a filter that does not classify, or one tc refuses, changes nothing.
    let before = m.to_toml();
    let mut bad = policed(htb_ipc::ControlAction::Drop);
    if let Command::FilterAdd(f) = &mut bad {
        f.prio = Some(9);
        f.police.as_mut().unwrap().burst = 0;
    }
    let e = m.apply(&[bad]).unwrap_err();
    assert!(
        e.message.contains("'burst' requires 'rate'"),
        "{}",
        e.message
    );
    assert_eq!(m.to_toml(), before);
}

#[test]
fn protocol_all_shares_a_prio_with_ip_as_unprotocoled_u32_lines_do_in_the_kernel() {
    // LibreQoS v0.6: `prio 5 u32` (all), then `prio 5 u32 … match ip dst …`, which htb-cli
    // reads as IPv4; the kernel keeps both `all`, in one tcf_proto.
    let mut m = base();
    let at5 = |protocol: &str, dport: u16| {
        Command::FilterAdd(Box::new(FilterSpec {
            protocol: Protocol::parse(protocol).unwrap(),
            ..filter_spec("1:20", dport, Some(5), "u32")
        }))
    };
    m.apply(&[at5("all", 1), at5("ip", 2), at5("all", 3)])
        .unwrap();
    // Two IP protocols still need two prios.
    let e = m.apply(&[at5("ipv6", 4)]).unwrap_err();
    assert!(
        e.message.contains("holds protocol ip filters"),
        "{}",
        e.message
    );
}

fn label_of(m: &Model, class: &str) -> Option<String> {
    let q = m.ports[1].htb().unwrap();
    q.classes
        .label(class.parse().unwrap())
        .map(|l| l.title().to_owned())
}

#[test]
fn labels_are_kept_saved_undone_and_leave_with_their_class() {
    let mut m = base();
    m.apply(&batch(
        "class label dev r2 classid 1:20 name \"Ann O'Neil\" circuit 17 device a mac 00:11:22:33:44:55 address 10.0.3.7",
    ))
    .unwrap();
    assert_eq!(label_of(&m, "1:20").as_deref(), Some("Ann O'Neil"));
    // Kept through a class change and the state file.
    m.apply(&[class(Command::ClassChange, "1:20", "1:1", 20)])
        .unwrap();
    let back = saved_and_read_back(&m, "name = \"Ann O'Neil\" }");
    assert_eq!(label_of(&back, "1:20").as_deref(), Some("Ann O'Neil"));
    // A class that does not exist takes no label.
    let e = m
        .apply(&batch("class label dev r2 classid 1:99 name x"))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound, "{e}");
    // A refused batch brings the label back: relabelled, then the class deleted, then a
    // refused command.
    let before = m.to_toml();
    let e = m
        .apply(&batch(
            "class label dev r2 classid 1:20 name Bob\n\
             filter del dev r2 parent 1: prio 1\n\
             class del dev r2 classid 1:20\n\
             class del dev r2 classid 1:77",
        ))
        .unwrap_err();
    assert_eq!(e.command, Some(3), "{e}");
    assert_eq!(m.to_toml(), before);
    // Deleted with its class: a new 1:20 has none.
    m.apply(&batch(
        "filter del dev r2 parent 1: prio 1\nclass del dev r2 classid 1:20\n\
         class add dev r2 parent 1:1 classid 1:20 htb rate 1mbit",
    ))
    .unwrap();
    assert_eq!(label_of(&m, "1:20"), None);
    // Taken away by a label without words.
    m.apply(&batch(
        "class label dev r2 classid 1:20 name Eve\nclass label dev r2 classid 1:20",
    ))
    .unwrap();
    assert_eq!(label_of(&m, "1:20"), None);
}

/// A batch keeps one undo step per accepted step until it is done (three million for a
/// million subscribers' import): what few steps need is boxed, so each costs 40 bytes.
#[test]
fn an_undo_step_is_small() {
    assert_eq!(size_of::<Undo>(), 40);
}
