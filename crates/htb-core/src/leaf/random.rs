//! The leaves' pseudo-random numbers: `sfq`'s perturbation keys and `cake`'s dithered quantum,
//! both drawn from the scheduler's seed (the kernel uses `get_random_u32`; a seeded generator
//! keeps the core sans-IO and its runs repeatable).

/// splitmix64: the next number of the sequence `state` holds.
#[inline]
pub(crate) fn next_random(state: &mut u64) -> u32 {
    skip_random(state);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

/// Moves `state` past a number nobody reads, as [`next_random`] would: the sequence stays the
/// same whether that number is drawn or not (`cake`'s BLUE coin, tossed only while BLUE is
/// active, as the kernel tosses it).
#[inline]
pub(crate) fn skip_random(state: &mut u64) {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
}
