//! Watches of the objects Applications manage, server-side label-selected to Kuvryn Sync's
//! objects of one shard, so a replica receives events only for the shards it owns. An event
//! names its Application through the `sync.kuvryn.io/application` annotation and triggers a
//! drift check of that Application only.
//!
//! Metadata only (`PartialObjectMeta`), except for workloads (Deployments, StatefulSets,
//! DaemonSets: [`WithStatus`]), whose status is kept as well: their status moves on its own,
//! many times in a rollout, and with it in the store a drift check plans a status-only change
//! without reading the object again (`unchanged::split`).
//!
//! The watches keep stores too, compactly ([`Shelf`]): they ([`Inventory`]) answer a drift
//! check's list of the Application's managed objects without a request to the API server.
//!
//! Kinds watched: ConfigMaps, Secrets, Services, Deployments, StatefulSets and DaemonSets
//! ([`WATCHED_BY_DEFAULT`]), plus every other kind an Application manages that the controller
//! has been granted list and watch on, found out with a SelfSubjectAccessReview
//! ([`ExtraKinds`]), not by failing. Applications that manage other kinds are checked again at
//! `--drift-resync-interval`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, PartialObjectMeta, PostParams};
use kube::core::ApiResource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use crate::api::application::Application;
use crate::api::names;
use crate::watch::shelf::Shelf;
pub use crate::watch::shelf::{Cached, Observed};

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

/// Watch events of managed objects as `O` keeps them (`PartialObjectMeta<K>`: metadata only;
/// [`WithStatus<K>`]: metadata and status), a drift or health trigger, kept in `inventory` as
/// `shard`'s store of the kind while the stream lives.
pub fn touched<O>(
    client: &Client,
    selector: &str,
    inventory: &Inventory,
    shard: Option<u32>,
) -> impl Stream<Item = Result<O, watcher::Error>> + Send + 'static
where
    O: Observed<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let shelf = Shelf::default();
    let alive = inventory.insert(shard, &O::group(&()), &O::kind(&()), shelf.clone());
    let (waiting, group, kind) = (inventory.waiting.clone(), O::group(&()).to_string(), O::kind(&()).to_string());
    // `Api<PartialObjectMeta<K>>` makes metadata-only requests; `Api<WithStatus<K>>` full ones.
    watcher(Api::<O>::all(client.clone()), watcher::Config::default().labels(selector))
        .default_backoff()
        .modify(|o| o.meta_mut().managed_fields = None)
        .inspect_ok(move |event| shelf.apply(event))
        .touched_objects()
        .inspect(move |o| {
            let _ = &alive;
            // Seen in the store by now: whoever waits for a change of it looks again.
            if let Ok(o) = o {
                tell(&waiting, shard, &group, &kind, o.meta());
            }
        })
}

/// A workload as its shard's store keeps it: its metadata (without `managedFields`) and its
/// `status` as compact JSON, nothing of its spec (the Pod template is most of its size). A full
/// watch: the API server has no partial view with the status.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(bound = "")]
pub struct WithStatus<K> {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "compact")]
    pub status: Option<Box<str>>,
    #[serde(skip)]
    kind: std::marker::PhantomData<K>,
}

/// A JSON value kept as its compact text (a parsed `Value` takes several times the memory).
fn compact<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<str>>, D::Error> {
    let v = <Option<serde_json::Value> as serde::Deserialize>::deserialize(d)?;
    Ok(v.filter(|v| !v.is_null()).map(|v| v.to_string().into_boxed_str()))
}

impl<K: Resource<DynamicType = ()>> Resource for WithStatus<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<K: Resource<DynamicType = ()>> Observed for WithStatus<K> {
    fn status(&self) -> Option<&str> {
        self.status.as_deref()
    }
}

/// The label pairs of an equality-only selector (`k=v,k2=v2`), or `None` for anything else.
fn equalities(selector: &str) -> Option<Vec<(&str, &str)>> {
    selector
        .split(',')
        .map(|term| {
            let (k, v) = term.split_once('=')?;
            let (k, v) = (k.trim(), v.trim_start_matches('=').trim());
            (!k.is_empty() && !k.ends_with('!') && !k.contains(' ')).then_some((k, v))
        })
        .collect()
}

/// Shard (`None`: not sharded), group and kind.
type StoreKey = (Option<u32>, String, String);
/// Shard, group, kind, namespace and name of one object.
type ObjectKey = (Option<u32>, String, String, String, String);
/// The objects waited on, each with the sender its waiters hold ([`Inventory::changes_of`]).
type Waiting = Arc<Mutex<HashMap<ObjectKey, Weak<tokio::sync::watch::Sender<()>>>>>;

