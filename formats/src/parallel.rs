//! Work spread over the processor's cores for one-off bulk jobs (sealing and opening a
//! data-cache file, preparing a model's weights): scoped threads taking items from one
//! queue, so the slowest item does not hold a fixed share of the others.

use std::sync::Mutex;

/// Threads for `items` independent items: one per core (at most 8), never more than
/// there are items.
pub fn workers_for(items: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(items.max(1))
}

/// Runs `work` on every item on up to `workers` threads (the caller's among them). After
/// the first error no worker takes another item, and that error is returned.
pub fn for_each<T: Send, E: Send>(
    items: impl Iterator<Item = T> + Send,
    workers: usize,
    work: impl Fn(T) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let queue = Mutex::new(items);
    let failure: Mutex<Option<E>> = Mutex::new(None);
    let run = || {
        loop {
            if failure.lock().map_or(true, |f| f.is_some()) {
                return;
            }
            let next = match queue.lock() {
                Ok(mut q) => q.next(),
                Err(_) => None,
            };
            let Some(item) = next else { return };
            if let Err(e) = work(item) {
                if let Ok(mut f) = failure.lock() {
                    f.get_or_insert(e);
                }
                return;
            }
        }
    };
    if workers <= 1 {
        run();
    } else {
        std::thread::scope(|scope| {
            for _ in 1..workers {
                scope.spawn(run);
            }
            run();
        });
    }
    match failure.into_inner() {
        Ok(Some(e)) => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_item_runs_once_and_an_error_stops_the_rest() {
        let sum = AtomicUsize::new(0);
        for_each(1..=100usize, 4, |i| {
            sum.fetch_add(i, Ordering::Relaxed);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(sum.load(Ordering::Relaxed), 5050);
        let ran = AtomicUsize::new(0);
        let result = for_each(0..10_000usize, 2, |i| {
            ran.fetch_add(1, Ordering::Relaxed);
            if i == 3 { Err(i) } else { Ok(()) }
        });
        assert_eq!(result, Err(3));
        assert!(
            ran.load(Ordering::Relaxed) < 10_000,
            "work stopped after the error"
        );
        assert!(workers_for(0) >= 1 && workers_for(1) == 1);
    }
}
