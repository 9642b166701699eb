//! A shard's store of one managed kind, kept compactly: each object as the compact JSON of its
//! metadata (without `managedFields`) and, for workloads, of its status, by namespace and name.
//!
//! kube's reflector store keeps each object as its typed metadata (`ObjectMeta`: a struct of
//! about 350 bytes, a `BTreeMap` node of about 540 bytes for each of labels and annotations,
//! and a dozen strings) behind a key of four more strings: about 2.4 KB for a managed object
//! whose metadata is 500 bytes of JSON. A replica keeps every object of the Applications it
//! owns, three or more each, and reads a few of them per reconcile: the few microseconds a read
//! spends parsing are worth the memory (measured in `docs/performance.md`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::PartialObjectMeta;
use kube::runtime::watcher::Event;

use crate::api::names;

/// What a shard's store keeps of a managed object: its metadata, and for
/// [`WithStatus`](super::managed::WithStatus) its status.
pub trait Observed: Resource {
    /// The object's `status` as compact JSON, when the store keeps it.
    fn status(&self) -> Option<&str> {
        None
    }
}

impl<K: Resource> Observed for PartialObjectMeta<K> {}

/// An object in a shard's store: its metadata, and its status when the store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Cached {
    pub meta: ObjectMeta,
    /// `status` as compact JSON ([`WithStatus`](super::managed::WithStatus)).
    pub status: Option<Box<str>>,
}

/// One object as the shelf keeps it.
#[derive(Debug)]
struct Stored {
    /// `metadata` as compact JSON, without `managedFields`.
    meta: Box<str>,
    /// The `sync.kuvryn.io/application-id` label, the key of nearly every query.
    application_id: Option<Box<str>>,
    /// `status` as compact JSON, when the watch keeps it.
    status: Option<Box<str>>,
}

impl Stored {
    fn of<O: Observed>(o: &O) -> Option<(Box<str>, Stored)> {
        let m = o.meta();
        let key = key(m.namespace.as_deref().unwrap_or_default(), m.name.as_deref()?);
        let meta = if m.managed_fields.is_some() {
            let mut m = m.clone();
            m.managed_fields = None;
            serde_json::to_string(&m)
        } else {
            serde_json::to_string(m)
        }
        .ok()?
        .into_boxed_str();
        let application_id =
            m.labels.as_ref().and_then(|l| l.get(names::labels::APPLICATION_ID)).map(|v| v.as_str().into());
        Some((key, Stored { meta, application_id, status: o.status().map(Box::from) }))
    }

    fn cached(&self) -> Option<Cached> {
        // Written by `of` from an `ObjectMeta`: it parses back.
        let meta = serde_json::from_str::<ObjectMeta>(&self.meta).ok()?;
        Some(Cached { meta, status: self.status.clone() })
    }
}

fn key(namespace: &str, name: &str) -> Box<str> {
    // Neither a namespace nor a name holds '/'.
    format!("{namespace}/{name}").into_boxed_str()
}

#[derive(Debug, Default)]
struct Inner {
    /// Whether a first list is in: until then the shelf cannot say what the cluster holds.
    listed: bool,
    objects: HashMap<Box<str>, Stored>,
    /// A relist's objects so far; they replace `objects` when it is done.
    relisting: Option<HashMap<Box<str>, Stored>>,
}

/// A shard's store of one kind: written by its watch ([`Shelf::apply`]), read by drift checks
/// and rollouts. Clones share the store.
#[derive(Clone, Debug, Default)]
pub struct Shelf(Arc<RwLock<Inner>>);

impl Shelf {
    /// Take in one watch event, as kube's reflector does: a relist's objects replace the
    /// store's at once when the relist is done, so a read never sees half a list.
    pub fn apply<O: Observed>(&self, event: &Event<O>) {
        // Serialized before the lock is taken: readers wait only for the map's update.
        let stored = match event {
            Event::Apply(o) | Event::InitApply(o) => Stored::of(o),
            _ => None,
        };
        let mut inner = self.0.write().expect("shelf lock");
        match event {
            Event::Apply(_) => {
                if let Some((k, s)) = stored {
                    inner.objects.insert(k, s);
                }
            }
            Event::Delete(o) => {
                let m = o.meta();
                if let Some(name) = m.name.as_deref() {
                    inner.objects.remove(&key(m.namespace.as_deref().unwrap_or_default(), name));
                }
            }
            Event::Init => inner.relisting = Some(HashMap::new()),
            Event::InitApply(_) => {
                if let (Some(relist), Some((k, s))) = (inner.relisting.as_mut(), stored) {
                    relist.insert(k, s);
                }
            }
            Event::InitDone => {
                if let Some(mut relist) = inner.relisting.take() {
                    relist.shrink_to_fit();
                    inner.objects = relist;
                }
                inner.listed = true;
            }
        }
    }

    /// The object `namespace/name`: `None` until the first list is in, `Some(None)` when the
    /// store does not hold it.
    pub fn named(&self, namespace: &str, name: &str) -> Option<Option<Cached>> {
        let inner = self.0.read().expect("shelf lock");
        inner.listed.then(|| inner.objects.get(&key(namespace, name)).and_then(Stored::cached))
    }

