//! How one forward pass spreads over the CPU backend's threads.
//!
//! The forward pass is written once, as a sequence of operations, each split into independent tasks
//! ([`Par::run`]). Two ways to run it:
//!
//! - [`Eager`]: the forward runs on one thread and every operation is its own rayon fork/join: one wake-up, one
//!   join, per operation, about fifty per forward.
//! - [`Member`]: every thread of the pool runs the whole forward at once (one `broadcast` per forward); each
//!   operation's tasks are taken from a shared counter, and the operation ends at a spin barrier. This is what a
//!   captured plan replays: one dispatch per forward instead of one per operation.
//!
//! Both run the same tasks with the same kernels, so their outputs are bitwise equal.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

/// A way to run an operation's tasks across the backend's threads.
pub trait Par {
    fn threads(&self) -> usize;
    /// Runs `f(task, worker)` for every task in `0..tasks` and returns once all have run and their writes are
    /// visible to every thread; `worker < threads()` names the thread, for its scratch memory. A team hands the
    /// tasks out one at a time, so a thread slowed by something else on its core holds up no one.
    fn run(&self, tasks: usize, f: &(dyn Fn(usize, usize) + Sync));
    /// As [`Par::run`], but a team gives each thread the same share of the tasks in every forward pass, and a
    /// thread done with its own takes what is left of the others': for a query's GEMMs, split by weight columns,
    /// each thread streams the same weight panels every pass and finds them in its own cache, and a thread slowed
    /// by something else still holds up no one.
    fn run_pinned(&self, tasks: usize, f: &(dyn Fn(usize, usize) + Sync));
}

/// One rayon fork/join per operation, on its own pool: the tasks run on the pool's threads, so a worker index
/// names one thread of that pool and never aliases another's scratch.
pub struct Eager<'a> {
    pub pool: &'a rayon::ThreadPool,
}

impl Par for Eager<'_> {
    fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    fn run(&self, tasks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        // Inside `install` every task runs on a thread of this pool (a nested `install` runs inline), so the
        // index is always there.
        let worker = || {
            rayon::current_thread_index().expect("a task of this pool runs on one of its threads")
        };
        self.pool.install(|| {
            if tasks == 1 {
                f(0, worker());
            } else {
                (0..tasks).into_par_iter().for_each(|t| f(t, worker()));
            }
        });
    }

    fn run_pinned(&self, tasks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        self.run(tasks, f);
    }
}

/// State shared by the threads of a team while they run one forward pass together.
pub struct Team {
    threads: usize,
    /// The next task of a dynamic operation.
    next: AtomicUsize,
    /// Per thread, how many tasks of its share of a pinned operation have been taken (by it or by others).
    taken: Vec<Padded>,
    barrier: SpinBarrier,
}

/// A counter on a cache line of its own, so threads counting their own shares do not contend.
#[repr(align(64))]
struct Padded(AtomicUsize);

impl Team {
    pub fn new(threads: usize) -> Self {
        Team {
            threads,
            next: AtomicUsize::new(0),
            taken: (0..threads).map(|_| Padded(AtomicUsize::new(0))).collect(),
            barrier: SpinBarrier::new(threads),
        }
    }

    /// Ends an operation: the last thread to arrive resets the counters for the next one.
    fn end_operation(&self) {
        self.barrier.wait(|| {
            self.next.store(0, Ordering::Relaxed);
            for t in &self.taken {
                t.0.store(0, Ordering::Relaxed);
            }
        });
    }

    /// Runs `body` on every thread of `pool` at once (the pool must have exactly `threads` threads), each with its
    /// own [`Member`].
    pub fn broadcast(&self, pool: &rayon::ThreadPool, body: impl Fn(&Member) + Sync) {
        debug_assert_eq!(pool.current_num_threads(), self.threads);
        pool.broadcast(|ctx| {
            body(&Member {
                team: self,
                worker: ctx.index(),
                _not_sync: Cell::new(()),
            })
        });
    }
}

/// One thread's view of a [`Team`]: every member runs the same sequence of operations.
pub struct Member<'a> {
    team: &'a Team,
    worker: usize,
    /// A member belongs to its thread.
    _not_sync: Cell<()>,
}

