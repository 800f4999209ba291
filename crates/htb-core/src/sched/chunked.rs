//! Per-class storage that grows without moving what it holds.
//!
//! The scheduler runs on the data-plane thread, and classes are added while packets flow. A
//! `Vec` that doubles copies every record at once: at 65 536 classes the class records, queues
//! and tree nodes doubling together held the data plane for 7.5 ms (issue 23). [`Chunked`]
//! keeps its records in fixed-size chunks instead: growing allocates one more chunk and moves
//! nothing, so a class add costs the same at any size. Indexing pays one more load (the chunk
//! table, small enough to stay in cache).

use alloc::vec::Vec;
use core::ops::{Index, IndexMut};

/// log2 of the records per chunk. 1 024 records: a chunk of 200-byte class records is 200 KiB,
/// allocated in microseconds; the chunk table for a million classes is 1 000 pointers.
const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;
const MASK: usize = CHUNK - 1;

/// A growable array of `T` whose records never move once pushed.
#[derive(Clone, Debug)]
pub(crate) struct Chunked<T> {
    /// Every chunk but the last is full (`CHUNK` records); each was allocated with room for
    /// `CHUNK`, so pushing never reallocates one.
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Chunked<T> {
    pub(crate) const fn new() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends `value`; allocates one chunk when the last is full, and moves nothing.
    pub(crate) fn push(&mut self, value: T) {
        if self.len & MASK == 0 {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(last) = self.chunks.last_mut() {
            last.push(value);
            self.len += 1;
        }
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
        self.chunks.get(index >> CHUNK_BITS)?.get(index & MASK)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

impl<T: Clone> Chunked<T> {
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
        &self.chunks[index >> CHUNK_BITS][index & MASK]
    }
}

impl<T> IndexMut<usize> for Chunked<T> {
    #[inline]
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut self.chunks[index >> CHUNK_BITS][index & MASK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Pushes, writes and reads behave as a `Vec`'s, across chunk boundaries.
        #[test]
        fn behaves_as_a_vec(ops in proptest::collection::vec((0u8..3, any::<u32>()), 0..3000)) {
            let mut chunked = Chunked::new();
            let mut vec = Vec::new();
            for (op, value) in ops {
                match op {
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
