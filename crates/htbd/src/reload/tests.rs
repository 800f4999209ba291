//! A reload's batch turns the running trees into the file's exactly, touching only what
//! differs, and refuses what cannot change live.

use super::*;
use crate::config::parse_state;

const BASE: &str = r#"
[[interface]]
name = "r1"

[[interface]]
name = "r2"
[interface.qdisc]
default = "30"
[[interface.class]]
id = "1:1"
rate = "300mbit"
[[interface.class]]
id = "1:10"
parent = "1:1"
rate = "50mbit"
ceil = "300mbit"
leaf = { kind = "sfq", perturb = 10 }
[[interface.class]]
id = "1:20"
parent = "1:1"
rate = "100mbit"
leaf = { kind = "fq_codel", target = "5ms", handle = "20:" }
[[interface.class]]
id = "1:30"
parent = "1:1"
rate = "20mbit"
[[interface.filter]]
prio = 1
match = { dport = "5201" }
classid = "1:10"
[[interface.filter]]
prio = 2
match = { dport = "5202" }
classid = "1:20"
"#;

fn trees(text: &str) -> Vec<InterfaceTrees> {
    parse_state(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn model(text: &str) -> Model {
    Model::from_trees(trees(text), &|_| 4).unwrap()
}

/// Reloads `to` over `from`: the commands, after checking the model then holds `to` exactly.
fn reload(from: &str, to: &str) -> Vec<Command> {
    let mut m = model(from);
    let want = trees(to);
    let commands = commands(&m, &want).unwrap();
    if let Err(e) = m.apply(&commands) {
        panic!("{e} (command {:?})\n{commands:#?}", e.command);
    }
    assert!(matches(&m, &want), "{commands:#?}\n{}", m.to_toml());
    // And a second reload of the same file has nothing to do.
    assert_eq!(self::commands(&m, &want).unwrap(), Vec::new());
    commands
}

#[test]
fn an_unchanged_file_changes_nothing() {
    assert!(reload(BASE, BASE).is_empty());
    assert!(matches(&model(BASE), &trees(BASE)));
    assert!(!matches(
        &model(BASE),
        &trees(&BASE.replace("50mbit", "60mbit"))
    ));
}

#[test]
fn a_changed_rate_is_one_class_change() {
    let commands = reload(
        BASE,
        &BASE.replace("rate = \"20mbit\"", "rate = \"25mbit\""),
    );
    assert_eq!(commands.len(), 1, "{commands:#?}");
    let Command::ClassChange(c) = &commands[0] else {
        panic!("{commands:#?}")
    };
    assert_eq!(
        (c.id.to_string().as_str(), c.rate.bits_per_sec()),
        ("1:30", 25_000_000)
    );
}

#[test]
fn classes_come_go_and_move() {
    // 1:30 goes, 1:40 comes under 1:1, 1:10 moves under a new inner class 1:2.
    let to = BASE
        .replace(
            "[[interface.class]]\nid = \"1:30\"\nparent = \"1:1\"\nrate = \"20mbit\"\n",
            "[[interface.class]]\nid = \"1:40\"\nparent = \"1:1\"\nrate = \"5mbit\"\n\
             [[interface.class]]\nid = \"1:2\"\nparent = \"1:1\"\nrate = \"60mbit\"\n",
        )
        .replace(
            "id = \"1:10\"\nparent = \"1:1\"",
            "id = \"1:10\"\nparent = \"1:2\"",
        )
        .replace("default = \"30\"", "default = \"40\"");
    let commands = reload(BASE, &to);
    // 1:20 is untouched: no class or leaf command names it (the filters are added again, as
    // one targeted 1:10, which moved).
    let names_20 = commands
        .iter()
        .filter(|c| !matches!(c, Command::FilterAdd(_)))
        .any(|c| format!("{c:?}").contains("\"1:20\"") || format!("{c:?}").contains("minor: 32"));
    assert!(!names_20, "{commands:#?}");
}

#[test]
fn leaves_change_in_place_or_are_replaced() {
    // sfq options: changed in place; fq_codel → pfifo: replaced; a leaf added to 1:30.
    let to = BASE
        .replace("perturb = 10", "perturb = 20")
        .replace(
            "leaf = { kind = \"fq_codel\", target = \"5ms\", handle = \"20:\" }",
            "leaf = { kind = \"pfifo\", limit = 50 }",
        )
        .replace(
            "rate = \"20mbit\"\n",
            "rate = \"20mbit\"\nleaf = { kind = \"bfifo\", limit = 30000 }\n",
        );
    let commands = reload(BASE, &to);
    assert!(
        commands
            .iter()
            .any(|c| matches!(c, Command::LeafChange(l) if l.parent.is_some_and(|p| p.to_string() == "1:10"))),
        "{commands:#?}"
    );
    // And back: the leaves return to the file's.
    reload(&to, BASE);
}

#[test]
fn filters_and_qdisc_parameters_follow_the_file() {
    let to = BASE
        .replace("dport = \"5202\"", "dport = \"5302\"")
        .replace("default = \"30\"", "default = \"30\"\nr2q = 5");
    let commands = reload(BASE, &to);
    assert!(
        matches!(commands[0], Command::QdiscChange(_)),
        "{commands:#?}"
    );
}

#[test]
fn shaping_starts_stops_and_changes_handle() {
    let unshaped = "[[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n";
    reload(BASE, unshaped);
    reload(unshaped, BASE);
    let other = BASE
        .replace("default = \"30\"", "handle = \"2:\"\ndefault = \"30\"")
        .replace("\"1:", "\"2:");
    let commands = reload(BASE, &other);
    assert!(
        matches!(commands[0], Command::QdiscReplace(_)),
        "{commands:#?}"
    );
}

#[test]
fn what_cannot_change_live_is_refused() {
    let m = model(BASE);
    let ports = BASE.replace("name = \"r1\"", "name = \"r3\"");
    let e = commands(&m, &trees(&ports)).unwrap_err();
    assert!(e.message.contains("restart htbd"), "{e}");
    let burst = BASE.replace("default = \"30\"", "default = \"30\"\nburst_time = \"5ms\"");
    let e = commands(&m, &trees(&burst)).unwrap_err();
    assert!(e.message.contains("burst_time"), "{e}");
}

const MQ: &str = r#"
[[interface]]
name = "r1"

[[interface]]
name = "r2"
mq = "7fff:"
[[interface.tree]]
parent = "7fff:1"
qdisc = { handle = "1:", default = "2" }
[[interface.tree.class]]
id = "1:1"
rate = "100mbit"
[[interface.tree.class]]
id = "1:2"
parent = "1:1"
rate = "10mbit"
[[interface.tree.filter]]
prio = 1
match = { dport = "5201" }
classid = "1:2"
[[interface.tree]]
parent = "7fff:2"
qdisc = { handle = "2:" }
[[interface.tree.class]]
id = "2:1"
rate = "100mbit"
"#;

#[test]
fn a_reload_moves_between_an_htb_root_and_mq_and_changes_mq_trees_in_place() {
    // htb root → mq: the root is replaced, every tree added.
    let to_mq = reload(BASE, MQ);
    assert!(
        matches!(to_mq.first(), Some(Command::MqReplace(m)) if m.handle == Some(ClassId::new(0x7fff, 0))),
        "{to_mq:#?}"
    );
    // Within the same mq: a tree dropped goes alone, a changed rate is changed in place.
    let fewer = MQ
        .split("[[interface.tree]]\nparent = \"7fff:2\"")
        .next()
        .unwrap()
        .replace("rate = \"10mbit\"", "rate = \"20mbit\"");
    let commands = reload(MQ, &fewer);
    assert_eq!(commands.len(), 2, "{commands:#?}");
    assert!(matches!(
        &commands[0],
        Command::LeafDelete { parent, .. } if *parent == ClassId::new(0x7fff, 2)
    ));
    assert!(matches!(&commands[1], Command::ClassChange(c) if c.id == ClassId::new(1, 2)));
    // And back to the htb root.
    let back = reload(MQ, BASE);
    assert!(
        matches!(back.first(), Some(Command::QdiscReplace(q)) if q.parent.is_none()),
        "{back:#?}"
    );
}

#[test]
fn a_size_table_comes_changes_and_goes_with_one_qdisc_change() {
    let with = |stab: &str| {
        BASE.replace(
            "default = \"30\"",
            &format!("default = \"30\"\nstab = {stab}"),
        )
    };
    let ethernet = with("{ overhead = 34, linklayer = \"ethernet\" }");
    let commands = reload(BASE, &ethernet);
    let [Command::QdiscChange(q)] = &commands[..] else {
        panic!("{commands:#?}")
    };
    assert_eq!(q.stab.map(|s| s.overhead), Some(34));
    // Another table, then none: one change each, the classes untouched.
    let atm = with("{ overhead = 44, linklayer = \"adsl\" }");
    assert_eq!(reload(&ethernet, &atm).len(), 1);
    let commands = reload(&atm, BASE);
    let [Command::QdiscChange(q)] = &commands[..] else {
        panic!("{commands:#?}")
    };
    assert_eq!(q.stab, None);
    // A table tc refuses is a config error at its line.
    let e = parse_state(&with("{ mtu = 1500 }"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("stab needs overhead") && e.starts_with("line 9, column 8"),
        "{e}"
    );
}

#[test]
fn a_policer_in_the_file_reloads_only_when_it_changes() {
    let policed = |burst: &str| {
        BASE.replace(
            "match = { dport = \"5202\" }\nclassid = \"1:20\"",
            &format!(
                "match = {{ dport = \"5202\" }}\nclassid = \"1:20\"\npolice = {{ rate = \"5mbit\", burst = \"{burst}\", exceed = \"drop\" }}"
            ),
        )
    };
    let with = policed("20k");
    assert!(with.contains("police"), "{with}");
    let commands = reload(BASE, &with);
    assert!(
        commands.iter().any(|c| matches!(c, Command::FilterAdd(f) | Command::FilterChange(f) | Command::FilterReplace(f) if f.police.as_ref().is_some_and(|p| p.burst == 20 * 1024))),
        "{commands:#?}"
    );
    assert!(reload(&with, &with).is_empty());
    assert!(!reload(&with, &policed("30k")).is_empty());
    // A verdict tc does not know is a config error at the policer.
    let e = parse_state(&with.replace("\"drop\"", "\"shoot\""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid police verdict \"shoot\""), "{e}");
}

#[test]
fn an_ingress_redirect_comes_and_goes_with_the_file() {
    let ifb = "\n[[interface]]\nname = \"ifb0\"\ntype = \"ifb\"\n[interface.qdisc]\ndefault = \"1\"\n\
               [[interface.class]]\nid = \"1:1\"\nrate = \"10mbit\"\n";
    let plain = format!("{BASE}{ifb}");
    let redirected = plain.replacen(
        "name = \"r2\"\n",
        "name = \"r2\"\n[interface.ingress]\nredirect = \"ifb0\"\n",
        1,
    );
    let on = reload(&plain, &redirected);
    assert_eq!(
        on[..2],
        [
            Command::IngressAdd {
                dev: "r2".parse().unwrap()
            },
            on[1].clone()
        ]
    );
    assert!(matches!(&on[1], Command::FilterAdd(f) if f.redirect.as_deref() == Some("ifb0")));
    assert_eq!(on.len(), 2, "{on:#?}");
    let off = reload(&redirected, &plain);
    assert_eq!(
        off,
        [Command::IngressDelete {
            dev: "r2".parse().unwrap()
        }]
    );
    // An interface does not become an IFB live.
    let e = commands(
        &model(&plain),
        &trees(&plain.replace("type = \"ifb\"\n", "")),
    )
    .unwrap_err();
    assert!(e.message.contains("restart"), "{e}");
}

#[test]
fn labels_come_change_and_go_with_the_file_and_leave_with_their_class() {
    let labelled = BASE.replace(
        "id = \"1:30\"\nparent = \"1:1\"\nrate = \"20mbit\"\n",
        "id = \"1:30\"\nparent = \"1:1\"\nrate = \"20mbit\"\n\
         label = { name = \"Ann\", circuit = \"17\", devices = [{ id = \"a\", mac = \"00:11:22:33:44:55\", addresses = [\"10.0.3.7\"] }] }\n",
    );
    let is_label = |c: &Command| matches!(c, Command::ClassLabel(_));
    let commands = reload(BASE, &labelled);
    assert_eq!(commands.len(), 1, "only the label: {commands:#?}");
    assert!(is_label(&commands[0]));
    // Renamed: one label command.
    let renamed = labelled.replace("\"Ann\"", "\"Ann B\"");
    let commands = reload(&labelled, &renamed);
    assert!(
        commands.len() == 1 && is_label(&commands[0]),
        "{commands:#?}"
    );
    // Gone from the file: taken away.
    let commands = reload(&renamed, BASE);
    let Some(Command::ClassLabel(l)) = commands.first() else {
        panic!("{commands:#?}")
    };
    assert_eq!((commands.len(), &l.label), (1, &None));
    // Its class gone: the class delete takes it, no label command.
    let without_30 = labelled
        .replace("default = \"30\"", "default = \"20\"")
        .split("[[interface.class]]\nid = \"1:30\"")
        .next()
        .unwrap()
        .to_owned()
        + "[[interface.filter]]\nprio = 1\nmatch = { dport = \"5201\" }\nclassid = \"1:10\"\n\
           [[interface.filter]]\nprio = 2\nmatch = { dport = \"5202\" }\nclassid = \"1:20\"\n";
    let commands = reload(&labelled, &without_30);
    assert!(!commands.iter().any(is_label), "{commands:#?}");
}

/// A subtree's split choice comes, changes and goes with the file as one typed command, and
/// leaves with its class.
#[test]
fn split_choices_come_change_and_go_with_the_file() {
    let at_30 = "id = \"1:30\"\nparent = \"1:1\"\nrate = \"20mbit\"\n";
    let split = BASE.replace(at_30, &format!("{at_30}split = true\n"));
    let choice = |c: &Command| match c {
        Command::ClassSplit(s) => Some((s.id, s.choice)),
        _ => None,
    };
    let id = ClassId::new(1, 0x30);
    let commands = reload(BASE, &split);
    assert_eq!(
        commands.iter().map(choice).collect::<Vec<_>>(),
        [Some((id, Some(htb_core::SplitChoice::Split)))],
        "only the choice: {commands:#?}"
    );
    let owned = split.replace("split = true", "split = false");
    let commands = reload(&split, &owned);
    assert_eq!(
        commands.iter().map(choice).collect::<Vec<_>>(),
        [Some((id, Some(htb_core::SplitChoice::Owned)))]
    );
    let commands = reload(&owned, BASE);
    assert_eq!(
        commands.iter().map(choice).collect::<Vec<_>>(),
        [Some((id, None))]
    );
    // Its class gone: the class delete takes it along.
    let without_30 = split
        .replace("default = \"30\"", "default = \"20\"")
        .replace(&format!("[[interface.class]]\n{at_30}split = true\n"), "");
    let commands = reload(&split, &without_30);
    assert!(
        !commands.iter().any(|c| choice(c).is_some()),
        "{commands:#?}"
    );
}