impl Par for Member<'_> {
    fn threads(&self) -> usize {
        self.team.threads
    }

    fn run_pinned(&self, tasks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        let n = self.team.threads;
        // Its own share first, then the others' leftovers, each share taken from its front.
        for k in 0..n {
            let owner = (self.worker + k) % n;
            let (start, end) = (owner * tasks / n, (owner + 1) * tasks / n);
            loop {
                let t = start + self.team.taken[owner].0.fetch_add(1, Ordering::Relaxed);
                if t >= end {
                    break;
                }
                f(t, self.worker);
            }
        }
        self.team.end_operation();
    }

    fn run(&self, tasks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        loop {
            let t = self.team.next.fetch_add(1, Ordering::Relaxed);
            if t >= tasks {
                break;
            }
            f(t, self.worker);
        }
        self.team.end_operation();
    }
}

/// A barrier that spins: the team's threads all arrive within microseconds of each other, and parking and
/// waking a thread through the kernel (as `std::sync::Barrier` does) costs more than the operations it separates
/// at small batches. Written here because no well-kept crate offers a spin barrier with a last-arriver hook.
struct SpinBarrier {
    threads: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    fn new(threads: usize) -> Self {
        SpinBarrier {
            threads,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    fn wait(&self, last: impl FnOnce()) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
            self.arrived.store(0, Ordering::Relaxed);
            last();
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            // Spin briefly, then yield: with more threads than free cores, spinning would starve the laggard.
            if spins < 1 << 10 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// A row-major matrix that the tasks of one operation write concurrently, each its own rows or columns. It is a
/// raw pointer with a lifetime: the forward pass's buffers are shared by every thread of a team, and a view never
/// outlives the memory it was made from.
#[derive(Debug)]
pub struct Mat<'a, T = f32> {
    ptr: *mut T,
    pub rows: usize,
    pub cols: usize,
    /// Stride between rows, in elements.
    pub ld: usize,
    _memory: PhantomData<&'a mut [T]>,
}

impl<T> Clone for Mat<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Mat<'_, T> {}

// SAFETY: a `Mat` is only written through by tasks that own disjoint parts of it, with a barrier (the end of
// `Par::run`) between an operation's writes and the next operation's reads; the unsafe accessors state this.
unsafe impl<T: Send> Send for Mat<'_, T> {}
// SAFETY: as for `Send`.
unsafe impl<T: Send> Sync for Mat<'_, T> {}

impl<'a, T> Mat<'a, T> {
    /// A `rows × cols` view of `data`, rows `cols` apart.
    pub fn new(data: &'a mut [T], rows: usize, cols: usize) -> Self {
        assert!(
            rows.checked_mul(cols).is_some_and(|n| data.len() >= n),
            "matrix larger than its buffer"
        );
        // SAFETY: `data` holds `rows × cols` elements and is borrowed for `'a`.
        unsafe { Mat::from_raw(data.as_mut_ptr(), rows, cols, cols) }
    }

    /// A view of `rows` rows of `cols` elements, `ld` apart, at `ptr`.
    ///
    /// # Safety
    /// `ptr` is valid for reads and writes of `(rows - 1) · ld + cols` elements (none when `rows` is 0) for `'a`,
    /// and `cols <= ld`.
    pub unsafe fn from_raw(ptr: *mut T, rows: usize, cols: usize, ld: usize) -> Self {
        debug_assert!(cols <= ld || rows <= 1);
        Mat {
            ptr,
            rows,
            cols,
            ld,
            _memory: PhantomData,
        }
    }

    /// Columns `range` of the same rows.
    pub fn columns(self, range: std::ops::Range<usize>) -> Self {
        assert!(
            range.start <= range.end && range.end <= self.cols,
            "columns {range:?} of a {}-column matrix",
            self.cols
        );
        Mat {
            ptr: self.ptr.wrapping_add(range.start),
            cols: range.end - range.start,
            ..self
        }
    }

    /// The first `rows` rows.
    pub fn top(self, rows: usize) -> Self {
        assert!(
            rows <= self.rows,
            "{rows} rows of a {}-row matrix",
            self.rows
        );
        Mat { rows, ..self }
    }

    pub fn ptr(self) -> *mut T {
        self.ptr
    }

    /// Pointer to element `(r, c)`.
    ///
    /// # Safety
    /// `r < rows` and `c <= cols`.
    pub unsafe fn at(self, r: usize, c: usize) -> *mut T {
        debug_assert!(r < self.rows && c <= self.cols);
        // SAFETY: in bounds of the view, as the caller promises.
        unsafe { self.ptr.add(r * self.ld + c) }
    }

    /// Row `r`, for reading.
    ///
    /// # Safety
    /// `r < rows`, and no task writes the row during the caller's operation.
    pub unsafe fn row(self, r: usize) -> &'a [T] {
        assert!(r < self.rows, "row {r} of {}", self.rows);
        // SAFETY: the row lies in the view; the caller promises no concurrent writer.
        unsafe { std::slice::from_raw_parts(self.at(r, 0), self.cols) }
    }

    /// Row `r`, for writing.
    ///
    /// # Safety
    /// `r < rows`, and the calling task is the only one touching the row during its operation.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn row_mut(self, r: usize) -> &'a mut [T] {
        assert!(r < self.rows, "row {r} of {}", self.rows);
        // SAFETY: the row lies in the view; the caller promises it is the row's only user.
        unsafe { std::slice::from_raw_parts_mut(self.at(r, 0), self.cols) }
    }
}

