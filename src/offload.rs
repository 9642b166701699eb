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

    // See: issue 44, item 3. The same on the tenant pool, and its threads run at a lower
    // priority than the caller's.
    #[test]
    fn tenant_work_leaves_the_worker_free_at_a_lower_priority() {
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
            let seen = ticks.clone();
            let (count, nice) = tokio::spawn(tenant(move || {
                let end = Instant::now() + Duration::from_secs(60);
                while seen.load(std::sync::atomic::Ordering::Relaxed) < 10 && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(1));
                }
                (seen.load(std::sync::atomic::Ordering::Relaxed), rustix::process::getpriority_process(None).unwrap())
            }))
            .await
            .unwrap();
            assert!(count >= 10, "the ticker stood still while the work ran");
            assert!(nice >= TENANT_NICE, "tenant pool nice {nice}");
            ticker.abort();
        });
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
