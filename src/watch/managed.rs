//! Watches of the objects Applications manage: metadata only (`PartialObjectMeta`), and
//! server-side label-selected to Kuvryn Sync's objects of one shard, so a replica receives
//! events only for the shards it owns. An event names its Application through the
//! `sync.kuvryn.io/application` annotation and triggers a drift check of that Application only.
//!
//! Kinds watched: ConfigMaps, Secrets, Services, Deployments, StatefulSets and DaemonSets
//! ([`WATCHED_BY_DEFAULT`]), plus every other kind an Application manages that the controller
//! has been granted list and watch on, found out with a SelfSubjectAccessReview
//! ([`ExtraKinds`]), not by failing. Applications that manage other kinds are checked again at
//! `--drift-resync-interval`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::api::{Api, DynamicObject, PartialObjectMeta, PostParams};
use kube::core::ApiResource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use crate::api::application::Application;
use crate::api::names;

/// (group, kind) of the kinds every replica watches.
pub const WATCHED_BY_DEFAULT: [(&str, &str); 6] = [
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "Service"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
];

/// How long a refused kind is not asked about again (RBAC may be granted later).
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(300);

/// The label selector of the objects Kuvryn Sync manages in `shard` (every shard: `None`).
pub fn selector(shard: Option<u32>) -> String {
    let managed = format!("{}={}", names::labels::MANAGED_BY, names::labels::MANAGED_BY_VALUE);
    match shard {
        Some(k) => format!("{managed},{}={k}", names::labels::SHARD),
        None => managed,
    }
}

/// Metadata-only watch events of managed objects of kind `K` (a drift or health trigger: the
/// object itself is read again by the reconcile).
pub fn touched<K>(
    client: &Client,
    selector: &str,
) -> impl Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    // `Api<PartialObjectMeta<K>>` makes metadata-only requests.
    watcher(Api::<PartialObjectMeta<K>>::all(client.clone()), watcher::Config::default().labels(selector))
        .default_backoff()
        .touched_objects()
}

/// The Application a managed object belongs to (`sync.kuvryn.io/application: namespace/name`).
pub fn owner_app(obj: &impl ResourceExt) -> Option<ObjectRef<Application>> {
    let (ns, name) = obj.annotations().get(names::annotations::APPLICATION)?.split_once('/')?;
    Some(ObjectRef::new(name).within(ns))
}

/// Whether `group`/`kind` is watched by every replica.
pub fn watched_by_default(group: &str, kind: &str) -> bool {
    WATCHED_BY_DEFAULT.iter().any(|(g, k)| *g == group && *k == kind)
}

type KindKey = (String, String);

/// Managed kinds beyond [`WATCHED_BY_DEFAULT`] that the controller may list and watch
/// cluster-wide: shard controllers watch each of them as it is added.
pub struct ExtraKinds {
    client: Client,
    asked: Mutex<HashMap<KindKey, (bool, Instant)>>,
    allowed: tokio::sync::watch::Sender<BTreeMap<KindKey, ApiResource>>,
}

impl ExtraKinds {
    /// Ask as `client`'s identity.
    pub fn new(client: Client) -> ExtraKinds {
        ExtraKinds { client, asked: Mutex::default(), allowed: tokio::sync::watch::Sender::new(BTreeMap::new()) }
    }

    /// An Application manages objects of `resource`: watch the kind if the controller may.
    /// Returns whether changes of the kind are watched.
    pub async fn note(&self, resource: &ApiResource) -> bool {
        if watched_by_default(&resource.group, &resource.kind) {
            return true;
        }
        let key = (resource.group.clone(), resource.kind.clone());
        if let Some((allowed, at)) = self.asked.lock().expect("kinds lock").get(&key).copied()
            && (allowed || at.elapsed() < ASK_AGAIN_AFTER)
        {
            return allowed;
        }
        let allowed = match may_list_and_watch(&self.client, resource).await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, kind = %resource.kind, "asking whether a kind may be watched");
                false
            }
        };
        self.asked.lock().expect("kinds lock").insert(key.clone(), (allowed, Instant::now()));
        if allowed {
            tracing::info!(group = %resource.group, kind = %resource.kind, "watching a managed kind");
            self.allowed.send_if_modified(|kinds| kinds.insert(key, resource.clone()).is_none());
        } else {
            tracing::info!(group = %resource.group, kind = %resource.kind,
                "not granted list and watch on a managed kind: its changes are found at --drift-resync-interval");
        }
        allowed
    }

    /// The kinds watched beyond the defaults, as they are added.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<BTreeMap<KindKey, ApiResource>> {
        self.allowed.subscribe()
    }
}

/// SelfSubjectAccessReviews: may `client` list and watch `resource` in every namespace?
async fn may_list_and_watch(client: &Client, resource: &ApiResource) -> Result<bool, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for verb in ["list", "watch"] {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(resource.group.clone()),
                    resource: Some(resource.plural.clone()),
                    verb: Some(verb.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api.create(&PostParams::default(), &review).await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Applications to check, from metadata watches of the extra kinds in `kinds` (started as kinds
/// are added) label-selected by `selector`. The watches stop when the stream is dropped.
pub fn extra_triggers(
    client: Client,
    mut kinds: tokio::sync::watch::Receiver<BTreeMap<KindKey, ApiResource>>,
    selector: String,
) -> impl Stream<Item = ObjectRef<Application>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel::<ObjectRef<Application>>(256);
    tokio::spawn(async move {
        let mut watches = tokio::task::JoinSet::new();
        let mut started = std::collections::BTreeSet::new();
        loop {
            let current = kinds.borrow_and_update().clone();
            for (key, resource) in current {
                if started.insert(key) {
                    watches.spawn(watch_kind(client.clone(), resource, selector.clone(), tx.clone()));
                }
            }
            tokio::select! {
                changed = kinds.changed() => if changed.is_err() { break },
                _ = tx.closed() => break,
            }
        }
        // Dropping the set aborts the watches.
    });
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) })
}

async fn watch_kind(
    client: Client,
    resource: ApiResource,
    selector: String,
    tx: tokio::sync::mpsc::Sender<ObjectRef<Application>>,
) {
    // Metadata-only requests.
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &resource);
    let mut events =
        std::pin::pin!(watcher(api, watcher::Config::default().labels(&selector)).default_backoff().touched_objects());
    while let Some(event) = events.next().await {
        match event {
            Ok(meta) => {
                if let Some(app) = owner_app(&meta)
                    && tx.send(app).await.is_err()
                {
                    return;
                }
            }
            Err(e) => tracing::debug!(error = %e, kind = %resource.kind, "watching a managed kind"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_pick_managed_objects_of_a_shard() {
        assert_eq!(selector(None), "app.kubernetes.io/managed-by=kuvryn-sync");
        assert_eq!(selector(Some(3)), "app.kubernetes.io/managed-by=kuvryn-sync,sync.kuvryn.io/shard=3");
        assert!(watched_by_default("apps", "Deployment"));
        assert!(!watched_by_default("", "ServiceAccount"));
        assert!(!watched_by_default("example.com", "ConfigMap"));
    }

    #[test]
    fn the_application_comes_from_the_annotation() {
        let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
        assert!(owner_app(&cm).is_none());
        cm.annotations_mut().insert(names::annotations::APPLICATION.into(), "team-a/web".into());
        assert_eq!(owner_app(&cm), Some(ObjectRef::new("web").within("team-a")));
    }
}