/// Per-thread scratch memory: one slab per worker, each used only by the tasks that worker runs.
pub struct Scratch {
    slabs: Vec<std::cell::UnsafeCell<Vec<f32>>>,
}

// SAFETY: worker `w` only ever touches slab `w` (see `Par::run`'s worker argument).
unsafe impl Sync for Scratch {}

impl Scratch {
    pub fn new(workers: usize, floats: usize) -> Self {
        Scratch {
            slabs: (0..workers)
                .map(|_| std::cell::UnsafeCell::new(vec![0.0; floats]))
                .collect(),
        }
    }

    /// Worker `w`'s slab.
    ///
    /// # Safety
    /// Only worker `w` calls this, and not while a slice it got earlier is still in use.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slab(&self, worker: usize) -> &mut [f32] {
        // SAFETY: only this worker touches slab `worker`, and not through an earlier slice (the contract).
        unsafe { &mut *self.slabs[worker].get() }
    }

    /// Floats in each worker's slab.
    pub fn floats_per_slab(&self) -> usize {
        // SAFETY: reading a length only; slabs never change size after `new`, and no slice of one is resized.
        self.slabs
            .first()
            .map_or(0, |s| unsafe { (*s.get()).len() })
    }

    pub fn floats(&self) -> usize {
        // SAFETY: reading lengths only; callers do this outside any forward pass.
        self.slabs.iter().map(|s| unsafe { (*s.get()).len() }).sum()
    }

    /// Touches every page of every slab now.
    pub fn prefault(&mut self) {
        for s in &mut self.slabs {
            s.get_mut().fill(0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each operation must see every write of the one before it, on every thread.
    #[test]
    fn team_operations_are_ordered_by_the_barrier() {
        let threads = 2;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        let team = Team::new(threads);
        let n = 1000;
        let mut data = vec![0.0f32; n];
        let m = Mat::new(&mut data, n, 1);
        let stale = AtomicUsize::new(0);
        team.broadcast(&pool, |member| {
            for step in 1..=50 {
                // SAFETY: task t alone writes element t, inside the matrix.
                member.run(n, &|t, _| unsafe { *m.at(t, 0) = step as f32 });
                // Reads the other end of the vector, written (most likely) by the other thread.
                // SAFETY: reads only, inside the matrix, after the barrier that ended the writes.
                member.run(n, &|t, _| unsafe {
                    if *m.at(n - 1 - t, 0) != step as f32 {
                        stale.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(stale.load(Ordering::Relaxed), 0);
        assert!(data.iter().all(|&v| v == 50.0));
    }

    #[test]
    fn eager_and_team_run_every_task_once() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        let counts: Vec<AtomicUsize> = (0..257).map(|_| AtomicUsize::new(0)).collect();
        let f = |t: usize, w: usize| {
            assert!(w < 2);
            counts[t].fetch_add(1, Ordering::Relaxed);
        };
        Eager { pool: &pool }.run(counts.len(), &f);
        let team = Team::new(2);
        team.broadcast(&pool, |m| {
            m.run(counts.len(), &f);
            m.run_pinned(counts.len(), &f);
        });
        assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 3));
    }
}
