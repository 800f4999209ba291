//! Records kept sorted by the key each one carries, in chunks of at most [`CHUNK`]: a B-tree of
//! two levels whose leaves fill up completely when keys come in order.
//!
//! The model held its classes and filters in `BTreeMap`s. A B-tree leaf has room for eleven
//! entries and splits, when full, into one of six and one of five; keys that come in order (an
//! import's class ids and hash-table nodes) fill only the right one further, so every leaf
//! stayed at six of eleven: 45 % of the model's class and filter memory was empty slots, and
//! each entry's key was stored beside the record that held it too. Here a chunk that fills at
//! its end starts the next one, a full chunk passes an entry to a neighbour with room before
//! it splits, and the key is read from the record ([`Keyed`]). Lookups are two binary searches
//! (the chunk by its first key, then within it); an insert or remove moves at most one
//! chunk's records (plus, when a chunk is added or emptied, the chunk list's pointers).

use std::ops::RangeInclusive;

/// Records per chunk (a chunk of the model's 56-byte records is 7 KiB).
pub(crate) const CHUNK: usize = 128;

/// A record that knows its key.
pub(crate) trait Keyed {
    /// The key's type: records are kept in its order.
    type Key: Ord + Copy;

    /// The record's key (never changed while it is held here).
    fn key(&self) -> Self::Key;
}

/// Records in key order, each key at most once.
#[derive(Clone, Debug)]
pub(crate) struct SortedChunks<T> {
    /// Each non-empty and sorted, all of one before all of the next.
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for SortedChunks<T> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Keyed> FromIterator<T> for SortedChunks<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut all = Self::default();
        for record in iter {
            all.insert(record);
        }
        all
    }
}

