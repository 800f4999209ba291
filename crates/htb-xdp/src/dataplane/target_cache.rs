//! Per filter of a port, where its packets go once looked up: the tree, the class's checked
//! handle (or, for a class another worker holds, its id) and the worker that owns it.
//!
//! Filters are swapped in by the 100 000 and the cache is forgotten whenever a tree, the
//! filters or the owners change, all between two packet batches. A flat vector sized to the
//! filters cost a fill of every entry each time (2.3 ms at 200 000 filters, the longest
//! data-plane job of an import). Here forgetting is a generation bump, and entries live in
//! chunks allocated when a packet first needs one: no step touches every entry.

use htb_core::Target;

const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;
const MASK: usize = CHUNK - 1;

/// A filter's resolved target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Resolved {
    /// The port's tree the class is in.
    pub(super) tree: u16,
    /// The class's handle, or its id when this worker does not hold it (its frames go to
    /// the owner, which resolves the id in its own tree).
    pub(super) target: Target,
    /// The worker that owns the class.
    pub(super) owner: u16,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Valid while equal to the cache's; 0 is never current.
    generation: u32,
    resolved: Option<Resolved>,
}

const UNSET: Entry = Entry {
    generation: 0,
    resolved: None,
};

/// Resolved targets by filter position.
#[derive(Debug)]
pub(super) struct TargetCache {
    chunks: Vec<Option<Box<[Entry]>>>,
    generation: u32,
}

impl Default for TargetCache {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            generation: 1,
        }
    }
}

impl TargetCache {
    /// Forgets every entry, now for `filters` filters; touches no entry.
    pub(super) fn reset(&mut self, filters: usize) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // Wrapped: entries of 2^32 resets ago would look current.
            self.chunks.clear();
            self.generation = 1;
        }
        self.chunks.resize_with(filters.div_ceil(CHUNK), || None);
    }

    /// Filter `i`'s target, if resolved since the last reset.
    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<Resolved> {
        let entry = self.chunks.get(i >> CHUNK_BITS)?.as_ref()?[i & MASK];
        entry
            .resolved
            .filter(|_| entry.generation == self.generation)
    }

    /// Keeps filter `i`'s target (`i` is below the filter count of the last reset: the caller
    /// found filter `i`).
    pub(super) fn set(&mut self, i: usize, resolved: Resolved) {
        let Some(chunk) = self.chunks.get_mut(i >> CHUNK_BITS) else {
            return;
        };
        let chunk = chunk.get_or_insert_with(|| vec![UNSET; CHUNK].into_boxed_slice());
        chunk[i & MASK] = Entry {
            generation: self.generation,
            resolved: Some(resolved),
        };
    }
}

#[cfg(test)]
mod tests {
    use htb_core::{ClassHandle, ClassId, ClassSpec, Instant, Rate, Scheduler, SchedulerConfig};

    use super::*;

    fn handle(minor: u32) -> ClassHandle {
        let mut htb = Scheduler::<crate::frame::Frame>::new(SchedulerConfig::default());
        let id = ClassId::new(1, minor);
        let spec = ClassSpec::new(Rate::from_bits_per_sec(1_000_000));
        assert!(htb.add_class(Instant::ZERO, id, None, &spec).is_ok());
        htb.handle(id).expect("the class exists")
    }

    /// Entries hold until a reset forgets them all, in every chunk.
    #[test]
    fn a_reset_forgets_every_entry() {
        let mut cache = TargetCache::default();
        cache.reset(3 * CHUNK + 5);
        let r = Resolved {
            tree: 1,
            target: Target::Handle(handle(7)),
            owner: 2,
        };
        for i in [0, CHUNK - 1, CHUNK, 3 * CHUNK + 4] {
            assert_eq!(cache.get(i), None);
            cache.set(i, r);
            assert_eq!(cache.get(i), Some(r), "{i}");
        }
        cache.set(4 * CHUNK, r);
        assert_eq!(cache.get(4 * CHUNK), None, "past the last chunk");
        cache.reset(3 * CHUNK + 5);
        for i in [0, CHUNK - 1, CHUNK, 3 * CHUNK + 4] {
            assert_eq!(cache.get(i), None, "{i} after a reset");
        }
        cache.set(1, r);
        cache.reset(1);
        assert_eq!(cache.get(1), None, "shrunk and forgotten");
        cache.set(0, r);
        assert_eq!(cache.get(0), Some(r));
    }
}
