//! Giving a large batch's freed heap back to the kernel.
//!
//! The engine locks htbd's memory (`mlockall`, see [`crate::Engine`]) so that no page the data
//! plane touches is reclaimed and faulted back in under traffic. A locked page stays resident
//! after the allocator frees what was on it, so without this an import of a million
//! subscribers left htbd's resident set at its high-water mark: the staged batch's decoded
//! commands, its undo steps and the data plane's operations, all freed when it ends (2.16 kB
//! per subscriber resident against some 0.9 kB held, four workers, `htb-lab scale`).

use std::io;

/// What one [`return_freed_heap`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapReturned {
    /// The process's resident set before, in bytes (`/proc/self/statm`; 0 where unreadable).
    pub resident_before: u64,
    /// And after.
    pub resident_after: u64,
    /// Whether the allocator released anything (`malloc_trim`'s answer).
    pub released: bool,
    /// Whether the memory lock was lifted for it and put back.
    pub relocked: bool,
}

/// Returns the allocator's whole free pages to the kernel, lifting the engine's memory lock
/// for the moment it takes if it is in force. For the control plane after a batch that freed a
/// lot; it takes the process's memory map lock while it unlocks and relocks, so it belongs
/// after large batches, not on a timer.
///
/// # Errors
/// When the lock cannot be lifted (nothing is trimmed then) or put back (the trim is done but
/// pages touched from now on are not locked; the error says so).
pub fn return_freed_heap() -> io::Result<HeapReturned> {
    let resident_before = resident_bytes();
    let relocked = crate::sys::memory_locked();
    let released = crate::sys::trim_heap()?;
    Ok(HeapReturned {
        resident_before,
        resident_after: resident_bytes(),
        released,
        relocked,
    })
}

/// The resident set from `/proc/self/statm` (its second field, in pages).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * u64::from(crate::sys::page_size()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many small blocks freed in the middle of the heap stay resident until trimmed: the trim
    /// must give them back (the case the import leaves: its decoded batch below the model's
    /// later, live allocations).
    #[test]
    fn freed_small_blocks_in_the_middle_of_the_heap_are_returned() {
        // 64 MiB of 64-byte blocks, then a live block above them that keeps the heap's top
        // from shrinking by itself.
        let blocks: Vec<Box<[u8; 64]>> = (0..1_048_576u32)
            .map(|i| Box::new([(i % 251) as u8; 64]))
            .collect();
        let keep_top = vec![1u8; 1 << 16];
        let sum: u64 = blocks.iter().map(|b| u64::from(b[0])).sum();
        assert!(sum > 0);
        drop(blocks);
        let returned = return_freed_heap().expect("trim");
        assert!(returned.released, "{returned:?}");
        assert!(
            returned.resident_before >= returned.resident_after + (48 << 20),
            "at least 48 of the 64 MiB freed should leave the resident set: {returned:?}"
        );
        assert_eq!(keep_top[0], 1);
    }
}
