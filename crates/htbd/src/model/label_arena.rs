//! Where a tree's labels live: packed ([`htb_config::label::PackedLabel`]) one after the other
//! in chunks of 64 KiB, each class holding a 4-byte [`LabelRef`] to its own.
//!
//! A `BTreeMap` of [`ClassLabel`]s held a LibreQoS circuit's label in 265 bytes and six
//! allocations of its own (texts, the device list, each device's texts and addresses), which
//! the import's batches interleaved with their own short-lived ones. Packed, it takes about 45
//! bytes in a chunk shared with a thousand others; chunks are never moved or grown, so adding
//! a label costs no copy of the others.
//!
//! A label replaced or removed leaves its bytes behind (an undo may bring it back until its
//! batch is done); [`ClassTable`](super::class_table::ClassTable) copies the live ones into
//! fresh chunks once at least half of what is held is dead.

use std::num::NonZeroU32;

use htb_config::ClassLabel;
use htb_config::label::PackedLabel;

/// Bytes per chunk: a [`LabelRef`] holds a chunk index and an offset of 16 bits each. A packed
/// label is at most about 2 KiB (a label weighs at most `LABEL_MAX_BYTES` = 2 048 in its
/// larger JSON measure), so a chunk wastes at most that at its end.
const CHUNK: usize = 1 << 16;
/// The most chunks a [`LabelRef`] can name (4 GiB of packed labels, some 90 million
/// subscribers' worth).
const MAX_CHUNKS: usize = (1 << 16) - 1;

/// Where one label is: its chunk and offset, plus one (so that `Option<LabelRef>` takes 4 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LabelRef(NonZeroU32);

impl LabelRef {
    fn new(chunk: usize, offset: usize) -> Option<Self> {
        let raw = u32::try_from(chunk << 16 | offset).ok()?;
        NonZeroU32::new(raw.checked_add(1)?).map(Self)
    }

    fn chunk(self) -> usize {
        (self.0.get() - 1) as usize >> 16
    }

    fn offset(self) -> usize {
        (self.0.get() - 1) as usize & (CHUNK - 1)
    }
}

/// The arena has no room for another chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the labels of this qdisc fill the 4 GiB htbd keeps for them")]
pub struct LabelsFull;

/// Packed labels in chunks.
#[derive(Debug, Default)]
pub(crate) struct LabelArena {
    chunks: Vec<Vec<u8>>,
    /// Bytes of labels no class holds any more (in `held`).
    dead: usize,
    /// Bytes written into the chunks.
    held: usize,
    /// Where a label is packed before it is copied into a chunk.
    scratch: Vec<u8>,
}

impl LabelArena {
    /// Packs `label` in; where it is.
    ///
    /// # Errors
    /// No chunk left (4 GiB of labels).
    pub(crate) fn add(&mut self, label: &ClassLabel) -> Result<LabelRef, LabelsFull> {
        let mut packed = std::mem::take(&mut self.scratch);
        packed.clear();
        label.pack(&mut packed);
        let at = self.add_packed(&packed);
        self.scratch = packed;
        at
    }

