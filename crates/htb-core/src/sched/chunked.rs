//! Per-class storage that grows without moving what it holds.
//!
//! The scheduler runs on the data-plane thread, and classes are added while packets flow. A
//! `Vec` that doubles copies every record at once: at 65 536 classes the class records, queues
//! and tree nodes doubling together held the data plane for 7.5 ms (issue 23). [`Chunked`]
//! keeps its records in fixed-size chunks instead: growing allocates one more chunk and moves
//! nothing, so a class add costs the same at any size. Indexing pays one more load (the chunk
//! table, small enough to stay in cache).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ops::{Index, IndexMut};

/// log2 of the records per chunk: a class record chunk is 50 KiB, and the chunk table for a
/// million classes 4 000 pointers.
const CHUNK_BITS: u32 = 8;
const CHUNK: usize = 1 << CHUNK_BITS;
const MASK: usize = CHUNK - 1;

/// A growable array of `T` whose records never move once pushed.
///
/// Chunks are fixed-size arrays, so a lookup is two loads and one bounds check (the table's):
/// the offset within a chunk is masked and needs none. (Chunks as `Vec`s cost 1 459
/// instructions per packet against 1 204, callgrind, 100 pfifo classes.) An array must be
/// filled whole before use: the next chunk is filled ahead, two records per push, so that no
/// push writes (and faults in) a whole chunk at once on the data-plane thread.
#[derive(Clone, Debug)]
pub(crate) struct Chunked<T> {
    chunks: Vec<Box<[T; CHUNK]>>,
    len: usize,
    /// What fills records not yet in use: a copy of the first record pushed (`None` before),
    /// so a record whose copies would allocate is pushed empty and filled in after.
    filler: Option<T>,
    /// The next chunk, being filled.
    spare: Vec<T>,
}

impl<T: Clone> Default for Chunked<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone> Chunked<T> {
    /// Records not in use are copies of the first record pushed (for records that are cheap to
    /// copy).
    pub(crate) const fn new() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
            filler: None,
            spare: Vec::new(),
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Adds up to `n` copies of `filler` to the spare chunk `spare`.
    fn fill(spare: &mut Vec<T>, n: usize, filler: &T) {
        if spare.capacity() == 0 {
            *spare = Vec::with_capacity(CHUNK);
        }
        let n = n.min(CHUNK - spare.len());
        spare.extend(core::iter::repeat_n(filler, n).cloned());
    }

    /// Appends `value`; takes the spare chunk when the last is full, and moves nothing.
    pub(crate) fn push(&mut self, value: T) {
        let filler = self.filler.get_or_insert_with(|| value.clone());
        let (chunk, at) = (self.len >> CHUNK_BITS, self.len & MASK);
        if chunk == self.chunks.len() {
            // Filled ahead by the pushes into the last chunk (here at once only for the first).
            Self::fill(&mut self.spare, CHUNK, filler);
            let records = core::mem::take(&mut self.spare).into_boxed_slice();
            let Ok(records) = Box::<[T; CHUNK]>::try_from(records) else {
                // A full spare holds exactly CHUNK records.
                return;
            };
            self.chunks.push(records);
        }
        if let Some(records) = self.chunks.get_mut(chunk) {
            records[at] = value;
            self.len += 1;
        }
        Self::fill(&mut self.spare, 2, filler);
    }

    /// Takes the last record off (a copy: its slot keeps its chunk, for the next push), as a
    /// stack does: free lists that grow to a million entries on a mass delete grow without
    /// moving, as the records do.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let last = self.len.checked_sub(1)?;
        let value = self.chunks[last >> CHUNK_BITS][last & MASK].clone();
        self.len = last;
        Some(value)
    }

    /// Makes room in the chunk table for `additional` more records (the chunks themselves are
    /// allocated as they fill).
    pub(crate) fn reserve(&mut self, additional: usize) {
        let chunks = (self.len + additional).div_ceil(CHUNK);
        self.chunks
            .reserve(chunks.saturating_sub(self.chunks.len()));
    }

    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        (index < self.len).then(|| &self.chunks[index >> CHUNK_BITS][index & MASK])
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|c| c.iter()).take(self.len)
    }

    /// Appends copies of `value` until there are `len` records.
    pub(crate) fn grow_to(&mut self, len: usize, value: &T) {
        while self.len < len {
            self.push(value.clone());
        }
    }
}

impl<T> Index<usize> for Chunked<T> {
    type Output = T;

    #[inline]
    fn index(&self, index: usize) -> &T {
        debug_assert!(index < self.len, "index {index} of {}", self.len);
        &self.chunks[index >> CHUNK_BITS][index & MASK]
    }
}

impl<T> IndexMut<usize> for Chunked<T> {
    #[inline]
    fn index_mut(&mut self, index: usize) -> &mut T {
        debug_assert!(index < self.len, "index {index} of {}", self.len);
        &mut self.chunks[index >> CHUNK_BITS][index & MASK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Pushes, pops, writes and reads behave as a `Vec`'s, across chunk boundaries.
        #[test]
        fn behaves_as_a_vec(ops in proptest::collection::vec((0u8..3, any::<u32>()), 0..3000)) {
            let mut chunked = Chunked::new();
            let mut vec = Vec::new();
            for (op, value) in ops {
                match op {
                    0 | 1 if value % 4 == 0 => {
                        prop_assert_eq!(chunked.pop(), vec.pop());
                    }
                    0 | 1 => {
                        chunked.push(value);
                        vec.push(value);
                    }
                    _ if !vec.is_empty() => {
                        let at = value as usize % vec.len();
                        chunked[at] = value;
                        vec[at] = value;
                    }
                    _ => {}
                }
                prop_assert_eq!(chunked.len(), vec.len());
            }
            prop_assert!(chunked.iter().eq(vec.iter()));
            for (i, v) in vec.iter().enumerate() {
                prop_assert_eq!(chunked.get(i), Some(v));
                prop_assert_eq!(&chunked[i], v);
            }
            prop_assert_eq!(chunked.get(vec.len()), None);
        }
    }

    /// A record's address does not change as the store grows: nothing is moved.
    #[test]
    fn records_stay_where_they_are() {
        let mut chunked = Chunked::new();
        chunked.push(7u64);
        let first: *const u64 = &chunked[0];
        for i in 0..5 * CHUNK as u64 {
            chunked.push(i);
        }
        assert!(core::ptr::eq(first, &chunked[0]));
        assert_eq!(chunked.len(), 5 * CHUNK + 1);
    }
}
