//! `split = true | false` on a class: the operator's choice for the subtree it tops when htbd
//! runs several workers (tc has no word for it). A subtree is a class at the top of the tree,
//! or a child of one, with everything below it; a split subtree is served by every worker at
//! once, an owned one by one worker whatever its rate.

use std::collections::BTreeMap;

use htb_core::{ClassId, SplitChoice, TreeSpec};

use crate::error::{ConfigError, Located};
use crate::tree::ClassSection;

/// The choices `classes` (parsed from `text` into `tree`) make, by class. `under_mq`: the tree
/// hangs under an `mq` class, whose worker serves it whole.
///
/// # Errors
/// `split` on a class below a subtree's top, or in a tree under `mq`, located at the key.
pub fn split_choices(
    text: &str,
    classes: &[Located<ClassSection>],
    tree: &TreeSpec,
    under_mq: bool,
) -> Result<BTreeMap<ClassId, SplitChoice>, ConfigError> {
    let parent_of = |id: ClassId| {
        tree.classes
            .iter()
            .find(|c| c.id == id)
            .and_then(|c| c.parent)
    };
    let mut choices = BTreeMap::new();
    for section in classes.iter().map(Located::get_ref) {
        let Some(split) = &section.split else {
            continue;
        };
        let id = section.id.get_ref().0;
        if under_mq {
            return Err(ConfigError::spanned(
                text,
                &split.span(),
                "split is for htbd's own layout: a tree under mq is served whole by its TX \
                 queue's worker",
            ));
        }
        if let Some(above) = parent_of(id).and_then(|p| parent_of(p).map(|_| p)) {
            return Err(ConfigError::spanned(
                text,
                &split.span(),
                format!(
                    "split is chosen for a whole subtree, at its top (a class at the top of the \
                     tree, or a child of one): class {id} is in the subtree of {}",
                    top_of(above, &parent_of)
                ),
            ));
        }
        let choice = if *split.get_ref() {
            SplitChoice::Split
        } else {
            SplitChoice::Owned
        };
        choices.insert(id, choice);
    }
    Ok(choices)
}

/// The top of the subtree `id` is in.
fn top_of(mut id: ClassId, parent_of: &impl Fn(ClassId) -> Option<ClassId>) -> ClassId {
    while let Some(parent) = parent_of(id) {
        if parent_of(parent).is_none() {
            break;
        }
        id = parent;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::TestDoc;

    fn choices(text: &str, under_mq: bool) -> Result<BTreeMap<ClassId, SplitChoice>, ConfigError> {
        let (doc, tree) = TestDoc::tree(text)?;
        split_choices(text, &doc.class, &tree, under_mq)
    }

    const TREE: &str = "[[class]]\nid = \"1:1\"\nrate = \"40gbit\"\n\
        [[class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"20gbit\"\nsplit = true\n\
        [[class]]\nid = \"1:20\"\nparent = \"1:1\"\nrate = \"8gbit\"\nsplit = false\n\
        [[class]]\nid = \"1:100\"\nparent = \"1:10\"\nrate = \"1gbit\"\n";

    #[test]
    fn a_subtree_s_top_takes_a_choice() {
        let c = choices(TREE, false).unwrap();
        assert_eq!(
            c.into_iter().collect::<Vec<_>>(),
            [
                (ClassId::new(1, 0x10), SplitChoice::Split),
                (ClassId::new(1, 0x20), SplitChoice::Owned)
            ]
        );
        let top = "[[class]]\nid = \"1:1\"\nrate = \"20gbit\"\nsplit = true\n";
        assert_eq!(choices(top, false).unwrap().len(), 1, "a top-level class");
    }

    #[test]
    fn below_a_subtree_s_top_or_under_mq_it_is_refused_where_it_is_written() {
        let deep = format!(
            "{TREE}[[class]]\nid = \"1:200\"\nparent = \"1:100\"\nrate = \"1mbit\"\nsplit = true\n"
        );
        let e = choices(&deep, false).unwrap_err().to_string();
        assert!(
            e.starts_with("line 22, column 9: class[4].split: split is chosen for a whole subtree")
                && e.contains("class 1:200 is in the subtree of 1:10"),
            "{e}"
        );
        let e = choices(TREE, true).unwrap_err().to_string();
        assert!(
            e.starts_with("line 8, column 9: class[1].split: split is for htbd's own layout"),
            "{e}"
        );
        let e = choices(&TREE.replace("split = true", "split = \"yes\""), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("class[1].split") && e.contains("bool"), "{e}");
    }
}