    /// The label at `at` (`None`: not a place `add` gave).
    #[must_use]
    pub(crate) fn get(&self, at: LabelRef) -> Option<PackedLabel<'_>> {
        PackedLabel::read(self.chunks.get(at.chunk())?.get(at.offset()..)?)
    }

    fn len_at(&self, at: LabelRef) -> usize {
        self.get(at).map_or(0, |l| l.as_bytes().len())
    }

    /// No class holds the label at `at` any more (its bytes stay until [`compacted`]).
    ///
    /// [`compacted`]: Self::compacted
    pub(crate) fn release(&mut self, at: LabelRef) {
        self.dead += self.len_at(at);
    }

    /// A class holds the released label at `at` again (an undo).
    pub(crate) fn revive(&mut self, at: LabelRef) {
        self.dead = self.dead.saturating_sub(self.len_at(at));
    }

    /// Whether half of what is held is dead (and at least a chunk of it): then copying the
    /// live labels out costs less than keeping the dead ones.
    #[must_use]
    pub(crate) fn wants_compaction(&self) -> bool {
        self.dead >= CHUNK && self.dead * 2 >= self.held
    }

    /// A fresh arena with the labels at `refs`, each ref moved to its new place.
    ///
    /// # Errors
    /// No chunk left (cannot happen: the live labels fit where all of them did).
    pub(crate) fn compacted<'a>(
        &self,
        refs: impl Iterator<Item = &'a mut LabelRef>,
    ) -> Result<Self, LabelsFull> {
        let mut fresh = Self::default();
        for at in refs {
            let label = self.get(*at).ok_or(LabelsFull)?;
            *at = fresh.add_packed(label.as_bytes())?;
        }
        Ok(fresh)
    }

    /// Copies a packed label in.
    fn add_packed(&mut self, bytes: &[u8]) -> Result<LabelRef, LabelsFull> {
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.len() + bytes.len() <= c.capacity());
        if !fits {
            if self.chunks.len() >= MAX_CHUNKS {
                return Err(LabelsFull);
            }
            self.chunks.push(Vec::with_capacity(CHUNK.max(bytes.len())));
        }
        let chunk = self.chunks.len() - 1;
        let at = LabelRef::new(chunk, self.chunks[chunk].len()).ok_or(LabelsFull)?;
        self.chunks[chunk].extend_from_slice(bytes);
        self.held += bytes.len();
        Ok(at)
    }

    /// Bytes held, and of them dead.
    #[cfg(test)]
    pub(super) fn usage(&self) -> (usize, usize) {
        (self.held, self.dead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(name: &str) -> ClassLabel {
        serde_json::from_value(serde_json::json!({ "name": name })).unwrap()
    }

    #[test]
    fn labels_come_back_from_where_they_were_put() {
        let mut arena = LabelArena::default();
        let long = "x".repeat(256);
        let refs: Vec<(LabelRef, ClassLabel)> = (0..2000)
            .map(|i| {
                let l = label(&format!("{i:>4}{}", &long[..i % 252]));
                (arena.add(&l).unwrap(), l)
            })
            .collect();
        assert!(
            arena.chunks.len() > 1,
            "a label that does not fit starts a chunk"
        );
        for (at, l) in &refs {
            assert_eq!(arena.get(*at).and_then(|p| p.unpack()).as_ref(), Some(l));
        }
        assert_eq!(
            LabelRef::new(MAX_CHUNKS, 0).map(LabelRef::chunk),
            Some(MAX_CHUNKS)
        );
    }

    #[test]
    fn compaction_keeps_the_live_labels_only() {
        let mut arena = LabelArena::default();
        let refs: Vec<(LabelRef, ClassLabel)> = (0..6000)
            .map(|i| {
                let l = label(&format!("subscriber {i:>40}"));
                (arena.add(&l).unwrap(), l)
            })
            .collect();
        assert!(!arena.wants_compaction());
        for (at, _) in refs.iter().skip(1).step_by(2) {
            arena.release(*at);
        }
        let (held, dead) = arena.usage();
        assert!(dead * 2 <= held && dead * 2 > held - 100, "{held} {dead}");
        // One revived: now just under half is dead; another release tips it.
        arena.revive(refs[1].0);
        assert!(!arena.wants_compaction());
        arena.release(refs[1].0);
        arena.release(refs[0].0);
        assert!(arena.wants_compaction());
        let live: Vec<usize> = (2..refs.len()).step_by(2).collect();
        let mut moved: Vec<LabelRef> = live.iter().map(|&i| refs[i].0).collect();
        let fresh = arena.compacted(moved.iter_mut()).unwrap();
        assert_eq!(fresh.usage().1, 0);
        assert!(fresh.usage().0 * 2 < held);
        for (at, &i) in moved.iter().zip(&live) {
            assert_eq!(
                fresh.get(*at).and_then(|p| p.unpack()).as_ref(),
                Some(&refs[i].1)
            );
        }
    }
}
