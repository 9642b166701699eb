//! Watch streams: ADDED/MODIFIED/DELETED from a resourceVersion (history replay), the synthetic
//! ADDED events of a watch without one, label-selection transitions (an object leaving the
//! selection is DELETED with its old content and the new resourceVersion), bookmarks (including
//! the initial-events-end bookmark of streaming lists), 410 Expired for compacted history, and
//! server-side `timeoutSeconds`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::Response;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::api::{ListOptions, list_options, matches, with_type};
use crate::errors::ApiError;
use crate::negotiate::{Form, IncludeObject};
use crate::server::{Req, Target};
use crate::state::State;
use crate::store::{Change, EventType};

struct Watcher {
    sent_columns: std::sync::atomic::AtomicBool,
    state: Arc<State>,
    t: Target,
    opts: ListOptions,
    form: Form,
}

impl Watcher {
    fn visible(&self, obj: &Value) -> bool {
        matches(&self.opts, &self.t.namespace, &crate::admission::presented(&self.state, &self.t.rt, obj))
    }

    fn render(&self, kind: &str, obj: &Value) -> Option<Bytes> {
        // Converted from the stored form first: typed first, a stored core Event would be taken
        // for an events.k8s.io one and lose `regarding` and `reportingController` on the way out.
        let obj = with_type(&self.t.rt, crate::admission::present(&self.state, &self.t.rt, obj.clone()));
        let object = match &self.form {
            Form::Plain(_) => obj,
            Form::Metadata(v) => crate::negotiate::partial(&obj, v),
            Form::MetadataList(_) => return None,
            Form::Table(v) => {
                let rv = obj["metadata"]["resourceVersion"].clone();
                let mut t = crate::tables::table(
                    &self.state,
                    &self.t.rt,
                    &[obj],
                    IncludeObject::Metadata,
                    json!({"resourceVersion": rv}),
                    v,
                );
                if self.sent_columns.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    t["columnDefinitions"] = Value::Null;
                }
                t
            }
        };
        line(kind, object)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Option<Bytes> {
        if matches!(self.form, Form::MetadataList(_)) {
            return None;
        }
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line("BOOKMARK", json!({"kind": self.t.rt.kind, "apiVersion": self.t.rt.api_version(), "metadata": meta}))
    }

    /// The event a change produces for this watch, if any.
    fn event(&self, c: &Change) -> Option<Bytes> {
        if c.key != self.t.rt.key() {
            return None;
        }
        let shared = || -> Option<Bytes> {
            let cacheable = matches!(self.form, Form::Plain(crate::http::Encoding::Json))
                && !crate::admission::converts(&self.t.rt)
                && c.object["apiVersion"].as_str() == Some(self.t.rt.api_version().as_str());
            if cacheable {
                c.line.get_or_init(|| self.render(c.kind.as_str(), &c.object)).clone()
            } else {
                self.render(c.kind.as_str(), &c.object)
            }
        };
        match c.kind {
            EventType::Added => self.visible(&c.object).then(shared).flatten(),
            EventType::Deleted => self.visible(c.old.as_ref().unwrap_or(&c.object)).then(shared).flatten(),
            EventType::Modified => {
                let was = c.old.as_ref().is_some_and(|o| self.visible(o));
                let is = self.visible(&c.object);
                match (was, is) {
                    (true, true) => shared(),
                    (false, true) => self.render("ADDED", &c.object),
                    (true, false) => {
                        let mut old = c.old.clone().unwrap_or_default();
                        old["metadata"]["resourceVersion"] = c.object["metadata"]["resourceVersion"].clone();
                        self.render("DELETED", &old)
                    }
                    (false, false) => None,
                }
            }
        }
    }
}

fn line(kind: &str, object: Value) -> Option<Bytes> {
    let mut s = serde_json::to_vec(&json!({"type": kind, "object": object})).ok()?;
    s.push(b'\n');
    Some(Bytes::from(s))
}

fn expired(rv: u64, oldest: u64) -> Option<Bytes> {
    line(
        "ERROR",
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": format!("too old resource version: {rv} ({oldest})"), "reason": "Expired", "code": 410}),
    )
}

