//! CPU-bound and blocking work off the async runtime.
//!
//! A replica's Lease renewals, watches and API requests share the runtime's few worker
//! threads (one per core). Parsing a renderer's output, walking a checkout, validating and
//! hashing thousands of objects, building a plan or removing a directory can each take
//! seconds; on a worker, that is seconds in which no Lease is renewed. Such work goes through
//! [`offload`], onto Tokio's blocking pool.
//!
//! Small work runs where it is ([`offload_if`], [`Size`]): handing it to the pool and back
//! wakes two threads, which costs more than validating or planning a few small objects.
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

/// The most JSON (bytes, estimated) that work runs on inline ([`offload_if`]): validating,
/// preparing or planning that much takes a millisecond or two (`cargo bench --bench plan`,
/// docs/performance.md).
pub const INLINE_BYTES: usize = 64 * 1024;

/// Run `work` inline when `large` is false, else [`offload`]. For work whose cost follows an
/// input measured first ([`Size`]).
pub async fn offload_if<T, F>(large: bool, work: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if large { offload(work).await } else { work() }
}

/// An estimate of how much JSON some values hold (their strings, keys and scalars), which
/// stops counting once past [`INLINE_BYTES`]: measuring costs at most that much walking,
/// whatever the values' size.
#[derive(Default)]
pub struct Size(usize);

impl Size {
    /// Count `values`; a no-op once [`Size::large`]. Each step counts at least two bytes, so
    /// it takes at most [`INLINE_BYTES`] / 2 steps, however wide or deep the values.
    pub fn values<'a>(mut self, values: impl IntoIterator<Item = &'a serde_json::Value>) -> Self {
        use serde_json::Value;
        enum Open<'a> {
            Array(std::slice::Iter<'a, Value>),
            Object(serde_json::map::Iter<'a>),
        }
        // Open containers as iterators, not recursion nor a list of all their items: rendered
        // objects can nest deeply, and an array can hold millions of items.
        let mut open: Vec<Open<'a>> = Vec::new();
        for v in values {
            let mut next = Some(v);
            loop {
                if self.large() {
                    return self;
                }
                if let Some(v) = next.take() {
                    self.0 += match v {
                        Value::String(s) => s.len() + 2,
                        Value::Array(a) => {
                            open.push(Open::Array(a.iter()));
                            2
                        }
                        Value::Object(o) => {
                            open.push(Open::Object(o.iter()));
                            2
                        }
                        _ => 8,
                    };
                    continue;
                }
                match open.last_mut() {
                    None => break,
                    Some(Open::Array(items)) => next = items.next(),
                    Some(Open::Object(entries)) => {
                        next = entries.next().map(|(k, v)| {
                            self.0 += k.len() + 4;
                            v
                        })
                    }
                }
                if next.is_none() {
                    open.pop();
                }
            }
        }
        self
    }

    /// Count `bytes` more.
    pub fn bytes(mut self, bytes: usize) -> Self {
        self.0 = self.0.saturating_add(bytes);
        self
    }

    /// Past [`INLINE_BYTES`]: work on it goes to the blocking pool.
    pub fn large(&self) -> bool {
        self.0 > INLINE_BYTES
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
    fn size_estimates_json_and_stops_counting_past_the_inline_bound() {
        use serde_json::{Value, json};
        let big = "x".repeat(INLINE_BYTES);
        let cases: Vec<(&str, Size, bool)> = vec![
            ("nothing", Size::default(), false),
            ("a small object", Size::default().values(&[json!({"kind": "ConfigMap", "data": {"a": "b"}})]), false),
            ("one long string", Size::default().values(&[json!({"data": {"a": big}})]), true),
            (
                "many small objects",
                Size::default().values(&vec![json!({"metadata": {"name": "n".repeat(100)}}); 1000]),
                true,
            ),
            ("a long array of numbers", Size::default().values(&[json!(vec![1; INLINE_BYTES / 4])]), true),
            ("bytes counted", Size::default().bytes(INLINE_BYTES + 1), true),
            ("bytes under", Size::default().bytes(INLINE_BYTES), false),
        ];
        for (name, size, large) in cases {
            assert_eq!(size.large(), large, "{name}");
        }
        // Deep nesting is walked without recursion.
        let mut deep = json!("leaf");
        for _ in 0..100_000 {
            deep = serde_json::Value::Array(vec![deep]);
        }
        assert!(Size::default().values(std::slice::from_ref(&deep)).large());
        // Counting stops at the bound: a larger value costs no more to measure, however wide.
        let huge = Size::default().values(&vec![json!({"a": "b"}); 1_000_000]);
        assert!(huge.large() && huge.0 <= INLINE_BYTES + 64, "counted {}", huge.0);
        let wide = json!({"items": vec![1; 10_000_000], "more": "x"});
        let counted = Size::default().values(std::slice::from_ref(&wide));
        assert!(counted.large() && counted.0 <= INLINE_BYTES + 64, "counted {}", counted.0);
        let keys: serde_json::Map<String, Value> = (0..1_000_000).map(|i| (format!("k{i}"), json!(null))).collect();
        let counted = Size::default().values(&[Value::Object(keys)]);
        assert!(counted.large() && counted.0 <= INLINE_BYTES + 64, "counted {}", counted.0);
        drop_deep(deep);
    }

    /// Drops a deeply nested value without recursing (serde_json's drop recurses).
    fn drop_deep(mut v: serde_json::Value) {
        while let serde_json::Value::Array(mut a) = v {
            v = a.pop().unwrap_or_default();
        }
    }

    #[test]
    fn small_work_runs_inline_and_large_work_leaves_the_worker_free() {
        let rt = one_worker();
        let on = |large| {
            rt.block_on(async move {
                let caller = std::thread::current().id();
                offload_if(large, move || std::thread::current().id() == caller).await
            })
        };
        assert!(on(false), "small work ran on another thread");
        assert!(!on(true), "large work ran on the worker");
        let (count, ()) = ticks_seen_by(&rt, |w| offload_if(true, w), || ());
        assert!(count >= 10, "the ticker stood still while the work ran");
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
