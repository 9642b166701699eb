//! CPU-bound and blocking work off the async runtime.
//!
//! A replica's Lease renewals, watches and API requests share the runtime's few worker
//! threads (one per core). Parsing a renderer's output, walking a checkout, validating and
//! hashing thousands of objects, building a plan or removing a directory can each take
//! seconds; on a worker, that is seconds in which no Lease is renewed. Such work goes through
//! [`offload`], onto Tokio's blocking pool.
//!
//! Work whose size a tenant decides (HealthCheck expressions over an Application's objects)
//! goes through [`tenant`] instead: a few threads of its own, at a lower priority, so that it
//! can neither hold a runtime worker nor take every thread of the blocking pool, nor take CPU
//! from the runtime's workers while they have work.

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

/// Threads of the [`tenant`] pool: tenants' work queues for them, first come first served.
pub const TENANT_THREADS: usize = 2;

/// The nice value of the [`tenant`] pool's threads (the runtime's stay at 0): on a busy
/// machine the kernel gives the runtime's workers, which renew Leases and serve every other
/// tenant, most of the CPU. Raising one's own nice value needs no privilege.
const TENANT_NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// The tenant pool's queue, its threads started on first use.
fn tenant_queue() -> &'static std::sync::Mutex<std::sync::mpsc::Sender<Job>> {
    static QUEUE: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Job>>> = std::sync::OnceLock::new();
    QUEUE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        for i in 0..TENANT_THREADS {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new().name(format!("ksync-tenant-{i}")).spawn(move || {
                // Linux: a nice value is per thread, and 0 means the calling one.
                if let Err(e) = rustix::process::setpriority_process(None, TENANT_NICE) {
                    tracing::debug!(error = %e, "lowering the tenant pool's priority");
                }
                loop {
                    let job = match rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                }
            });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "starting a tenant pool thread");
            }
        }
        std::sync::Mutex::new(tx)
    })
}

/// Run `work` on the tenant pool ([`TENANT_THREADS`] threads at a lower priority) and wait for
/// it without holding a worker. A panic in `work` resumes in the caller. For work whose size a
/// tenant decides; it should be bounded too (a [`crate::health::cel::Budget`]), since a job
/// holds its thread until it ends.
pub async fn tenant<T, F>(work: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)));
    });
    let queued = tenant_queue().lock().map_err(|_| ()).and_then(|q| q.send(job).map_err(|_| ()));
    if queued.is_err() {
        panic!("the tenant pool is gone");
    }
    match rx.await {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("the tenant pool dropped a job"),
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

    /// On a runtime with one worker, a ticker ticks every 5 ms while `run` runs work that waits
    /// (up to 60 s) for 10 ticks: it can only see them if the worker is free meanwhile. Returns
    /// the ticks the work saw and what `extra` read on the work's thread.
    fn ticks_seen_by<T, F>(
        rt: &tokio::runtime::Runtime,
        run: impl FnOnce(Box<dyn FnOnce() -> (u32, T) + Send>) -> F,
        extra: fn() -> T,
    ) -> (u32, T)
    where
        T: Send + 'static,
        F: std::future::Future<Output = (u32, T)> + Send + 'static,
    {
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
            let seen = ticks.clone();
            let work = tokio::spawn(run(Box::new(move || {
                let end = Instant::now() + Duration::from_secs(60);
                while seen.load(std::sync::atomic::Ordering::Relaxed) < 10 && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(1));
                }
                (seen.load(std::sync::atomic::Ordering::Relaxed), extra())
            })));
            let out = work.await.unwrap();
            ticker.abort();
            out
        })
    }

    fn one_worker() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
    }

    // See: issue 18, item 9. Offloaded work leaves the worker free (inline, the same work would
    // stop the ticker for its whole duration).
    #[test]
    fn offloaded_work_leaves_the_worker_free() {
        let (count, ()) = ticks_seen_by(&one_worker(), offload, || ());
        assert!(count >= 10, "the ticker stood still while the work ran");
    }

    // See: issue 44, item 3. The same on the tenant pool, and its threads run at a lower
    // priority than the caller's.
    #[test]
    fn tenant_work_leaves_the_worker_free_at_a_lower_priority() {
        let rt = one_worker();
        let (count, nice) = ticks_seen_by(&rt, tenant, || rustix::process::getpriority_process(None).unwrap());
        assert!(count >= 10, "the ticker stood still while the work ran");
        assert!(nice >= TENANT_NICE, "tenant pool nice {nice}");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(tenant(|| panic!("boom")));
        }));
        assert!(caught.is_err());
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
