//! Work shared among threads: each thread takes the next job as it becomes free, so one large
//! job does not hold up the others' share, and the results come back in job order whatever the
//! thread count (results never depend on it).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` of every job on up to `threads` threads (the calling thread is one), jobs taken in the
/// order given (give the largest first); results in job order. A panic in `f` is resumed on
/// the calling thread. The project's one fan-out of work to threads (the reader's baskets and
/// pages, the demo's files, the cache's shards, `preprocess`'s files).
pub fn map<T: Send, R: Send>(jobs: Vec<T>, threads: usize, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let threads = threads.min(jobs.len()).max(1);
    if threads == 1 {
        return jobs.into_iter().map(f).collect();
    }
    let n = jobs.len();
    let slots: Vec<Mutex<Option<T>>> = jobs.into_iter().map(|j| Mutex::new(Some(j))).collect();
    let results: Vec<Mutex<Option<R>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(slot) = slots.get(i) else { break };
            let job = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(job) = job {
                let r = f(job);
                *results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            }
        }
    };
    helpers(threads - 1).in_place_scope(|s| {
        for _ in 1..threads {
            s.spawn(|_| work());
        }
        work();
    });
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .expect("every job ran")
        })
        .collect()
}

thread_local! {
    /// This thread's helper threads for [`map`], one set for each count it asked for. Each
    /// calling thread has its own, so that a caller never waits for helpers busy with another
    /// caller's jobs (a dataset's files on some threads, each file's chunks on others).
    static HELPERS: RefCell<Vec<(usize, Rc<rayon::ThreadPool>)>> = const { RefCell::new(Vec::new()) };
}

/// `n` helper threads of this thread's, kept between calls: a reader's every chunk fans out
/// twice, and starting threads each time cost more than waking kept ones.
fn helpers(n: usize) -> Rc<rayon::ThreadPool> {
    HELPERS.with(|kept| {
        let mut kept = kept.borrow_mut();
        if let Some((_, pool)) = kept.iter().find(|(k, _)| *k == n) {
            return Rc::clone(pool);
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("gnn4c-rootio-{i}"))
            .build()
            .map(Rc::new)
            .expect("threads start");
        kept.push((n, Rc::clone(&pool)));
        pool
    })
}

/// [`map`] with the jobs taken from the largest `cost` down (so that the last to finish is a
/// small one); results in the order the jobs are given. One thread takes them in that order
/// (as a remote file's bytes come: there is nothing to balance).
pub(crate) fn map_largest_first<T: Send, R: Send>(
    jobs: Vec<T>,
    threads: usize,
    cost: impl Fn(&T) -> usize,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    if threads <= 1 {
        return jobs.into_iter().map(f).collect();
    }
    let order = largest_first(&jobs.iter().map(cost).collect::<Vec<_>>());
    let mut slots: Vec<Option<T>> = jobs.into_iter().map(Some).collect();
    let ordered: Vec<(usize, T)> = order
        .iter()
        .filter_map(|&i| slots[i].take().map(|j| (i, j)))
        .collect();
    let mut done: Vec<(usize, R)> = map(ordered, threads, |(i, j)| (i, f(j)));
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Whether jobs of these costs, each run whole on one of `threads` threads, the largest first,
/// keep the threads busy to the end: always on one thread, and on more where no job costs over
/// half a thread's share of them all.
pub(crate) fn each_whole(costs: &[usize], threads: usize) -> bool {
    let total: usize = costs.iter().sum();
    let largest = costs.iter().copied().max().unwrap_or(0);
    threads <= 1 || largest.saturating_mul(threads.saturating_mul(2)) <= total
}

/// The indices of `costs` from the largest cost down (ties in index order).
fn largest_first(costs: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(costs[i]));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_whole_unless_one_holds_too_much_of_the_work() {
        // One thread: always.
        assert!(each_whole(&[100, 1], 1));
        // Two threads: a job may cost up to a quarter of all.
        assert!(each_whole(&[25, 25, 25, 25], 2));
        assert!(each_whole(&[11; 9], 2));
        assert!(!each_whole(&[26, 25, 25, 24], 2));
        assert!(!each_whole(&[90, 10], 2));
        // More threads want more, smaller jobs: nine of 11 % each are too few for eight.
        assert!(!each_whole(&[11; 9], 8));
        assert!(each_whole(&[1; 16], 8));
        // No work: nothing to spread.
        assert!(each_whole(&[0, 0], 4));
        assert!(each_whole(&[], 4));
    }

    #[test]
    fn results_come_back_in_job_order_on_any_thread_count() {
        let jobs: Vec<u64> = (0..57).map(|i| (i * 7919) % 101).collect();
        let want: Vec<u64> = jobs.iter().map(|j| j * j + 1).collect();
        for threads in [1, 2, 3, 8, 100] {
            assert_eq!(map(jobs.clone(), threads, |j| j * j + 1), want, "{threads}");
        }
        assert!(map(Vec::<u8>::new(), 4, |j| j).is_empty());
    }

    #[test]
    fn a_job_s_panic_reaches_the_caller_and_the_kept_threads_work_on() {
        let panicked = std::panic::catch_unwind(|| {
            map((0..16).collect(), 2, |j: u32| {
                if j == 7 { panic!("job 7") } else { j }
            })
        });
        assert!(panicked.is_err());
        // The helpers kept for two threads serve the next call, nested calls included.
        let nested = map((0..4).collect(), 2, |i: u64| map(vec![i; 3], 2, |j| j + 1));
        assert_eq!(nested, (1..5).map(|i| vec![i; 3]).collect::<Vec<_>>());
    }

    #[test]
    fn the_largest_cost_comes_first_and_ties_keep_their_order() {
        assert_eq!(largest_first(&[3, 9, 1, 9, 0]), vec![1, 3, 0, 2, 4]);
        // Taken largest first, handed back in the order given.
        let jobs = vec![3usize, 9, 1, 9, 0];
        for threads in [1, 2, 4] {
            assert_eq!(
                map_largest_first(jobs.clone(), threads, |&j| j, |j| j * 10),
                vec![30, 90, 10, 90, 0]
            );
        }
    }
}
