//! CPU-bound and blocking work off the async runtime.
//!
//! A replica's Lease renewals, watches and API requests share the runtime's few worker
//! threads (one per core). Parsing a renderer's output, walking a checkout, validating and
//! hashing thousands of objects, building a plan or removing a directory can each take
//! seconds; on a worker, that is seconds in which no Lease is renewed. Such work goes through
//! [`offload`], onto Tokio's blocking pool.

/// Run `work` on the blocking pool and wait for it without holding a worker. A panic in
/// `work` resumes in the caller, as if `work` had run inline.
pub async fn offload<T, F>(work: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(v) => v,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Only a runtime shutting down cancels a blocking task; its callers are being
            // dropped too.
            Err(e) => panic!("blocking work cancelled: {e}"),
        },
    }
}

/// Remove `dir` and everything under it: on the blocking pool when called on a runtime (a
/// checkout's removal can take seconds), else at once. Errors are ignored (what remains is
/// under the controller's own cache directory, cleared at start).
pub fn remove_dir_all_later(dir: std::path::PathBuf) {
    let remove = move || {
        let _ = std::fs::remove_dir_all(&dir);
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) => drop(h.spawn_blocking(remove)),
        Err(_) => remove(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    // See: issue 18, item 9. On a runtime with one worker, a ticker keeps ticking while
    // offloaded work runs (inline, the same work would stop it for its whole duration).
    #[test]
    fn offloaded_work_leaves_the_worker_free() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        rt.block_on(async {
            let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
            let ticker = {
                let ticks = ticks.clone();
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                })
            };
            // The work blocks until the ticker has ticked 10 times: it can only finish if the
            // worker is free meanwhile.
            let seen = ticks.clone();
            let work = tokio::spawn(offload(move || {
                let end = Instant::now() + Duration::from_secs(60);
                while seen.load(std::sync::atomic::Ordering::Relaxed) < 10 && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(1));
                }
                seen.load(std::sync::atomic::Ordering::Relaxed)
            }));
            assert!(work.await.unwrap() >= 10, "the ticker stood still while the work ran");
            ticker.abort();
        });
    }

    #[test]
    fn a_panic_in_offloaded_work_reaches_the_caller() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(offload(|| panic!("boom")));
        }));
        assert!(caught.is_err());
    }
}