    /// Whether the store holds `namespace/name`, without parsing it: `None` until the first
    /// list is in.
    pub fn holds(&self, namespace: &str, name: &str) -> Option<bool> {
        let inner = self.0.read().expect("shelf lock");
        inner.listed.then(|| inner.objects.contains_key(&key(namespace, name)))
    }

    /// Whether the first list is in.
    pub fn listed(&self) -> bool {
        self.0.read().expect("shelf lock").listed
    }

    /// The objects carrying every label pair of `want`: `None` until the first list is in.
    pub fn labelled(&self, want: &[(&str, &str)]) -> Option<Vec<Cached>> {
        let inner = self.0.read().expect("shelf lock");
        if !inner.listed {
            return None;
        }
        let by_id = want.iter().find(|(k, _)| *k == names::labels::APPLICATION_ID).map(|(_, v)| *v);
        let found = inner
            .objects
            .values()
            // The id compared without parsing; the rest of the pairs on the parsed labels.
            .filter(|s| by_id.is_none_or(|id| s.application_id.as_deref() == Some(id)))
            .filter_map(Stored::cached)
            .filter(|c| {
                let labels = c.meta.labels.as_ref();
                want.iter().all(|(k, v)| labels.and_then(|l| l.get(*k)).map(String::as_str) == Some(*v))
            })
            .collect();
        Some(found)
    }

    /// How many objects the store holds.
    pub fn len(&self) -> usize {
        self.0.read().expect("shelf lock").objects.len()
    }

    /// Whether the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use kube::api::PartialObjectMeta;

    fn object(ns: &str, name: &str, labels: &[(&str, &str)]) -> PartialObjectMeta<ConfigMap> {
        let mut o = PartialObjectMeta::<ConfigMap>::default();
        o.metadata.name = Some(name.into());
        o.metadata.namespace = Some(ns.into());
        o.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        o.metadata.managed_fields =
            Some(vec![ManagedFieldsEntry { manager: Some("ksync".into()), ..Default::default() }]);
        o
    }

    fn names(found: Option<Vec<Cached>>) -> Option<Vec<String>> {
        let mut n: Vec<String> = found?.into_iter().filter_map(|c| c.meta.name).collect();
        n.sort();
        Some(n)
    }

    #[test]
    fn a_shelf_answers_once_listed_and_a_relist_replaces_it_whole() {
        let id = names::labels::APPLICATION_ID;
        let shelf = Shelf::default();
        let by_id = |v: &str| names(shelf.labelled(&[(id, v)]));
        assert_eq!(shelf.named("team-a", "a"), None, "not listed yet");
        assert_eq!(shelf.holds("team-a", "a"), None, "not listed yet");
        assert!(!shelf.listed());
        assert_eq!(by_id("web"), None, "not listed yet");
        shelf.apply(&Event::<PartialObjectMeta<ConfigMap>>::Init);
        shelf.apply(&Event::InitApply(object("team-a", "a", &[(id, "web"), ("tier", "front")])));
        shelf.apply(&Event::InitApply(object("team-a", "b", &[(id, "api")])));
        assert_eq!(shelf.named("team-a", "a"), None, "half a list is not an answer");
        shelf.apply(&Event::<PartialObjectMeta<ConfigMap>>::InitDone);
        assert_eq!(by_id("web"), Some(vec!["a".to_string()]));
        assert_eq!(names(shelf.labelled(&[(id, "web"), ("tier", "back")])), Some(vec![]), "every pair must match");
        assert_eq!(names(shelf.labelled(&[("tier", "front")])), Some(vec!["a".to_string()]), "without the id");
        let a = shelf.named("team-a", "a").expect("listed").expect("held");
        assert_eq!(a.meta.managed_fields, None, "kept without managedFields");
        assert_eq!(a.meta.labels.unwrap().get("tier").map(String::as_str), Some("front"));
        assert_eq!(shelf.named("team-b", "a"), Some(None), "another namespace");
        assert_eq!((shelf.holds("team-a", "a"), shelf.holds("team-b", "a")), (Some(true), Some(false)));
        shelf.apply(&Event::Apply(object("team-a", "c", &[(id, "web")])));
        shelf.apply(&Event::Delete(object("team-a", "a", &[])));
        assert_eq!(by_id("web"), Some(vec!["c".to_string()]));
        // A relist: until it is done the store answers as before; then it holds only its objects.
        shelf.apply(&Event::<PartialObjectMeta<ConfigMap>>::Init);
        shelf.apply(&Event::InitApply(object("team-a", "d", &[(id, "web")])));
        assert_eq!(by_id("web"), Some(vec!["c".to_string()]), "the relist is not done");
        shelf.apply(&Event::<PartialObjectMeta<ConfigMap>>::InitDone);
        assert_eq!(by_id("web"), Some(vec!["d".to_string()]), "c is gone from the relist");
        assert_eq!(shelf.len(), 1);
    }
}
