//! One worker's share of the UMEM's frames: the frames whose home it is, free ones in its pool,
//! and the rings that carry free frames home between workers.
//!
//! Every frame has one home worker, which alone lends it to its fill rings. Any worker may
//! end up freeing it (it sent a frame another worker received, or dropped one handed over):
//! then it goes home through a single-producer ring from that worker to its home, which takes
//! it back into its pool before refilling. Sans-IO: the AF_XDP rings (`umem::FrameIo`) and the
//! simulated ones of the tests share this code, so the tests run the real return path.

use std::ops::Range;

/// One worker's frames. `D` is what a free frame is to its rings: a descriptor, or an index.
#[derive(Debug)]
pub(crate) struct FramePool<D> {
    /// Free frames whose home this worker is, ready for its fill rings.
    pub(crate) free: Vec<D>,
    /// The indexes of the frames whose home this worker is.
    home: Range<u32>,
    /// Frames per worker (the last worker's home also holds the rest).
    per_worker: u32,
    /// `returns[w]`: free frames of worker `w` on their way home (`None` for this worker).
    returns: Vec<Option<rtrb::Producer<D>>>,
    /// Free frames of this worker coming home from the others.
    homecoming: Vec<rtrb::Consumer<D>>,
}

impl<D: Copy> FramePool<D> {
    /// Splits `total` frames between `workers`: worker `w` is home to `per_worker` consecutive
    /// indexes from `w * per_worker` (the last one to the rest), and starts with `frames(home)`
    /// in its pool. Each return ring holds every frame of its home, so a push never fails.
    pub(crate) fn shares(
        total: u32,
        workers: usize,
        mut frames: impl FnMut(Range<u32>) -> Vec<D>,
    ) -> Vec<Self> {
        let workers = workers.max(1);
        let count = u32::try_from(workers).unwrap_or(u32::MAX);
        let per_worker = (total / count).max(1);
        let home = |w: usize| {
            let start = (per_worker * w as u32).min(total);
            let end = if w + 1 == workers {
                total
            } else {
                (start + per_worker).min(total)
            };
            start..end
        };
        // returns[from][to]: the ring from worker `from` to worker `to`.
        let mut returns: Vec<Vec<Option<rtrb::Producer<D>>>> = (0..workers)
            .map(|_| (0..workers).map(|_| None).collect())
            .collect();
        let mut homecoming: Vec<Vec<rtrb::Consumer<D>>> =
            (0..workers).map(|_| Vec::new()).collect();
        for (from, row) in returns.iter_mut().enumerate() {
            for (to, slot) in row.iter_mut().enumerate() {
                if from != to {
                    let (producer, consumer) = rtrb::RingBuffer::new(home(to).len().max(1));
                    *slot = Some(producer);
                    homecoming[to].push(consumer);
                }
            }
        }
        returns
            .into_iter()
            .zip(homecoming)
            .enumerate()
            .map(|(w, (returns, homecoming))| Self {
                free: frames(home(w)),
                home: home(w),
                per_worker,
                returns,
                homecoming,
            })
            .collect()
    }

    /// The indexes of the frames whose home this worker is.
    pub(crate) fn home(&self) -> Range<u32> {
        self.home.clone()
    }

    /// The worker whose frame `index` is.
    pub(crate) fn home_of(&self, index: u32) -> usize {
        ((index / self.per_worker) as usize).min(self.returns.len() - 1)
    }

    /// Whether frames can belong to other workers.
    pub(crate) fn shared(&self) -> bool {
        self.returns.len() > 1
    }

    /// Frame `index` (`desc`) is free: into this pool, or on its way home.
    pub(crate) fn put(&mut self, index: u32, desc: D) {
        let home = self.home_of(index);
        match self.returns.get_mut(home).and_then(Option::as_mut) {
            Some(ring) => {
                if let Err(rtrb::PushError::Full(desc)) = ring.push(desc) {
                    // Sized for all of the home's frames, so never; kept here rather than lost.
                    self.free.push(desc);
                }
            }
            None => self.free.push(desc),
        }
    }

    /// Takes back into the pool the frames the other workers have sent home.
    pub(crate) fn welcome_home(&mut self) {
        for ring in &mut self.homecoming {
            while let Ok(desc) = ring.pop() {
                self.free.push(desc);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_freed_anywhere_goes_back_to_its_home_pool() {
        let mut pools = FramePool::shares(10, 3, Iterator::collect::<Vec<u32>>);
        assert_eq!(
            pools.iter().map(FramePool::home).collect::<Vec<_>>(),
            [0..3, 3..6, 6..10],
            "the last worker's home holds the rest"
        );
        let taken: Vec<u32> = pools[2].free.drain(..).collect();
        // Worker 0 frees two of worker 2's frames and one of its own.
        pools[0].put(taken[0], taken[0]);
        pools[0].put(taken[1], taken[1]);
        let own = pools[0].free.pop().unwrap();
        pools[0].put(own, own);
        assert_eq!(pools[0].free.len(), 3, "its own frame stays");
        assert!(pools[2].free.is_empty(), "on their way, not yet home");
        pools[2].welcome_home();
        assert_eq!(pools[2].free, &taken[..2]);
        // Worker 1 takes nothing of worker 2's.
        pools[1].welcome_home();
        assert_eq!(pools[1].free, [3, 4, 5]);
    }

    #[test]
    fn one_worker_keeps_every_frame() {
        let mut pools = FramePool::shares(4, 1, Iterator::collect::<Vec<u32>>);
        let pool = &mut pools[0];
        assert!(!pool.shared());
        let f = pool.free.pop().unwrap();
        pool.put(f, f);
        assert_eq!(pool.free.len(), 4);
    }
}