/// Serve a watch request.
pub fn serve(state: &Arc<State>, req: &Req, t: &Target) -> Result<Response<Body>, ApiError> {
    let mut opts = list_options(state, req, &t.rt)?;
    if let Some(name) = &t.name {
        let extra =
            crate::selectors::FieldSelector::parse(&format!("metadata.name={name}")).map_err(ApiError::bad_request)?;
        let mut combined = req.q("fieldSelector").unwrap_or("").to_string();
        if !combined.is_empty() {
            combined.push(',');
        }
        combined.push_str(&format!("metadata.name={name}"));
        opts.fields = crate::selectors::FieldSelector::parse(&combined).unwrap_or(extra);
    }
    let send_initial = req.q("sendInitialEvents") == Some("true");
    let rv_match = req.q("resourceVersionMatch").filter(|s| !s.is_empty());
    if send_initial && rv_match != Some("NotOlderThan") {
        return Err(ApiError::status(
            422,
            "Invalid",
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            Some(
                json!({"group": "meta.k8s.io", "kind": "ListOptions", "causes": [{"reason": "FieldValueForbidden", "message": "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan", "field": "resourceVersionMatch"}]}),
            ),
        ));
    }
    let bookmarks = req.q("allowWatchBookmarks") == Some("true");
    let timeout = req.q("timeoutSeconds").and_then(|s| s.parse::<u64>().ok()).filter(|s| *s > 0);
    let form = crate::negotiate::choose(req)?;
    let rv_param = req.q("resourceVersion").filter(|s| !s.is_empty());
    let w = Watcher { sent_columns: Default::default(), state: state.clone(), t: t.clone(), opts, form };

    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let mut initial: Vec<Bytes> = Vec::new();
    let mut sub: broadcast::Receiver<Arc<Change>>;
    let mut start_rv;
    let mut end_after_initial = false;
    {
        let txn = state.store.lock();
        let current = txn.rv();
        sub = state.store.subscribe();
        start_rv = current;
        let synthetic = match rv_param {
            None | Some("0") => true,
            Some(_) => send_initial,
        };
        if synthetic {
            for obj in txn.all(&t.rt.key()) {
                if w.visible(obj)
                    && let Some(b) = w.render("ADDED", obj)
                {
                    initial.push(b);
                }
            }
            if bookmarks && let Some(b) = w.bookmark(current, true) {
                initial.push(b);
            }
        } else if let Some(s) = rv_param {
            match s.parse::<u64>() {
                Err(_) => {
                    return Err(ApiError::status(
                        500,
                        "",
                        format!(
                            "resourceVersion: Invalid value: \"{s}\": strconv.ParseUint: parsing \"{s}\": invalid syntax"
                        ),
                        None,
                    ));
                }
                Ok(rv) if rv > current => {
                    // The real server waits for the revision; history cannot serve it here.
                    start_rv = rv;
                }
                Ok(rv) => match txn.changes_since(rv) {
                    Some(changes) => {
                        for c in changes {
                            if let Some(b) = w.event(&c) {
                                initial.push(b);
                            }
                        }
                    }
                    None => {
                        if let Some(b) = expired(rv, txn.compacted()) {
                            initial.push(b);
                        }
                        end_after_initial = true;
                    }
                },
            }
        }
    }
    let mut drops = state.faults.drop_watches.subscribe();
    let key = t.rt.key();
    tokio::spawn(async move {
        for b in initial {
            if tx.send(b).await.is_err() {
                return;
            }
        }
        if end_after_initial {
            return;
        }
        let deadline = timeout.map(|s| tokio::time::Instant::now() + Duration::from_secs(s));
        let bookmark_at = deadline
            .map(|d| d - Duration::from_millis(1500))
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(60));
        let mut bookmark_sent = false;
        let mut last_rv = start_rv;
        loop {
            let sleep_until = if bookmarks && !bookmark_sent {
                bookmark_at
            } else {
                deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600))
            };
            tokio::select! {
                _ = tx.closed() => return,
                d = drops.recv() => {
                    if d.ok().flatten().is_none_or(|k| k == key) {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(sleep_until) => {
                    if bookmarks && !bookmark_sent {
                        bookmark_sent = true;
                        let rv = w.state.store.lock().rv().max(last_rv);
                        if let Some(b) = w.bookmark(rv, false)
                            && tx.send(b).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    return;
                }
                msg = sub.recv() => match msg {
                    Ok(c) => {
                        if c.rv <= last_rv { continue; }
                        last_rv = c.rv;
                        if let Some(b) = w.event(&c)
                            && tx.send(b).await.is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        if let Some(b) = expired(last_rv, last_rv) {
                            let _ = tx.send(b).await;
                        }
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<Bytes, std::io::Error>(b), rx))
    });
    Ok(Response::builder()
        .status(200)
        .header("Content-Type", "application/json")
        .body(Body::from_stream(stream))
        .expect("response"))
}
