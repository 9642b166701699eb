//! An Event recorder for the scheduler and kubelet: like client-go's, it aggregates a repeated
//! Event (same object, field path, type, reason, message) into one with a growing `count`,
//! remembering what it recorded instead of listing Events, so recording stays O(1) with
//! thousands of Pods. Timestamps come from the simulation clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::client::{Client, path};

static SEQ: AtomicU64 = AtomicU64::new(0);

/// (fieldPath, type, reason, message) of an Event about one object.
type Key = (String, &'static str, &'static str, String);

/// Records Events as one component (`default-scheduler`, `kubelet`).
pub struct Recorder {
    client: Client,
    component: &'static str,
    /// Object uid → Event key → (namespace, event name, count).
    seen: HashMap<String, HashMap<Key, (String, String, i64)>>,
}

impl Recorder {
    /// A recorder writing through `client` as `component`.
    pub fn new(client: Client, component: &'static str) -> Recorder {
        Recorder { client, component, seen: HashMap::new() }
    }

    /// Record an Event about `object` (a Pod or Node); `host` is the Node of a kubelet Event.
    pub async fn record(
        &mut self,
        object: &Value,
        field_path: Option<&str>,
        type_: &'static str,
        reason: &'static str,
        message: &str,
        host: Option<&str>,
    ) {
        let meta = &object["metadata"];
        let ns = meta["namespace"].as_str().unwrap_or("default").to_string();
        let uid = meta["uid"].as_str().unwrap_or_default().to_string();
        let state = self.client.state().clone();
        let now = state.clock.rfc3339();
        let key: Key = (field_path.unwrap_or_default().to_string(), type_, reason, message.to_string());
        if let Some((ens, ename, count)) = self.seen.get_mut(&uid).and_then(|m| m.get_mut(&key)) {
            *count += 1;
            let patch = json!({"count": *count, "lastTimestamp": now});
            if self.client.merge_patch(&path("v1", "events", ens, ename, ""), &patch).await.is_ok() {
                return;
            }
            if let Some(m) = self.seen.get_mut(&uid) {
                m.remove(&key);
            }
        }
        let name = meta["name"].as_str().unwrap_or_default();
        let nanos = state.clock.now().as_nanosecond() as u128 + u128::from(SEQ.fetch_add(1, Ordering::Relaxed));
        let ename = format!("{name}.{nanos:x}");
        let mut involved = json!({
            "kind": object["kind"], "name": name, "uid": meta["uid"],
            "apiVersion": object["apiVersion"], "resourceVersion": meta["resourceVersion"],
        });
        if meta["namespace"].is_string() {
            involved["namespace"] = meta["namespace"].clone();
        }
        if let Some(fp) = field_path {
            involved["fieldPath"] = json!(fp);
        }
        let mut source = json!({"component": self.component});
        if let Some(h) = host {
            source["host"] = json!(h);
        }
        let ev = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": ename, "namespace": ns},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": type_,
            "eventTime": null,
            "reportingComponent": self.component,
            "reportingInstance": host.unwrap_or_default(),
        });
        if self.client.create(&path("v1", "events", &ns, "", ""), &ev).await.is_ok() {
            self.seen.entry(uid).or_default().insert(key, (ns, ename, 1));
        }
    }

    /// Forget the Events of an object that is gone.
    pub fn forget(&mut self, uid: &str) {
        self.seen.remove(uid);
    }
}
