//! The object store: every object in memory under one global, monotonically increasing
//! resourceVersion (as etcd's revision), with a bounded history of changes for watches and
//! for lists at an older resourceVersion.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::broadcast;

/// Watch event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

impl EventType {
    /// The API string.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change.
#[derive(Clone, Debug)]
pub struct Change {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Storage key (`group/resource`).
    pub key: String,
    /// Namespace ("" for cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Type.
    pub kind: EventType,
    /// The object after the change (for Deleted: the last state, with the deletion's rv).
    pub object: Value,
    /// The object before the change (Modified and Deleted).
    pub old: Option<Value>,
    /// The watch line of this change as most watchers send it (same type, the stored object),
    /// encoded once and shared by every watcher.
    pub line: std::sync::OnceLock<Option<bytes::Bytes>>,
}

/// Objects of one storage key, by (namespace, name).
pub type Objects = BTreeMap<(String, String), Value>;

/// The mutable state, behind one lock.
#[derive(Default)]
pub struct Inner {
    rv: u64,
    objects: HashMap<String, Objects>,
    history: VecDeque<Arc<Change>>,
    /// The resourceVersion of each key's last change (caches of derived state key on it).
    changed: HashMap<String, u64>,
    /// Oldest resourceVersion the history can still serve.
    pub compacted: u64,
}

/// How many changes the history keeps.
pub const HISTORY: usize = 100_000;

/// The store.
pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Change>>,
}

impl Default for Store {
    fn default() -> Self {
        let (tx, _) = broadcast::channel(65_536);
        Store { inner: Mutex::new(Inner { rv: 1, ..Default::default() }), tx }
    }
}

impl Store {
    /// Lock the store for a read-modify-write.
    pub fn lock(&self) -> Txn<'_> {
        Txn { inner: self.inner.lock().unwrap_or_else(|p| p.into_inner()), tx: &self.tx }
    }

    /// Subscribe to changes (call with the lock held to see no gap).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.tx.subscribe()
    }
}

/// A locked store.
pub struct Txn<'a> {
    inner: MutexGuard<'a, Inner>,
    tx: &'a broadcast::Sender<Arc<Change>>,
}

