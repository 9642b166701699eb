//! Keeping objects across restarts (`simcluster --data FILE`): the store and its
//! resourceVersion as one JSON document, written atomically once a second after a change and on
//! shutdown; read at start, re-registering the CRDs it holds. Watch history is not kept: a
//! watch from an older resourceVersion after a restart gets 410 Expired, as after an etcd
//! compaction.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::state::State;

/// Write the snapshot (to a temporary file, then renamed).
pub fn save(state: &State, path: &Path) -> std::io::Result<()> {
    let (rv, objects) = {
        let txn = state.store.lock();
        (txn.rv(), txn.dump())
    };
    let doc = json!({
        "resourceVersion": rv,
        "objects": objects.into_iter().map(|(k, o)| json!({"key": k, "object": o})).collect::<Vec<_>>(),
    });
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(&doc).map_err(std::io::Error::other)?)?;
    std::fs::rename(tmp, path)
}

/// Read a snapshot into a fresh state.
pub fn load(state: &Arc<State>, path: &Path) -> std::io::Result<()> {
    let doc: Value = serde_json::from_slice(&std::fs::read(path)?).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: not a simcluster snapshot: {e}", path.display()),
        )
    })?;
    let rv = doc["resourceVersion"].as_u64().unwrap_or(1);
    let objects: Vec<(String, Value)> = doc["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["key"].as_str()?.to_string(), e["object"].clone())))
        .collect();
    let crds: Vec<Value> = objects
        .iter()
        .filter(|(k, _)| k == "apiextensions.k8s.io/customresourcedefinitions")
        .map(|(_, o)| o.clone())
        .collect();
    state.store.lock().restore(rv, objects);
    if let Some(rt) = state.registry.find("apiextensions.k8s.io", "v1", "customresourcedefinitions") {
        for crd in crds {
            crate::admission::after_write(state, &rt, &crd);
        }
    }
    Ok(())
}

/// Write the snapshot once a second while something changed.
pub fn start(state: Arc<State>, path: PathBuf) {
    tokio::spawn(async move {
        let mut written = state.store.lock().rv();
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let rv = state.store.lock().rv();
            if rv != written {
                match save(&state, &path) {
                    Ok(()) => written = rv,
                    Err(e) => tracing::error!("simcluster: writing {}: {e}", path.display()),
                }
            }
        }
    });
}
