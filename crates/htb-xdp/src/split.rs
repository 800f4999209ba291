//! Which subtrees are split: served by every worker at once instead of by one.
//!
//! One worker serving a subtree caps it at what one core forwards (5.6 Gbit/s of 1514-byte UDP
//! on the 16-core lab machine, `docs/bench-16core.md`). A split subtree has no owner: each
//! worker queues the frames it received into its own copy of the subtree's leaves (no handover),
//! and the copies share every class's buckets (`htb_core::SharedBuckets`, with a seat per
//! worker so that the workers with packets waiting share a leaf fairly).
//!
//! Who decides: the operator, per subtree (`split = true` or `false` on its top class in the
//! config file, [`SplitChoice`]); else htbd, splitting a subtree whose top class's *rate* is
//! above `[daemon] split_above`. The rate, not the ceil: a subscriber's ceil is often the
//! uplink's, which would split every subscriber, each then paying shared buckets' atomics on
//! every worker; a rate is a promise, and a class promised more than a core carries must be
//! split to keep it. A subtree is decided again when its top class is added or changed (`tc
//! class change` across the threshold), when the operator's choice changes, and with every new
//! tree.

use std::collections::BTreeMap;

use htb_core::{ClassId, Rate, SplitChoice};

/// The rule: the daemon's threshold and the operator's choices per port.
#[derive(Debug, Default)]
pub(crate) struct SplitRule {
    /// Subtrees whose top class's rate is above this are split (`None`: only by choice).
    above: Option<Rate>,
    /// Per port, the operator's choices for its root tree's subtrees, by their top class.
    choices: Vec<BTreeMap<ClassId, SplitChoice>>,
}

impl SplitRule {
    /// The rule for `ports` ports, splitting above `above`, with each port's choices.
    pub(crate) fn new(above: Option<Rate>, choices: Vec<BTreeMap<ClassId, SplitChoice>>) -> Self {
        Self { above, choices }
    }

    /// Whether subtree `top` of `port`, whose top class has rate `rate`, is split.
    pub(crate) fn splits(&self, port: usize, top: ClassId, rate: Rate) -> bool {
        match self.choices.get(port).and_then(|c| c.get(&top)) {
            Some(SplitChoice::Split) => true,
            Some(SplitChoice::Owned) => false,
            None => self.above.is_some_and(|above| rate > above),
        }
    }

    /// `port` has a new root tree, with these choices.
    pub(crate) fn set_tree(&mut self, port: usize, choices: BTreeMap<ClassId, SplitChoice>) {
        if self.choices.len() <= port {
            self.choices.resize_with(port + 1, BTreeMap::new);
        }
        self.choices[port] = choices;
    }

    /// The operator chose `choice` for subtree `top` of `port` (`None`: the threshold decides).
    pub(crate) fn choose(&mut self, port: usize, top: ClassId, choice: Option<SplitChoice>) {
        if self.choices.len() <= port {
            self.choices.resize_with(port + 1, BTreeMap::new);
        }
        match choice {
            Some(c) => self.choices[port].insert(top, c),
            None => self.choices[port].remove(&top),
        };
    }

    /// Class `id` of `port` was deleted: its choice goes with it, as its label does.
    pub(crate) fn forget(&mut self, port: usize, id: ClassId) {
        if let Some(c) = self.choices.get_mut(port) {
            c.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(minor: u32) -> ClassId {
        ClassId::new(1, minor)
    }

    #[test]
    fn above_the_threshold_a_subtree_is_split() {
        let rule = SplitRule::new(Some(Rate::from_gbit(4)), Vec::new());
        assert!(rule.splits(0, id(1), Rate::from_gbit(10)));
        assert!(
            !rule.splits(0, id(1), Rate::from_gbit(4)),
            "at it: not above"
        );
        assert!(!rule.splits(3, id(1), Rate::from_mbit(100)), "any port");
        let never = SplitRule::new(None, Vec::new());
        assert!(
            !never.splits(0, id(1), Rate::MAX),
            "no threshold: only by choice"
        );
    }

    #[test]
    fn the_operator_s_choice_wins_over_the_threshold_and_goes_with_its_class() {
        let mut rule = SplitRule::new(Some(Rate::from_gbit(4)), Vec::new());
        rule.choose(1, id(10), Some(SplitChoice::Split));
        rule.choose(1, id(20), Some(SplitChoice::Owned));
        assert!(rule.splits(1, id(10), Rate::from_mbit(1)));
        assert!(!rule.splits(1, id(20), Rate::from_gbit(40)));
        assert!(
            rule.splits(0, id(20), Rate::from_gbit(40)),
            "another port's"
        );
        rule.choose(1, id(20), None);
        assert!(
            rule.splits(1, id(20), Rate::from_gbit(40)),
            "back to the rule"
        );
        rule.forget(1, id(10));
        assert!(
            !rule.splits(1, id(10), Rate::from_mbit(1)),
            "deleted with it"
        );
        rule.set_tree(1, BTreeMap::from([(id(30), SplitChoice::Split)]));
        assert!(rule.splits(1, id(30), Rate::from_mbit(1)));
        rule.set_tree(1, BTreeMap::new());
        assert!(
            !rule.splits(1, id(30), Rate::from_mbit(1)),
            "a new tree's own"
        );
    }
}
