//! A pool of reusable host buffers, generic over the buffer so that its accounting is tested without a GPU; the
//! backend keeps page-locked (pinned) host memory in it, the target of its asynchronous copies out.
//!
//! Pinned memory is slow to allocate (it is mapped for the device) and limited, so a buffer goes back to the pool
//! when its batch is answered, and the next batch takes the smallest free one that fits.

/// A buffer the pool can hold: its capacity in elements.
pub trait Capacity {
    fn capacity(&self) -> usize;
}

/// Counters of a [`Pool`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers made because none free fitted.
    pub allocations: u64,
    /// Takes served by a free buffer.
    pub reuses: u64,
    /// Buffers freed on return because the pool already kept [`Pool::KEEP`].
    pub dropped: u64,
    /// Free buffers now, and their elements.
    pub free: usize,
    pub free_elements: usize,
}

pub struct Pool<B> {
    free: Vec<B>,
    stats: PoolStats,
}

impl<B: Capacity> Default for Pool<B> {
    fn default() -> Self {
        Pool {
            free: Vec::new(),
            stats: PoolStats::default(),
        }
    }
}

impl<B: Capacity> Pool<B> {
    /// More batches in flight than this is unusual (one computing, one copying, a few being answered).
    pub const KEEP: usize = 8;

    /// The smallest free buffer of at least `len` elements, or a new one from `make(len)`.
    pub fn take<E>(
        &mut self,
        len: usize,
        make: impl FnOnce(usize) -> Result<B, E>,
    ) -> Result<B, E> {
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                self.stats.reuses += 1;
                Ok(self.free.swap_remove(i))
            }
            None => {
                self.stats.allocations += 1;
                make(len)
            }
        }
    }

    /// Returns a buffer; past [`Pool::KEEP`] free ones, the smallest is freed (the large ones serve any batch).
    pub fn put(&mut self, buffer: B) {
        self.free.push(buffer);
        if self.free.len() > Self::KEEP {
            let smallest = (0..self.free.len())
                .min_by_key(|&i| self.free[i].capacity())
                .unwrap_or(0);
            self.free.swap_remove(smallest);
            self.stats.dropped += 1;
        }
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            free: self.free.len(),
            free_elements: self.free.iter().map(Capacity::capacity).sum(),
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Capacity for Vec<f32> {
        fn capacity(&self) -> usize {
            self.len()
        }
    }

    fn make(len: usize) -> Result<Vec<f32>, ()> {
        Ok(vec![0.0; len])
    }

    #[test]
    fn a_returned_buffer_is_reused_by_a_batch_it_fits() {
        let mut pool = Pool::<Vec<f32>>::default();
        let a = pool.take(100, make).unwrap();
        pool.put(a);
        let b = pool.take(60, make).unwrap();
        assert_eq!(b.len(), 100, "the free buffer served the smaller batch");
        let c = pool.take(60, make).unwrap();
        assert_eq!(c.len(), 60, "none free: a new one");
        let s = pool.stats();
        assert_eq!((s.allocations, s.reuses, s.free), (2, 1, 0));
    }

    #[test]
    fn a_batch_takes_the_smallest_buffer_that_fits_and_too_small_ones_stay() {
        let mut pool = Pool::<Vec<f32>>::default();
        for len in [10, 1000, 200] {
            pool.put(vec![0.0; len]);
        }
        assert_eq!(pool.take(150, make).unwrap().len(), 200);
        assert_eq!(pool.take(150, make).unwrap().len(), 1000);
        assert_eq!(
            pool.take(150, make).unwrap().len(),
            150,
            "the 10 does not fit"
        );
        assert_eq!(pool.stats().free_elements, 10);
    }

    #[test]
    fn the_pool_keeps_a_bounded_number_and_frees_the_smallest() {
        let mut pool = Pool::<Vec<f32>>::default();
        for len in 1..=(Pool::<Vec<f32>>::KEEP + 2) {
            pool.put(vec![0.0; len]);
        }
        let s = pool.stats();
        assert_eq!((s.free, s.dropped), (Pool::<Vec<f32>>::KEEP, 2));
        assert_eq!(pool.take(1, make).unwrap().len(), 3, "1 and 2 were freed");
    }
}