/// Tell whoever waits on `meta`'s object (of `group`/`kind` in `shard`'s store) that its store
/// has a watch event of it. One lookup, and nothing at all while no one waits.
fn tell(waiting: &Waiting, shard: Option<u32>, group: &str, kind: &str, meta: &ObjectMeta) {
    let waiting = waiting.lock().expect("inventory lock");
    if waiting.is_empty() {
        return;
    }
    let (ns, name) = (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default());
    if let Some(tx) = waiting.get(&(shard, group.to_string(), kind.to_string(), ns, name)).and_then(Weak::upgrade) {
        tx.send_replace(());
    }
}

/// The watch events of one object ([`Inventory::changes_of`]). Dropped by its last waiter,
/// the object is no longer waited on.
pub struct ObjectChanges {
    rx: tokio::sync::watch::Receiver<()>,
    tx: Arc<tokio::sync::watch::Sender<()>>,
    key: ObjectKey,
    waiting: Waiting,
}

impl ObjectChanges {
    /// Mark every event so far as seen: look at the store after this.
    pub fn seen(&mut self) {
        self.rx.borrow_and_update();
    }

    /// The next event not seen yet.
    pub async fn changed(&mut self) -> Result<(), tokio::sync::watch::error::RecvError> {
        self.rx.changed().await
    }
}

impl Drop for ObjectChanges {
    fn drop(&mut self) {
        // Under the lock: `changes_of` takes a sender only under it too.
        let mut waiting = self.waiting.lock().expect("inventory lock");
        if Arc::strong_count(&self.tx) == 1 {
            waiting.remove(&self.key);
        }
    }
}

/// Managed objects as this replica's shard watches have them ([`Cached`]), by shard (`None`:
/// not sharded) and kind. A store answers only while its watch runs and once its first list is
/// in.
#[derive(Default)]
pub struct Inventory {
    stores: Mutex<HashMap<StoreKey, (Weak<()>, Shelf)>>,
    /// The objects waited on ([`Inventory::changes_of`]).
    waiting: Waiting,
}

impl Inventory {
    /// Register `shelf` as `shard`'s store of `group`/`kind`; it answers while the returned
    /// token lives (the watch holds it).
    pub fn insert(&self, shard: Option<u32>, group: &str, kind: &str, shelf: Shelf) -> Arc<()> {
        let alive = Arc::new(());
        self.stores
            .lock()
            .expect("inventory lock")
            .insert((shard, group.to_string(), kind.to_string()), (Arc::downgrade(&alive), shelf));
        alive
    }

    /// `shard`'s store of `group`/`kind` while its watch runs; read after the inventory's lock
    /// is let go.
    fn shelf(&self, shard: Option<u32>, group: &str, kind: &str) -> Option<Shelf> {
        let stores = self.stores.lock().expect("inventory lock");
        let (alive, shelf) = stores.get(&(shard, group.to_string(), kind.to_string()))?;
        alive.upgrade()?;
        Some(shelf.clone())
    }

    /// The objects of `group`/`kind` matching the equality-only `selector` in `shard`'s store,
    /// or `None` when no running, synced watch can say.
    pub fn lookup(&self, shard: Option<u32>, group: &str, kind: &str, selector: &str) -> Option<Vec<Cached>> {
        let want = equalities(selector)?;
        self.shelf(shard, group, kind)?.labelled(&want)
    }

    /// The object `namespace/name` of `group`/`kind` in `shard`'s store: `None` when the store
    /// does not have it, or no running, synced watch can say. One hash lookup.
    pub fn get(&self, shard: Option<u32>, group: &str, kind: &str, namespace: &str, name: &str) -> Option<ObjectMeta> {
        Some(self.cached(shard, group, kind, namespace, name)?.meta)
    }

    /// Whether `shard`'s store of `group`/`kind` holds `namespace/name`: `None` when no
    /// running, synced watch can say. Nothing is parsed.
    pub fn holds(&self, shard: Option<u32>, group: &str, kind: &str, namespace: &str, name: &str) -> Option<bool> {
        self.shelf(shard, group, kind)?.holds(namespace, name)
    }

    /// [`Inventory::get`], with the status when the store keeps it.
    pub fn cached(&self, shard: Option<u32>, group: &str, kind: &str, namespace: &str, name: &str) -> Option<Cached> {
        self.shelf(shard, group, kind)?.named(namespace, name)?
    }

    /// Whether `shard`'s watch of `group`/`kind` runs and has its first list in.
    pub fn watching(&self, shard: Option<u32>, group: &str, kind: &str) -> bool {
        self.shelf(shard, group, kind).is_some_and(|s| s.listed())
    }

