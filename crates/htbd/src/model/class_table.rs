//! A tree's classes as the operator gave them (defaults unresolved), each with its own leaf
//! qdisc, its label and how many filters send packets to it: one record per class, in class
//! order, kept once.
//!
//! The model had a `BTreeMap` of classes (184-byte `ClassDef`s, the leaf qdisc inline), a
//! second one of labels and a hash map of filter use counts, all three keyed by the class:
//! 357 + 265 + 18 bytes per subscriber of an import. A record here is 56 bytes: a subscriber's
//! class is a rate and a ceil, so those are inline and any other parameter or a leaf qdisc of
//! its own goes to a box only the classes that have one pay for; its label is a
//! [`LabelRef`] into the tree's [`LabelArena`].

use htb_config::label::PackedLabel;
use htb_config::{ClassDef, ClassLabel, LeafDef};
use htb_core::{ClassId, ClassSpec, Rate};

use super::label_arena::{LabelArena, LabelRef, LabelsFull};
use super::sorted_chunks::{Keyed, SortedChunks};

/// One class of a tree as it was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassEntry {
    id: ClassId,
    parent: Option<ClassId>,
    /// The spec's rate and ceil (`Rate::ZERO`: none) when it has nothing else (`rare` holds
    /// the spec otherwise).
    rate: Rate,
    ceil: Rate,
    rare: Option<Box<Rare>>,
    label: Option<LabelRef>,
    /// How many filters of its tree send packets to it (`class del` refuses it while any
    /// does).
    users: u32,
}

/// What few classes have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Rare {
    /// A spec with more than a rate and a ceil.
    spec: Option<ClassSpec>,
    /// Its own leaf qdisc.
    leaf: Option<LeafDef>,
}

impl Keyed for ClassEntry {
    type Key = ClassId;

    fn key(&self) -> ClassId {
        self.id
    }
}

impl ClassEntry {
    fn new(def: ClassDef) -> Self {
        let mut entry = Self {
            id: def.id,
            parent: def.parent,
            rate: Rate::ZERO,
            ceil: Rate::ZERO,
            rare: None,
            label: None,
            users: 0,
        };
        entry.set_spec(def.spec);
        entry.set_leaf(def.leaf);
        entry
    }

    /// The class.
    #[must_use]
    pub fn id(&self) -> ClassId {
        self.id
    }

    /// Its parent (`None`: a class at the top of the tree).
    #[must_use]
    pub fn parent(&self) -> Option<ClassId> {
        self.parent
    }

    /// Its parameters as given.
    #[must_use]
    pub fn spec(&self) -> ClassSpec {
        match self.rare.as_ref().and_then(|r| r.spec.clone()) {
            Some(spec) => spec,
            None => ClassSpec {
                ceil: (self.ceil != Rate::ZERO).then_some(self.ceil),
                ..ClassSpec::new(self.rate)
            },
        }
    }

    /// Its own leaf qdisc (`None`: the tree's default).
    #[must_use]
    pub fn leaf(&self) -> Option<LeafDef> {
        self.rare.as_ref().and_then(|r| r.leaf)
    }

    /// It as a tree's class.
    #[must_use]
    pub fn def(&self) -> ClassDef {
        ClassDef {
            id: self.id,
            parent: self.parent,
            spec: self.spec(),
            leaf: self.leaf(),
        }
    }

    /// Whether a filter sends packets to it.
    #[must_use]
    pub fn in_use(&self) -> bool {
        self.users > 0
    }

    fn set_spec(&mut self, spec: ClassSpec) {
        // Inline when the spec is a rate and a ceil that is not zero (zero marks none).
        let plain = ClassSpec {
            ceil: spec.ceil,
            ..ClassSpec::new(spec.rate)
        };
        let (rate, ceil, boxed) = if spec == plain && spec.ceil != Some(Rate::ZERO) {
            (spec.rate, spec.ceil.unwrap_or(Rate::ZERO), None)
        } else {
            (Rate::ZERO, Rate::ZERO, Some(spec))
        };
        (self.rate, self.ceil) = (rate, ceil);
        self.rare_mut(|r| r.spec = boxed);
    }