impl<T: Keyed> SortedChunks<T> {
    /// How many records.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The records in key order.
    pub(crate) fn iter(&self) -> Iter<'_, T> {
        Iter {
            records: self.chunks.iter().flatten(),
            left: self.len,
        }
    }

    /// The records in key order, to change what is not their key.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.chunks.iter_mut().flatten()
    }

    /// The chunk where `key` is or would go: the last whose first key is not above it.
    fn chunk_of(&self, key: T::Key) -> usize {
        self.chunks
            .partition_point(|c| c.first().is_some_and(|r| r.key() <= key))
            .saturating_sub(1)
    }

    /// Where `key` is (`Ok`) or would go (`Err`): its chunk and place in it.
    fn find(&self, key: T::Key) -> (usize, Result<usize, usize>) {
        let chunk = self.chunk_of(key);
        let at = self
            .chunks
            .get(chunk)
            .map_or(Err(0), |c| c.binary_search_by(|r| r.key().cmp(&key)));
        (chunk, at)
    }

    /// The record with `key`.
    pub(crate) fn get(&self, key: T::Key) -> Option<&T> {
        let (chunk, at) = self.find(key);
        self.chunks.get(chunk)?.get(at.ok()?)
    }

    /// The record with `key`, to change what is not its key.
    pub(super) fn get_mut(&mut self, key: T::Key) -> Option<&mut T> {
        let (chunk, at) = self.find(key);
        self.chunks.get_mut(chunk)?.get_mut(at.ok()?)
    }

    /// The first record.
    pub(crate) fn first(&self) -> Option<&T> {
        self.chunks.first()?.first()
    }

    /// The last record.
    pub(crate) fn last(&self) -> Option<&T> {
        self.chunks.last()?.last()
    }

    /// Puts `record` in its place; returns the record it replaces (same key).
    pub(super) fn insert(&mut self, record: T) -> Option<T> {
        let (chunk, at) = self.find(record.key());
        let at = match at {
            Ok(at) => return Some(std::mem::replace(&mut self.chunks[chunk][at], record)),
            Err(at) => at,
        };
        self.len += 1;
        let Some(here) = self.chunks.get_mut(chunk) else {
            let mut first = Vec::with_capacity(4);
            first.push(record);
            self.chunks.push(first);
            return None;
        };
        if here.len() < CHUNK {
            here.insert(at, record);
            return None;
        }
        let last = chunk + 1 == self.chunks.len();
        // In order: past the end of the last chunk starts the next.
        if at == CHUNK && last {
            self.chunks.push(chunk_with(record));
            return None;
        }
        // A neighbour with room takes the record at this chunk's edge (the full chunk's
        // records shift by one in place, so that it never grows past its capacity).
        if !last && self.chunks[chunk + 1].len() < CHUNK {
            let spilled = if at == CHUNK {
                record
            } else {
                let here = &mut self.chunks[chunk];
                let spilled = std::mem::replace(&mut here[CHUNK - 1], record);
                here[at..].rotate_right(1);
                spilled
            };
            self.chunks[chunk + 1].insert(0, spilled);
            return None;
        }
        if chunk > 0 && self.chunks[chunk - 1].len() < CHUNK {
            // `at` is above 0: the chunk's first key is below the new one.
            let here = &mut self.chunks[chunk];
            let spilled = std::mem::replace(&mut here[0], record);
            here[..at].rotate_left(1);
            self.chunks[chunk - 1].push(spilled);
            return None;
        }
        // Split in two halves.
        let mut upper = Vec::with_capacity(CHUNK);
        upper.extend(self.chunks[chunk].drain(CHUNK / 2..));
        if at <= CHUNK / 2 {
            self.chunks[chunk].insert(at, record);
        } else {
            upper.insert(at - CHUNK / 2, record);
        }
        self.chunks.insert(chunk + 1, upper);
        None
    }

    /// Takes out the record with `key`.
    pub(super) fn remove(&mut self, key: T::Key) -> Option<T> {
        let (chunk, at) = self.find(key);
        let at = at.ok()?;
        let here = &mut self.chunks[chunk];
        let record = here.remove(at);
        self.len -= 1;
        let left = here.len();
        if left == 0 {
            self.chunks.remove(chunk);
        } else if left < CHUNK / 4 {
            // A chunk a quarter full joins a neighbour it fits in, so that deletions leave no
            // long run of near-empty chunks.
            if chunk + 1 < self.chunks.len() && left + self.chunks[chunk + 1].len() <= CHUNK {
                let next = self.chunks.remove(chunk + 1);
                self.chunks[chunk].extend(next);
            } else if chunk > 0 && left + self.chunks[chunk - 1].len() <= CHUNK {
                let here = self.chunks.remove(chunk);
                self.chunks[chunk - 1].extend(here);
            }
        }
        Some(record)
    }

    /// The records with keys in `keys`, in key order.
    pub(crate) fn range(
        &self,
        keys: RangeInclusive<T::Key>,
    ) -> impl DoubleEndedIterator<Item = &T> + Clone {
        let (from, to) = (*keys.start(), *keys.end());
        let (first, start) = self.find(from);
        let (last, end) = self.find(to);
        let start = start.unwrap_or_else(|at| at);
        // Past `to`: one after it when present.
        let end = end.map_or_else(|at| at, |at| at + 1);
        let chunks = if from > to || self.chunks.is_empty() {
            &[][..]
        } else {
            &self.chunks[first..=last]
        };
        let count = chunks.len();
        chunks.iter().enumerate().flat_map(move |(i, c)| {
            let lo = if i == 0 { start } else { 0 };
            let hi = if i + 1 == count { end } else { c.len() };
            c.get(lo..hi.max(lo)).unwrap_or_default()
        })
    }
}

/// The records of a [`SortedChunks`] in key order, counted (so that what is collected from
/// them is allocated once, at its size).
#[derive(Clone, Debug)]
pub struct Iter<'a, T> {
    records: std::iter::Flatten<std::slice::Iter<'a, Vec<T>>>,
    left: usize,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        let record = self.records.next()?;
        self.left -= 1;
        Some(record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<T> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let record = self.records.next_back()?;
        self.left -= 1;
        Some(record)
    }
}

impl<T> ExactSizeIterator for Iter<'_, T> {}