    /// The watch events of `namespace/name` of `group`/`kind` in `shard`'s store, each told
    /// after the store has it: mark them seen, look, then await the next. Only the object's own
    /// events wake its waiter, whatever else its store takes in.
    pub fn changes_of(
        &self,
        shard: Option<u32>,
        group: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> ObjectChanges {
        let key = (shard, group.to_string(), kind.to_string(), namespace.to_string(), name.to_string());
        let mut waiting = self.waiting.lock().expect("inventory lock");
        let tx = match waiting.get(&key).and_then(Weak::upgrade) {
            Some(tx) => tx,
            None => {
                let tx = Arc::new(tokio::sync::watch::Sender::new(()));
                waiting.insert(key.clone(), Arc::downgrade(&tx));
                tx
            }
        };
        ObjectChanges { rx: tx.subscribe(), tx, key, waiting: self.waiting.clone() }
    }

    /// Forget the stores whose watches stopped (a later watch of the same shard and kind
    /// replaces an entry anyway; this frees the memory of shards handed over).
    pub fn forget_stopped(&self) {
        self.stores.lock().expect("inventory lock").retain(|_, (alive, _)| alive.strong_count() > 0);
    }

    /// How many stores are registered.
    pub fn len(&self) -> usize {
        self.stores.lock().expect("inventory lock").len()
    }

    /// Whether no store is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The Application a managed object belongs to (`sync.kuvryn.io/application: namespace/name`).
pub fn owner_app(obj: &impl ResourceExt) -> Option<ObjectRef<Application>> {
    application_in(obj.annotations())
}

/// The Application the `sync.kuvryn.io/application` annotation among `annotations` names.
pub fn application_in(annotations: &BTreeMap<String, String>) -> Option<ObjectRef<Application>> {
    let (ns, name) = annotations.get(names::annotations::APPLICATION)?.split_once('/')?;
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
    inventory: Arc<Inventory>,
    shard: Option<u32>,
) -> impl Stream<Item = ObjectRef<Application>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel::<ObjectRef<Application>>(256);
    tokio::spawn(async move {
        let mut watches = tokio::task::JoinSet::new();
        let mut started = std::collections::BTreeSet::new();
        loop {
            let current = kinds.borrow_and_update().clone();
            for (key, resource) in current {
                if started.insert(key) {
                    let shelf = Shelf::default();
                    let alive = inventory.insert(shard, &resource.group, &resource.kind, shelf.clone());
                    watches.spawn(watch_kind(client.clone(), resource, selector.clone(), tx.clone(), shelf, alive));
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
    shelf: Shelf,
    _alive: Arc<()>,
) {
    // Metadata-only requests.
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &resource);
    let mut events = std::pin::pin!(
        watcher(api, watcher::Config::default().labels(&selector))
            .default_backoff()
            .modify(|o| o.metadata.managed_fields = None)
            .inspect_ok(move |event| shelf.apply(event))
            .touched_objects()
    );
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
    fn only_equality_selectors_are_answered_from_a_store() {
        assert_eq!(equalities("a=b,c==d"), Some(vec![("a", "b"), ("c", "d")]));
        assert_eq!(equalities("a!=b"), None);
        assert_eq!(equalities("a in (b)"), None);
        assert_eq!(equalities("a"), None);
    }

    #[tokio::test]
    async fn a_store_answers_while_its_watch_lives_and_once_it_has_listed() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::watcher::Event;
        let inventory = Inventory::default();
        let shelf = Shelf::default();
        let alive = inventory.insert(Some(3), "", "ConfigMap", shelf.clone());
        let lookup = || inventory.lookup(Some(3), "", "ConfigMap", "app=web");
        assert_eq!(lookup(), None, "not listed yet");
        assert!(!inventory.watching(Some(3), "", "ConfigMap"), "not listed yet");
        assert_eq!(inventory.holds(Some(3), "", "ConfigMap", "team-a", "a"), None, "not listed yet");
        let object = |name: &str, app: &str| {
            let mut o = PartialObjectMeta::<ConfigMap>::default();
            o.metadata.name = Some(name.into());
            o.metadata.namespace = Some("team-a".into());
            o.metadata.labels = Some([("app".to_string(), app.to_string())].into());
            o
        };
        shelf.apply(&Event::<PartialObjectMeta<ConfigMap>>::Init);
        shelf.apply(&Event::InitApply(object("a", "web")));
        shelf.apply(&Event::InitApply(object("b", "api")));
        shelf.apply(&Event::<PartialObjectMeta<ConfigMap>>::InitDone);
        let found = lookup().expect("listed");
        assert!(inventory.watching(Some(3), "", "ConfigMap"));
        assert!(!inventory.watching(Some(4), "", "ConfigMap"), "another shard");
        assert_eq!(found.iter().map(|c| c.meta.name.clone().unwrap()).collect::<Vec<_>>(), vec!["a"]);
        let named = |ns: &str, name: &str| inventory.get(Some(3), "", "ConfigMap", ns, name).and_then(|m| m.name);
        assert_eq!(named("team-a", "b").as_deref(), Some("b"));
        assert_eq!(named("team-a", "c"), None, "not in the store");
        assert_eq!(named("team-b", "b"), None, "another namespace");
        let holds = |shard: u32, ns: &str, name: &str| inventory.holds(Some(shard), "", "ConfigMap", ns, name);
        assert_eq!(holds(3, "team-a", "b"), Some(true));
        assert_eq!(holds(3, "team-a", "c"), Some(false), "listed, and not there");
        assert_eq!(holds(3, "team-b", "b"), Some(false), "another namespace");
        assert_eq!(holds(5, "team-a", "b"), None, "no watch of that shard");
        assert_eq!(inventory.lookup(Some(4), "", "ConfigMap", "app=web"), None, "another shard");
        assert_eq!(inventory.lookup(Some(3), "", "Secret", "app=web"), None, "another kind");
        assert_eq!(inventory.lookup(Some(3), "", "ConfigMap", "app!=web"), None, "not an equality");
        let later = inventory.insert(Some(4), "", "ConfigMap", Shelf::default());
        inventory.forget_stopped();
        assert_eq!(inventory.len(), 2, "both watches run");
        drop(alive);
        assert_eq!(lookup(), None, "the watch stopped");
        assert!(!inventory.watching(Some(3), "", "ConfigMap"), "the watch stopped");
        assert_eq!(inventory.holds(Some(3), "", "ConfigMap", "team-a", "b"), None, "the watch stopped");
        inventory.forget_stopped();
        assert_eq!(inventory.len(), 1, "only the running watch's store is kept");
        drop(later);
    }

    #[test]
    fn an_objects_changes_wake_only_its_own_waiters() {
        let inventory = Inventory::default();
        let meta = |ns: &str, name: &str| ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            ..Default::default()
        };
        let mut mine = inventory.changes_of(Some(3), "apps", "Deployment", "team-a", "web");
        let mut again = inventory.changes_of(Some(3), "apps", "Deployment", "team-a", "web");
        let woken = |c: &mut ObjectChanges| {
            let changed = c.rx.has_changed().unwrap();
            c.seen();
            changed
        };
        // (case, the event's shard, kind, object) → the waiters wake
        let cases = [
            ("another object of the store", Some(3), "Deployment", meta("team-a", "api"), false),
            ("the same name in another namespace", Some(3), "Deployment", meta("team-b", "web"), false),
            ("another shard's store", Some(4), "Deployment", meta("team-a", "web"), false),
            ("another kind", Some(3), "StatefulSet", meta("team-a", "web"), false),
            ("its own", Some(3), "Deployment", meta("team-a", "web"), true),
        ];
        for (case, shard, kind, m, want) in cases {
            tell(&inventory.waiting, shard, "apps", kind, &m);
            assert_eq!((woken(&mut mine), woken(&mut again)), (want, want), "{case}");
        }
        drop(mine);
        assert_eq!(inventory.waiting.lock().unwrap().len(), 1, "still waited on");
        drop(again);
        assert!(inventory.waiting.lock().unwrap().is_empty(), "no one waits");
        tell(&inventory.waiting, Some(3), "apps", "Deployment", &meta("team-a", "web"));
    }

    #[test]
    fn a_workloads_store_keeps_its_status() {
        use k8s_openapi::api::apps::v1::Deployment;
        use kube::runtime::watcher::Event;
        let shelf = Shelf::default();
        let d: WithStatus<Deployment> = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "team-a", "generation": 3},
            "spec": {"replicas": 2},
            "status": {"observedGeneration": 3, "readyReplicas": 2},
        }))
        .unwrap();
        shelf.apply(&Event::<WithStatus<Deployment>>::Init);
        shelf.apply(&Event::InitApply(d));
        shelf.apply(&Event::<WithStatus<Deployment>>::InitDone);
        let c = shelf.named("team-a", "web").unwrap().unwrap();
        assert_eq!(c.meta.generation, Some(3));
        assert_eq!(c.status.as_deref(), Some(r#"{"observedGeneration":3,"readyReplicas":2}"#));
    }

    #[test]
    fn the_application_comes_from_the_annotation() {
        let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
        assert!(owner_app(&cm).is_none());
        cm.annotations_mut().insert(names::annotations::APPLICATION.into(), "team-a/web".into());
        assert_eq!(owner_app(&cm), Some(ObjectRef::new("web").within("team-a")));
    }
}
