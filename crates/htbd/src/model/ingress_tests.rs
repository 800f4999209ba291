//! The ingress qdisc and IFB ports against tc's rules: sqm-scripts' ingress lines, what is
//! refused and why, batches all or nothing, and the saved state's round trip.

use super::*;
use htb_ipc::{FilterHandle, FilterSpec, Match, PoliceConfig, QdiscSpec};

/// Port r2 (the WAN side), r1, and IFB ifb0.
fn model() -> Model {
    let mut ifb = PortModel::new("ifb0".parse().unwrap(), 1);
    ifb.ifb = true;
    Model {
        ports: vec![
            PortModel::new("r1".parse().unwrap(), 1),
            PortModel::new("r2".parse().unwrap(), 1),
            ifb,
        ],
    }
}

/// sqm-scripts' redirect: `filter add dev r2 parent ffff: protocol all prio 10 u32 match u32 0 0
/// flowid 1:1 action mirred egress redirect dev TO`.
fn redirect(to: &str) -> Command {
    Command::FilterAdd(Box::new(FilterSpec {
        parent: Some(ClassId::new(INGRESS_MAJOR, 0)),
        protocol: Protocol::parse("all").unwrap(),
        prio: Some(10),
        kind: FilterKind::U32,
        class: Some("1:1".parse().unwrap()),
        redirect: Some(to.parse().unwrap()),
        ..FilterSpec::new("r2".parse().unwrap())
    }))
}

fn ingress_add(dev: &str) -> Command {
    Command::IngressAdd {
        dev: dev.parse().unwrap(),
    }
}

fn ifb_tree() -> Command {
    Command::QdiscAdd(Box::new(QdiscSpec {
        handle: Some(ClassId::new(1, 0)),
        default_minor: Some(0x10),
        ..QdiscSpec::new("ifb0".parse().unwrap())
    }))
}

