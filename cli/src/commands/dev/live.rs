//! Following the quickstart live: watches on the Repository, Applications and Revisions of the
//! example's namespace keep a [`World`]; each event is turned into log lines by the pure
//! [`changes`], and [`converged`] says when every Application is Synced and Healthy.

use std::collections::BTreeMap;

use futures_util::stream::{BoxStream, StreamExt};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use kuvryn_sync::api::{Application, Repository, Revision};

use crate::view::dev::{Line, World, changes, converged};

/// The objects of one kind, kept from a watch (a relist replaces them at its end).
struct Mirror<K> {
    items: BTreeMap<String, K>,
    pending: Option<BTreeMap<String, K>>,
}

impl<K: kube::Resource + Clone> Mirror<K> {
    fn new() -> Self {
        Mirror { items: BTreeMap::new(), pending: None }
    }

    fn apply(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Init => self.pending = Some(BTreeMap::new()),
            watcher::Event::InitApply(o) => {
                self.pending.get_or_insert_with(BTreeMap::new).insert(o.name_any(), o);
            }
            watcher::Event::InitDone => self.items = self.pending.take().unwrap_or_default(),
            watcher::Event::Apply(o) => {
                self.items.insert(o.name_any(), o);
            }
            watcher::Event::Delete(o) => {
                self.items.remove(&o.name_any());
            }
        }
    }
}

/// One watch event of any of the three kinds.
pub enum Event {
    /// The Repository.
    Repository(watcher::Result<watcher::Event<Repository>>),
    /// An Application.
    Application(watcher::Result<watcher::Event<Application>>),
    /// A Revision.
    Revision(watcher::Result<watcher::Event<Revision>>),
}

/// The three watches, merged.
pub fn events(client: &kube::Client, namespace: &str) -> BoxStream<'static, Event> {
    let config = watcher::Config::default;
    let repos = watcher(Api::<Repository>::namespaced(client.clone(), namespace), config())
        .default_backoff()
        .map(Event::Repository)
        .boxed();
    let apps = watcher(Api::<Application>::namespaced(client.clone(), namespace), config())
        .default_backoff()
        .map(Event::Application)
        .boxed();
    let revisions = watcher(Api::<Revision>::namespaced(client.clone(), namespace), config())
        .default_backoff()
        .map(Event::Revision)
        .boxed();
    futures_util::stream::select_all([repos, apps, revisions]).boxed()
}

/// Everything every Application reached at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Converged {
    /// The commit.
    pub commit: String,
    /// How many Applications.
    pub count: usize,
    /// Whether this commit was announced before (everything is back after a drift or a
    /// degradation).
    pub again: bool,
    /// Whether this is the first time since start.
    pub first: bool,
}

/// What one event changed.
#[derive(Debug, Default)]
pub struct Update {
    /// Lines for the log.
    pub lines: Vec<Line>,
    /// Set when every Application just became Synced and Healthy.
    pub converged: Option<Converged>,
    /// A watch error to report.
    pub error: Option<String>,
}

/// The live state.
pub struct Live {
    repositories: Mirror<Repository>,
    apps: Mirror<Application>,
    revisions: Mirror<Revision>,
    /// The Repository followed.
    repository: String,
    /// What the log last described.
    pub world: World,
    /// The commit last announced as converged.
    announced: Option<String>,
    /// Whether the world is converged now.
    converged: bool,
}

impl Live {
    /// Nothing seen yet; `repository` is the Repository followed.
    pub fn new(repository: &str) -> Live {
        Live {
            repositories: Mirror::new(),
            apps: Mirror::new(),
            revisions: Mirror::new(),
            repository: repository.to_string(),
            world: World::default(),
            announced: None,
            converged: false,
        }
    }

    /// Take in one event.
    pub fn on_event(&mut self, event: Event) -> Update {
        let error = match event {
            Event::Repository(Ok(e)) => {
                self.repositories.apply(e);
                None
            }
            Event::Application(Ok(e)) => {
                self.apps.apply(e);
                None
            }
            Event::Revision(Ok(e)) => {
                self.revisions.apply(e);
                None
            }
            Event::Repository(Err(e)) | Event::Application(Err(e)) | Event::Revision(Err(e)) => Some(e.to_string()),
        };
        let next = World {
            repository: self.repositories.items.get(&self.repository).cloned(),
            apps: self.apps.items.clone(),
            revisions: self.revisions.items.clone(),
        };
        let lines = changes(&self.world, &next);
        self.world = next;
        let now = converged(&self.world);
        let mut update = Update { lines, converged: None, error };
        match now {
            Some((commit, count)) if !self.converged || self.announced.as_deref() != Some(commit.as_str()) => {
                self.converged = true;
                let again = self.announced.as_deref() == Some(commit.as_str());
                let first = self.announced.is_none();
                self.announced = Some(commit.clone());
                update.converged = Some(Converged { commit, count, again, first });
            }
            Some(_) => {}
            None => self.converged = false,
        }
        update
    }
}