impl Txn<'_> {
    /// The current resourceVersion.
    pub fn rv(&self) -> u64 {
        self.inner.rv
    }

    /// The oldest resourceVersion history still covers.
    pub fn compacted(&self) -> u64 {
        self.inner.compacted
    }

    /// Get an object.
    pub fn get(&self, key: &str, namespace: &str, name: &str) -> Option<&Value> {
        self.inner.objects.get(key).and_then(|m| m.get(&(namespace.to_string(), name.to_string())))
    }

    /// Every object of a key (all namespaces), ordered by namespace and name.
    pub fn all(&self, key: &str) -> Vec<&Value> {
        self.inner.objects.get(key).map(|m| m.values().collect()).unwrap_or_default()
    }

    /// The objects of a key in one namespace (every namespace when `namespace` is empty),
    /// ordered by namespace and name, without visiting the other namespaces.
    pub fn in_namespace<'s>(&'s self, key: &str, namespace: &str) -> Box<dyn Iterator<Item = &'s Value> + 's> {
        let Some(m) = self.inner.objects.get(key) else { return Box::new(std::iter::empty()) };
        if namespace.is_empty() {
            return Box::new(m.values());
        }
        let ns = namespace.to_string();
        Box::new(m.range((ns.clone(), String::new())..).take_while(move |((n, _), _)| *n == ns).map(|(_, v)| v))
    }

    /// The resourceVersion of the last change to an object of `key` (0: none since start).
    pub fn changed_at(&self, key: &str) -> u64 {
        self.inner.changed.get(key).copied().unwrap_or(0)
    }

    /// The changes to objects of `key` after `rv`, oldest first, or `None` when history does
    /// not reach back that far.
    pub fn changes_of_since(&self, key: &str, rv: u64) -> Option<Vec<Arc<Change>>> {
        if rv < self.inner.compacted {
            return None;
        }
        let from = self.inner.history.partition_point(|c| c.rv <= rv);
        Some(self.inner.history.range(from..).filter(|c| c.key == key).cloned().collect())
    }

    /// Every object of a key as of `rv` (reconstructed from history), or `None` when history does
    /// not reach back that far.
    pub fn snapshot(&self, key: &str, rv: u64) -> Option<Objects> {
        if rv >= self.inner.rv {
            return Some(self.inner.objects.get(key).cloned().unwrap_or_default());
        }
        if rv < self.inner.compacted {
            return None;
        }
        let mut objects = self.inner.objects.get(key).cloned().unwrap_or_default();
        for change in self.inner.history.iter().rev() {
            if change.rv <= rv {
                break;
            }
            if change.key != key {
                continue;
            }
            let id = (change.namespace.clone(), change.name.clone());
            match change.kind {
                EventType::Added => {
                    objects.remove(&id);
                }
                EventType::Modified | EventType::Deleted => {
                    if let Some(old) = &change.old {
                        objects.insert(id, old.clone());
                    }
                }
            }
        }
        Some(objects)
    }

    /// Changes after `rv` (all keys), or `None` when history does not reach back that far.
    pub fn changes_since(&self, rv: u64) -> Option<Vec<Arc<Change>>> {
        if rv < self.inner.compacted {
            return None;
        }
        Some(self.inner.history.iter().filter(|c| c.rv > rv).cloned().collect())
    }

    /// The next resourceVersion, reserved for a write.
    pub fn next_rv(&mut self) -> u64 {
        self.inner.rv += 1;
        self.inner.rv
    }

    /// Store `object` (whose `metadata.resourceVersion` the caller set to `rv`), recording the
    /// change.
    pub fn put(&mut self, key: &str, namespace: &str, name: &str, object: Value, rv: u64) {
        let id = (namespace.to_string(), name.to_string());
        let old = self.inner.objects.entry(key.to_string()).or_default().insert(id, object.clone());
        let kind = if old.is_some() { EventType::Modified } else { EventType::Added };
        self.record(Change {
            rv,
            key: key.into(),
            namespace: namespace.into(),
            name: name.into(),
            kind,
            object,
            old,
            line: Default::default(),
        });
    }

    /// Remove an object; `last` is its final state (with the deletion's resourceVersion).
    pub fn remove(&mut self, key: &str, namespace: &str, name: &str, last: Value, rv: u64) -> Option<Value> {
        let old = self.inner.objects.get_mut(key)?.remove(&(namespace.to_string(), name.to_string()))?;
        self.record(Change {
            rv,
            key: key.into(),
            namespace: namespace.into(),
            name: name.into(),
            kind: EventType::Deleted,
            object: last,
            old: Some(old.clone()),
            line: Default::default(),
        });
        Some(old)
    }

    fn record(&mut self, change: Change) {
        self.inner.changed.insert(change.key.clone(), change.rv);
        let change = Arc::new(change);
        self.inner.history.push_back(change.clone());
        while self.inner.history.len() > HISTORY {
            if let Some(c) = self.inner.history.pop_front() {
                self.inner.compacted = c.rv;
            }
        }
        let _ = self.tx.send(change);
    }

    /// Every storage key with objects.
    pub fn keys(&self) -> Vec<String> {
        self.inner.objects.iter().filter(|(_, m)| !m.is_empty()).map(|(k, _)| k.clone()).collect()
    }

    /// Every object, for snapshots to disk.
    pub fn dump(&self) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        for (k, m) in &self.inner.objects {
            for v in m.values() {
                out.push((k.clone(), v.clone()));
            }
        }
        out
    }

    /// Forget history up to now (a fresh cluster's early revisions are compacted).
    pub fn compact(&mut self) {
        self.inner.history.clear();
        self.inner.compacted = self.inner.rv;
    }

    /// Restore objects and the resourceVersion from a snapshot (no history).
    pub fn restore(&mut self, rv: u64, objects: Vec<(String, Value)>) {
        for (k, v) in objects {
            let ns = v["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
            let name = v["metadata"]["name"].as_str().unwrap_or_default().to_string();
            self.inner.changed.insert(k.clone(), rv);
            self.inner.objects.entry(k).or_default().insert((ns, name), v);
        }
        self.inner.rv = rv;
        self.inner.compacted = rv;
    }
}