#[test]
fn sqms_ingress_lines_redirect_r2s_download_through_ifb0() {
    let mut m = model();
    let plan = m
        .apply(&[ifb_tree(), ingress_add("r2"), redirect("ifb0")])
        .unwrap();
    let ingress: Vec<_> = plan
        .effects
        .iter()
        .filter_map(|(_, e)| match e {
            PlaneChange::SetIngress { port, ingress } => Some((port.clone(), ingress.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(ingress.len(), 1, "{:?}", plan.effects);
    let (port, filters) = &ingress[0];
    assert_eq!(port, "r2");
    let filters = filters.as_ref().expect("an ingress qdisc");
    assert_eq!(filters.len(), 1);
    assert_eq!(filters[0].1.as_deref(), Some("ifb0"));
    assert_eq!(filters[0].0.prio, 10);
    let entry = m.ports[1]
        .ingress
        .as_ref()
        .unwrap()
        .filters
        .first()
        .unwrap();
    assert_eq!(
        FilterHandle(entry.handle).display(entry.kind).to_string(),
        "800::800"
    );
    assert_eq!(entry.class, Some(ClassId::new(1, 1)), "the flowid is kept");
    // Taken away again: the data plane hears None.
    let plan = m
        .apply(&[Command::IngressDelete {
            dev: "r2".parse().unwrap(),
        }])
        .unwrap();
    assert!(matches!(
        plan.effects.as_slice(),
        [(Some(0), PlaneChange::SetIngress { ingress: None, .. })]
    ));
    assert!(m.ports[1].ingress.is_none());
}

#[test]
fn what_the_ingress_qdisc_refuses_and_why() {
    let mut m = model();
    let refused = |m: &mut Model, commands: &[Command]| m.apply(commands).unwrap_err();
    // No ingress qdisc yet.
    let e = refused(&mut m, &[redirect("ifb0")]);
    assert_eq!(e.code, ErrorCode::NotFound);
    assert!(e.message.contains("handle ffff: ingress"), "{e}");
    // Twice.
    let e = refused(&mut m, &[ingress_add("r2"), ingress_add("r2")]);
    assert_eq!((e.code, e.command), (ErrorCode::Exists, Some(1)));
    // An IFB has none.
    let e = refused(&mut m, &[ingress_add("ifb0")]);
    assert!(e.message.contains("IFB"), "{e}");
    // A redirect to an interface, to nothing, or on an htb qdisc's filter.
    let e = refused(&mut m, &[ingress_add("r2"), redirect("r1")]);
    assert!(e.message.contains("not an IFB"), "{e}");
    let e = refused(&mut m, &[ingress_add("r2"), redirect("ifb9")]);
    assert_eq!(e.code, ErrorCode::NoDevice);
    let Command::FilterAdd(mut on_htb) = redirect("ifb0") else {
        unreachable!()
    };
    on_htb.dev = "ifb0".parse().unwrap();
    on_htb.parent = Some(ClassId::new(1, 0));
    let e = refused(&mut m, &[ifb_tree(), Command::FilterAdd(on_htb)]);
    assert!(e.message.contains("parent ffff:"), "{e}");
    // An ingress filter that does nothing.
    let Command::FilterAdd(mut idle) = redirect("ifb0") else {
        unreachable!()
    };
    idle.redirect = None;
    let e = refused(&mut m, &[ingress_add("r2"), Command::FilterAdd(idle)]);
    assert!(e.message.contains("needs an action"), "{e}");
    // Every refusal took its batch back whole.
    assert!(
        m.ports
            .iter()
            .all(|p| p.ingress.is_none() && p.htb().is_none())
    );
}

#[test]
fn an_ingress_policer_needs_no_redirect() {
    // wondershaper 1.1a: `filter add dev r2 parent ffff: protocol ip prio 50 u32 match ip src
    // 0.0.0.0/0 police rate 2048kbit burst 10k drop flowid :1`.
    let mut m = model();
    let police = PoliceConfig {
        rate: Some(htb_core::Rate::from_kbit(2048)),
        burst: 10 * 1024,
        exceed: htb_config::filter::ControlAction::Drop,
        ..PoliceConfig::default()
    };
    let filter = Command::FilterAdd(Box::new(FilterSpec {
        parent: Some(ClassId::new(INGRESS_MAJOR, 0)),
        protocol: Protocol::parse("ip").unwrap(),
        prio: Some(50),
        kind: FilterKind::U32,
        class: Some(":1".parse().unwrap()),
        matcher: Match {
            src: Some("0.0.0.0/0".parse().unwrap()),
            ..Match::default()
        },
        police: Some(Box::new(police)),
        ..FilterSpec::new("r2".parse().unwrap())
    }));
    m.apply(&[ingress_add("r2"), filter]).unwrap();
    let hook = m.ports[1].ingress_hook().unwrap();
    assert_eq!(hook.len(), 1);
    assert!(hook[0].0.police.is_some() && hook[0].1.is_none());
    assert_eq!(
        hook[0].0.class,
        ClassId::new(INGRESS_MAJOR, 1),
        ":1 is ffff:1"
    );
}

#[test]
fn the_ingress_qdisc_and_ifb_ports_survive_the_state_file() {
    let mut m = model();
    m.apply(&[ifb_tree(), ingress_add("r2"), redirect("ifb0")])
        .unwrap();
    let text = m.to_toml();
    assert!(text.contains("type = \"ifb\""), "{text}");
    assert!(text.contains("[interface.ingress]"), "{text}");
    assert!(text.contains("redirect = \"ifb0\""), "{text}");
    let trees = crate::config::parse_state(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let back = Model::from_trees(trees, &|_| 1).unwrap();
    assert_eq!(back.to_toml(), text);
    assert!(back.ports[2].ifb);
    assert_eq!(back.ports[1].ingress_hook(), m.ports[1].ingress_hook());
    // An ingress qdisc without filters is kept too.
    let mut m = model();
    m.apply(&[ingress_add("r1")]).unwrap();
    let text = m.to_toml();
    let back = Model::from_trees(crate::config::parse_state(&text).unwrap(), &|_| 1).unwrap();
    assert_eq!(back.ports[0].ingress_hook(), Some(Vec::new()));
}

#[test]
fn ingress_and_tree_filters_are_sent_to_the_data_plane_apart() {
    // An ingress filter does not recompile the port's tree filters (a subscriber list can be
    // 100 000 long), nor does a tree filter resend the ingress hook.
    let mut m = model();
    let plan = m.apply(&[ingress_add("r2"), redirect("ifb0")]).unwrap();
    let sent = |plan: &Plan| -> Vec<&'static str> {
        plan.effects
            .iter()
            .map(|(_, e)| match e {
                PlaneChange::SetFilters { .. } => "filters",
                PlaneChange::SetIngress { .. } => "ingress",
                _ => "other",
            })
            .collect()
    };
    assert_eq!(sent(&plan), ["ingress"], "{:?}", plan.effects);
    let tree = Command::QdiscAdd(Box::new(QdiscSpec {
        handle: Some(ClassId::new(1, 0)),
        ..QdiscSpec::new("r2".parse().unwrap())
    }));
    let plan = m.apply(&[tree]).unwrap();
    assert!(!sent(&plan).contains(&"ingress"), "{:?}", plan.effects);
}