/// A new chunk holding `record`, with room for a full chunk.
fn chunk_with<T>(record: T) -> Vec<T> {
    let mut chunk = Vec::with_capacity(CHUNK);
    chunk.push(record);
    chunk
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Rec(u32, u32);

    impl Keyed for Rec {
        type Key = u32;

        fn key(&self) -> u32 {
            self.0
        }
    }

    fn agree(chunks: &SortedChunks<Rec>, model: &BTreeMap<u32, u32>) -> Result<(), TestCaseError> {
        prop_assert_eq!(chunks.len(), model.len());
        prop_assert_eq!(chunks.iter().len(), model.len());
        let all: Vec<(u32, u32)> = chunks.iter().map(|r| (r.0, r.1)).collect();
        let want: Vec<(u32, u32)> = model.iter().map(|(&k, &v)| (k, v)).collect();
        prop_assert_eq!(&all, &want);
        let back: Vec<u32> = chunks.iter().rev().map(|r| r.0).collect();
        let want_back: Vec<u32> = model.keys().rev().copied().collect();
        prop_assert_eq!(back, want_back);
        for c in &chunks.chunks {
            prop_assert!(!c.is_empty() && c.len() <= CHUNK);
        }
        prop_assert_eq!(chunks.first().map(|r| r.0), model.keys().next().copied());
        prop_assert_eq!(
            chunks.last().map(|r| r.0),
            model.keys().next_back().copied()
        );
        Ok(())
    }

    proptest! {
        /// Inserts, replacements, removals, lookups and ranges agree with a `BTreeMap` over
        /// enough records to split, spill and merge chunks (keys from a small range so that
        /// they collide, or in order so that chunks fill at their ends).
        #[test]
        fn agrees_with_a_btree_map(
            ops in proptest::collection::vec((0u8..4, 0u32..2000, any::<u32>()), 0..1500),
            in_order in any::<bool>(),
        ) {
            let mut chunks = SortedChunks::default();
            let mut model = BTreeMap::new();
            for (n, (op, key, value)) in ops.into_iter().enumerate() {
                let key = if in_order { u32::try_from(n).unwrap() } else { key };
                match op {
                    0 | 1 => {
                        prop_assert_eq!(
                            chunks.insert(Rec(key, value)).map(|r| r.1),
                            model.insert(key, value)
                        );
                    }
                    2 => {
                        prop_assert_eq!(chunks.remove(key).map(|r| r.1), model.remove(&key));
                    }
                    _ => {
                        let to = key.saturating_add(value % 300);
                        let got: Vec<u32> = chunks.range(key..=to).map(|r| r.0).collect();
                        let want: Vec<u32> = model.range(key..=to).map(|(&k, _)| k).collect();
                        prop_assert_eq!(&got, &want);
                        let got_back: Vec<u32> =
                            chunks.range(key..=to).rev().map(|r| r.0).collect();
                        let want_back: Vec<u32> = want.into_iter().rev().collect();
                        prop_assert_eq!(got_back, want_back);
                    }
                }
                prop_assert_eq!(chunks.get(key).map(|r| r.1), model.get(&key).copied());
            }
            agree(&chunks, &model)?;
            // Removing everything leaves no chunk behind.
            let keys: Vec<u32> = model.keys().copied().collect();
            for k in keys {
                prop_assert!(chunks.remove(k).is_some());
            }
            prop_assert!(chunks.is_empty() && chunks.chunks.is_empty());
        }
    }

    /// Keys in order fill every chunk but the last: the point of this container.
    #[test]
    fn keys_in_order_fill_the_chunks() {
        let chunks: SortedChunks<Rec> = (0..10 * CHUNK as u32 + 3).map(|k| Rec(k, k)).collect();
        assert_eq!(chunks.chunks.len(), 11);
        assert!(chunks.chunks[..10].iter().all(|c| c.len() == CHUNK));
        // Appending at the ends of 64 runs, as filters join hash buckets, keeps chunks at
        // least three quarters full.
        let mut runs = SortedChunks::default();
        for n in 0..64 * CHUNK as u32 {
            let (bucket, node) = (n % 64, n / 64);
            runs.insert(Rec(bucket << 16 | node, n));
        }
        let full = runs.len() as f64 / (runs.chunks.len() * CHUNK) as f64;
        assert!(full > 0.75, "{full}");
    }

    #[test]
    fn empty_and_reversed_ranges_are_empty() {
        let chunks: SortedChunks<Rec> = (0..300).map(|k| Rec(k * 2, k)).collect();
        let (from, to) = (5, 4);
        assert_eq!(chunks.range(from..=to).count(), 0);
        assert_eq!(chunks.range(1000..=2000).count(), 0);
        assert_eq!(chunks.range(3..=3).count(), 0);
        assert_eq!(chunks.range(4..=4).count(), 1);
        assert_eq!(SortedChunks::<Rec>::default().range(0..=9).count(), 0);
    }
}
