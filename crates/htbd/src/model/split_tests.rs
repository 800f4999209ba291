//! The operator's split choices in the model: kept per class of the root tree's subtree tops,
//! sent to the data plane, gone with their class, undone with a refused batch, saved in the
//! state file, refused where they cannot apply.

use std::collections::BTreeMap;

use htb_core::SplitChoice;
use htb_ipc::SplitSpec;

use super::tests::batch;
use super::*;

fn split(id: &str, choice: Option<SplitChoice>) -> Command {
    Command::ClassSplit(SplitSpec {
        dev: "r2".parse().unwrap(),
        id: id.parse().unwrap(),
        choice,
    })
}

/// r2 with a root HTB: 1:1 at the top, 1:10 and 1:20 below it, 1:100 under 1:10.
fn tree() -> Model {
    let mut m = Model {
        ports: vec![PortModel::new("r2".parse().unwrap(), 4)],
    };
    m.apply(&batch(
        "qdisc add dev r2 root handle 1: htb default 20\n\
         class add dev r2 parent 1: classid 1:1 htb rate 40gbit\n\
         class add dev r2 parent 1:1 classid 1:10 htb rate 20gbit\n\
         class add dev r2 parent 1:1 classid 1:20 htb rate 1gbit\n\
         class add dev r2 parent 1:10 classid 1:100 htb rate 1gbit\n",
    ))
    .unwrap();
    m
}

fn id(s: &str) -> ClassId {
    s.parse().unwrap()
}

#[test]
fn a_choice_reaches_the_data_plane_and_the_state_file() {
    let mut m = tree();
    let plan = m
        .apply(&[
            split("1:10", Some(SplitChoice::Split)),
            split("1:20", Some(SplitChoice::Owned)),
        ])
        .unwrap();
    assert!(matches!(
        &plan.effects[0].1,
        PlaneChange::SetSplit { id: i, choice: Some(SplitChoice::Split), .. } if *i == id("1:10")
    ));
    let trees = m.ports[0].port_trees();
    assert_eq!(
        trees[0].split,
        BTreeMap::from([
            (id("1:10"), SplitChoice::Split),
            (id("1:20"), SplitChoice::Owned)
        ])
    );
    // The state file keeps them, in the config file's words.
    let text = m.to_toml();
    assert!(
        text.contains("id = \"1:10\"\nparent = \"1:1\"\nrate = 20000000000\nsplit = true\n"),
        "{text}"
    );
    assert!(text.contains("split = false\n"), "{text}");
    let back = Model::from_trees(crate::config::parse_state(&text).unwrap(), &|_| 4).unwrap();
    assert_eq!(back.to_toml(), text);
    assert_eq!(back.ports[0].port_trees()[0].split, trees[0].split);
    // None: back to split_above.
    m.apply(&[split("1:20", None)]).unwrap();
    assert_eq!(m.ports[0].port_trees()[0].split.len(), 1);
}

#[test]
fn a_choice_goes_with_its_class_and_comes_back_with_a_refused_batch() {
    let mut m = tree();
    m.apply(&[split("1:20", Some(SplitChoice::Split))]).unwrap();
    let before = m.to_toml();
    // Deleted, then a refused command: all undone, the choice back.
    let e = m
        .apply(&batch(
            "class del dev r2 classid 1:20\nclass del dev r2 classid 1:99\n",
        ))
        .unwrap_err();
    assert_eq!(e.command, Some(1));
    assert_eq!(m.to_toml(), before);
    m.apply(&batch("class del dev r2 classid 1:20\n")).unwrap();
    m.apply(&batch(
        "class add dev r2 parent 1:1 classid 1:20 htb rate 1gbit\n",
    ))
    .unwrap();
    assert!(
        m.ports[0].port_trees()[0].split.is_empty(),
        "the deleted class's choice went with it"
    );
}

#[test]
fn a_choice_below_a_subtree_s_top_or_outside_the_root_tree_is_refused() {
    let mut m = tree();
    let e = m
        .apply(&[split("1:100", Some(SplitChoice::Split))])
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Invalid);
    assert!(e.message.contains("below 1:10"), "{}", e.message);
    let e = m
        .apply(&[split("1:77", Some(SplitChoice::Split))])
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    m.apply(&[split("1:1", Some(SplitChoice::Split))]).unwrap();
    let mut mq = Model {
        ports: vec![PortModel::new("r2".parse().unwrap(), 4)],
    };
    mq.apply(&batch(
        "qdisc add dev r2 root handle 7fff: mq\n\
         qdisc add dev r2 parent 7fff:1 handle 1: htb\n\
         class add dev r2 parent 1: classid 1:1 htb rate 10gbit\n",
    ))
    .unwrap();
    let e = mq
        .apply(&[split("1:1", Some(SplitChoice::Split))])
        .unwrap_err();
    assert!(e.message.contains("under mq"), "{}", e.message);
}