    fn set_leaf(&mut self, leaf: Option<LeafDef>) {
        self.rare_mut(|r| r.leaf = leaf);
    }

    /// Changes the rare parts; the box goes when nothing is left in it.
    fn rare_mut(&mut self, f: impl FnOnce(&mut Rare)) {
        let mut rare = self.rare.take().map_or_else(Rare::default, |b| *b);
        f(&mut rare);
        self.rare = (rare != Rare::default()).then(|| Box::new(rare));
    }
}

/// A tree's classes in class order, with their labels.
#[derive(Debug, Default)]
pub struct ClassTable {
    classes: SortedChunks<ClassEntry>,
    labels: LabelArena,
}

impl ClassTable {
    /// How many classes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.classes.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// Whether class `id` exists.
    #[must_use]
    pub fn contains(&self, id: ClassId) -> bool {
        self.classes.get(id).is_some()
    }

    /// Class `id`.
    #[must_use]
    pub fn get(&self, id: ClassId) -> Option<&ClassEntry> {
        self.classes.get(id)
    }

    /// The classes in class order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &ClassEntry> + ExactSizeIterator + Clone {
        self.classes.iter()
    }

    /// Class `id`'s label.
    #[must_use]
    pub fn label(&self, id: ClassId) -> Option<PackedLabel<'_>> {
        self.labels.get(self.classes.get(id)?.label?)
    }

    /// The labelled classes with their labels, in class order.
    pub fn labels(&self) -> impl Iterator<Item = (ClassId, PackedLabel<'_>)> {
        self.classes
            .iter()
            .filter_map(|c| Some((c.id, self.labels.get(c.label?)?)))
    }

    /// Whether the labelled classes are exactly `want`'s, with `want`'s labels.
    #[must_use]
    pub fn labels_are<'a>(
        &self,
        want: impl ExactSizeIterator<Item = (&'a ClassId, &'a ClassLabel)>,
    ) -> bool {
        let mut packed = Vec::new();
        want.len() == self.labels().count()
            && want.into_iter().all(|(&id, label)| {
                packed.clear();
                label.pack(&mut packed);
                self.label(id).is_some_and(|l| l.as_bytes() == packed)
            })
    }

    /// Adds class `def` (replacing any class with its id), unlabelled and unused.
    pub(super) fn add(&mut self, def: ClassDef) {
        if let Some(old) = self.classes.insert(ClassEntry::new(def)) {
            self.release(&old);
        }
    }

    /// Gives class `id` the parameters `spec`; the old ones (`None`: no class `id`).
    pub(super) fn set_spec(&mut self, id: ClassId, spec: ClassSpec) -> Option<ClassSpec> {
        let entry = self.classes.get_mut(id)?;
        let old = entry.spec();
        entry.set_spec(spec);
        Some(old)
    }

    /// Gives class `id` its own leaf qdisc (`None`: the default); the old one (`None`: no
    /// class `id`).
    pub(super) fn set_leaf(
        &mut self,
        id: ClassId,
        leaf: Option<LeafDef>,
    ) -> Option<Option<LeafDef>> {
        let entry = self.classes.get_mut(id)?;
        let old = entry.leaf();
        entry.set_leaf(leaf);
        Some(old)
    }

    /// Takes class `id` out, with its label (whose bytes stay until the next batch, for
    /// [`restore`](Self::restore) to bring back).
    pub(super) fn remove(&mut self, id: ClassId) -> Option<ClassEntry> {
        let old = self.classes.remove(id)?;
        self.release(&old);
        Some(old)
    }

    /// Puts back a class [`remove`](Self::remove) took out, label and all.
    pub(super) fn restore(&mut self, entry: ClassEntry) {
        if let Some(at) = entry.label {
            self.labels.revive(at);
        }
        if let Some(old) = self.classes.insert(entry) {
            self.release(&old);
        }
    }

    fn release(&mut self, entry: &ClassEntry) {
        if let Some(at) = entry.label {
            self.labels.release(at);
        }
    }

    /// Labels class `id` (`None`: takes its label off); where its old label was, for
    /// [`restore_label`](Self::restore_label). A class that does not exist is left alone.
    ///
    /// # Errors
    /// No room for more labels.
    pub(super) fn set_label(
        &mut self,
        id: ClassId,
        label: Option<&ClassLabel>,
    ) -> Result<Option<LabelRef>, LabelsFull> {
        if !self.contains(id) {
            return Ok(None);
        }
        let new = label.map(|l| self.labels.add(l)).transpose()?;
        Ok(self.swap_label(id, new))
    }

    /// Gives class `id` back the label `old` that [`set_label`](Self::set_label) replaced.
    pub(super) fn restore_label(&mut self, id: ClassId, old: Option<LabelRef>) {
        if let Some(at) = old {
            self.labels.revive(at);
        }
        let _ = self.swap_label(id, old);
    }

    /// Class `id`'s label is now `new`; its old one is released and returned.
    fn swap_label(&mut self, id: ClassId, new: Option<LabelRef>) -> Option<LabelRef> {
        let entry = self.classes.get_mut(id)?;
        let old = std::mem::replace(&mut entry.label, new);
        if let Some(at) = old {
            self.labels.release(at);
        }
        old
    }

    /// One filter more (`add`) or fewer sends packets to `class` (a class of another tree, as
    /// an ingress filter's flowid names, is not counted).
    pub(super) fn count_user(&mut self, class: ClassId, add: bool) {
        if let Some(entry) = self.classes.get_mut(class) {
            entry.users = if add {
                entry.users + 1
            } else {
                entry.users.saturating_sub(1)
            };
        }
    }

    /// Copies the live labels into fresh chunks once half of the arena is labels no class
    /// holds. Only between batches: an undo of the batch before may still hold a released
    /// label's place until then.
    pub(super) fn compact_labels(&mut self) {
        if !self.labels.wants_compaction() {
            return;
        }
        let refs = self.classes.iter_mut().filter_map(|c| c.label.as_mut());
        match self.labels.compacted(refs) {
            Ok(fresh) => self.labels = fresh,
            // The live labels fit where all of them were: this cannot happen, and then the
            // old arena simply stays.
            Err(e) => tracing::error!("compacting the labels: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use htb_core::{LeafConfig, LengthAdjust};

    use super::*;

    fn def(minor: u32, spec: ClassSpec, leaf: Option<LeafDef>) -> ClassDef {
        ClassDef {
            id: ClassId::new(1, minor),
            parent: Some(ClassId::new(1, 1)),
            spec,
            leaf,
        }
    }

    fn label(name: &str) -> ClassLabel {
        serde_json::from_value(serde_json::json!({ "name": name })).unwrap()
    }

    /// Whatever a class was given comes back as given, inline or boxed; a record is 56 bytes.
    #[test]
    fn classes_come_back_as_given() {
        assert_eq!(size_of::<ClassEntry>(), 56);
        let rate = Rate::from_mbit(5);
        let specs = [
            ClassSpec::new(rate),
            ClassSpec::new(rate).with_ceil(Rate::from_mbit(50)),
            // A ceil of zero is kept as given, not taken for none.
            ClassSpec::new(rate).with_ceil(Rate::ZERO),
            ClassSpec {
                prio: 3,
                ..ClassSpec::new(rate)
            },
            ClassSpec {
                burst: Some(1500),
                adjust: LengthAdjust {
                    overhead: 4,
                    ..LengthAdjust::default()
                },
                ..ClassSpec::new(rate)
            },
        ];
        let leaf = LeafDef {
            handle: Some(0x10),
            config: LeafConfig::default(),
        };
        let mut table = ClassTable::default();
        for (i, spec) in specs.iter().enumerate() {
            for (j, leaf) in [None, Some(leaf)].into_iter().enumerate() {
                let minor = 10 + 2 * u32::try_from(i).unwrap() + u32::try_from(j).unwrap();
                table.add(def(minor, spec.clone(), leaf));
                let entry = table.get(ClassId::new(1, minor)).unwrap();
                assert_eq!(entry.def(), def(minor, spec.clone(), leaf));
                assert_eq!(entry.rare.is_some(), i >= 2 || leaf.is_some(), "{minor}");
            }
        }
        // Changes go through the same forms: a boxed class that becomes plain loses its box.
        let id = ClassId::new(1, 16);
        assert_eq!(table.set_spec(id, specs[1].clone()), Some(specs[3].clone()));
        assert!(table.get(id).unwrap().rare.is_none());
        assert_eq!(table.set_leaf(id, Some(leaf)), Some(None));
        assert_eq!(table.get(id).unwrap().leaf(), Some(leaf));
        assert_eq!(table.set_spec(ClassId::new(1, 99), specs[0].clone()), None);
        let ids: Vec<u32> = table.iter().map(|c| c.id().minor()).collect();
        assert_eq!(ids, (10..20).collect::<Vec<_>>());
    }

    /// A removed class's label comes back with it; replaced labels come back by their undo;
    /// compaction keeps exactly the labels classes hold.
    #[test]
    fn labels_follow_their_classes() {
        let mut table = ClassTable::default();
        let n = 3000;
        for minor in 0..n {
            table.add(def(minor, ClassSpec::new(Rate::from_mbit(1)), None));
            let l = label(&format!("subscriber {minor:>40}"));
            assert_eq!(table.set_label(ClassId::new(1, minor), Some(&l)), Ok(None));
        }
        let id = ClassId::new(1, 7);
        let removed = table.remove(id).unwrap();
        assert!(table.label(id).is_none());
        table.restore(removed);
        assert_eq!(
            table.label(id).unwrap().title(),
            label(&format!("subscriber {:>40}", 7)).title()
        );
        let old = table.set_label(id, Some(&label("new"))).unwrap();
        assert_eq!(table.label(id).unwrap().title(), "new");
        table.restore_label(id, old);
        assert!(table.label(id).unwrap().title().ends_with(" 7"));
        // No class: no label.
        assert_eq!(
            table.set_label(ClassId::new(1, n + 5), Some(&label("x"))),
            Ok(None)
        );
        assert!(table.label(ClassId::new(1, n + 5)).is_none());

        for minor in (0..n).filter(|m| m % 3 != 0) {
            let _ = table.remove(ClassId::new(1, minor));
        }
        assert!(table.labels.wants_compaction());
        let before: Vec<(ClassId, ClassLabel)> = table
            .labels()
            .map(|(id, l)| (id, l.unpack().unwrap()))
            .collect();
        table.compact_labels();
        assert!(!table.labels.wants_compaction());
        let after: Vec<(ClassId, ClassLabel)> = table
            .labels()
            .map(|(id, l)| (id, l.unpack().unwrap()))
            .collect();
        assert_eq!(after, before);
        assert_eq!(after.len(), 1000);
        let want: std::collections::BTreeMap<ClassId, ClassLabel> = after.into_iter().collect();
        assert!(table.labels_are(want.iter()));
        let mut fewer = want.clone();
        fewer.pop_last();
        assert!(!table.labels_are(fewer.iter()));
        let mut other = want;
        other.insert(ClassId::new(1, 0), label("someone else"));
        assert!(!table.labels_are(other.iter()));
    }

    #[test]
    fn use_counts_are_per_class() {
        let mut table = ClassTable::default();
        table.add(def(5, ClassSpec::new(Rate::from_mbit(1)), None));
        let id = ClassId::new(1, 5);
        table.count_user(id, true);
        table.count_user(id, true);
        table.count_user(ClassId::new(1, 6), true);
        table.count_user(id, false);
        assert!(table.get(id).unwrap().in_use());
        table.count_user(id, false);
        assert!(!table.get(id).unwrap().in_use());
    }
}
