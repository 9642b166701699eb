//! `ksync graph`: the resource graph of an Application as a tree (default), Graphviz `dot` or
//! JSON. Pure: the graph comes in built, with the diagnosis walked on it.
//!
//! The tree lists each managed resource at the top level, in graph order, and under it what its
//! edges lead to. An object reached again (a Pod owned by a ReplicaSet and selected by a Service)
//! is expanded once and then printed as `(shown above)`; a managed resource met as a child is
//! never expanded there (it has its own entry). The diagnosis's start comes first and its path
//! is marked along the way (painted as an error, `◀` and the reason at the root cause); missing
//! objects say `missing`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::{Palette, Tone, health_name, health_tone, one_line};
use crate::api::application::{Diagnosis, ResourceRef};
use crate::api::common::HealthStatus;
use crate::api::display::{self, qualified_kind};
use crate::graph::{Graph, Node};
use crate::health;

/// What `ksync graph` shows.
pub struct GraphView<'a> {
    /// `namespace/name` of the Application.
    pub application: &'a str,
    /// The graph.
    pub graph: &'a Graph,
    /// The diagnosis walked on it, if any.
    pub diagnosis: Option<&'a Diagnosis>,
    /// The read budget was reached: some objects are left out.
    pub truncated: bool,
    /// The verdicts of the HealthChecks on the managed resources that have one (judged once,
    /// within a budget, when the graph was read: never again while it is printed).
    pub assessed: &'a BTreeMap<ResourceRef, health::Assessment>,
}

impl GraphView<'_> {
    /// The diagnosis path as node indexes, its start first (empty without a diagnosis, or when a
    /// step is not in the graph).
    pub fn path(&self) -> Vec<usize> {
        let Some(d) = self.diagnosis else { return Vec::new() };
        let nodes: Option<Vec<usize>> = std::iter::once(&d.resource)
            .chain(d.path.iter().map(|s| &s.resource))
            .map(|r| self.graph.find(r))
            .collect();
        nodes.unwrap_or_default()
    }
}

/// A node's health: missing, or the verdict on the live object of its HealthCheck if it has one,
/// else of the built-in rules.
pub fn health_of(v: &GraphView<'_>, node: &Node) -> Option<health::Assessment> {
    let live = node.live.as_ref()?;
    Some(v.assessed.get(&node.resource).cloned().unwrap_or_else(|| health::assess(live)))
}

fn status_text(v: &GraphView<'_>, node: &Node, palette: Palette) -> String {
    match health_of(v, node) {
        None => palette.paint(Tone::Bad, "missing"),
        Some(a) => palette.paint(health_tone(a.status), health_name(a.status)),
    }
}

struct Printer<'a> {
    v: &'a GraphView<'a>,
    palette: Palette,
    path: Vec<usize>,
    expanded: BTreeSet<usize>,
    out: String,
}

impl Printer<'_> {
    /// `depth`: the node's place on the diagnosis path when this occurrence is on it.
    fn label(&self, i: usize, depth: Option<usize>) -> String {
        let node = &self.v.graph.nodes[i];
        let id = display::resource(&node.resource);
        let id = if depth.is_some() { self.palette.paint(Tone::Bad, &id) } else { id };
        let mut line = format!("{id}  {}", status_text(self.v, node, self.palette));
        if let (Some(d), Some(k)) = (self.v.diagnosis, depth)
            && k + 1 == self.path.len()
        {
            line.push_str(&format!("  ◀ {}", self.palette.paint(Tone::Bad, &d.reason)));
        }
        line
    }

    fn children(&mut self, i: usize, prefix: &str, depth: Option<usize>) {
        let links: Vec<_> = self.v.graph.out(i).copied().collect();
        for (k, l) in links.iter().enumerate() {
            let last = k + 1 == links.len();
            let (branch, more) = if last { ("└── ", "    ") } else { ("├── ", "│   ") };
            let step = depth.filter(|d| self.path.get(d + 1) == Some(&l.to)).map(|d| d + 1);
            let node = &self.v.graph.nodes[l.to];
            let optional = if l.optional { " (optional)" } else { "" };
            let again = node.managed || self.expanded.contains(&l.to);
            let note = if node.managed {
                "  (managed, listed on its own)"
            } else if again {
                "  (shown above)"
            } else {
                ""
            };
            let line = format!("{prefix}{branch}{} {}{optional}{note}\n", l.edge, self.label(l.to, step));
            self.out.push_str(&line);
            if !again {
                self.expanded.insert(l.to);
                self.children(l.to, &format!("{prefix}{more}"), step);
            }
        }
    }
}

/// The tree: the diagnosis's start first, then the other managed resources in graph order.
pub fn tree(v: &GraphView<'_>, palette: Palette) -> String {
    let path = v.path();
    let mut p =
        Printer { v, palette, path, expanded: BTreeSet::new(), out: format!("Application {}\n", v.application) };
    let mut managed: Vec<usize> = (0..v.graph.nodes.len()).filter(|i| v.graph.nodes[*i].managed).collect();
    if let Some(start) = p.path.first() {
        managed.sort_by_key(|i| i != start);
    }
    if managed.is_empty() {
        p.out.push_str("  no managed resource could be read\n");
    }
    for i in managed {
        let depth = (p.path.first() == Some(&i)).then_some(0);
        let line = p.label(i, depth);
        p.out.push_str(&line);
        p.out.push('\n');
        p.expanded.insert(i);
        p.children(i, "", depth);
    }
    let mut out = p.out;
    if let Some(d) = v.diagnosis {
        out.push_str(&format!(
            "\nRoot cause: {}: {}: {}\n",
            display::resource(&d.resource),
            palette.paint(Tone::Bad, &d.reason),
            one_line(&d.message)
        ));
    }
    if v.truncated {
        out.push_str("\n(incomplete: the read budget was reached; some objects are not shown)\n");
    }
    out
}

/// Graphviz `dot`.
pub fn dot(v: &GraphView<'_>) -> String {
    let steps = v.path();
    let path: BTreeSet<usize> = steps.iter().copied().collect();
    let hot: BTreeSet<(usize, usize)> = steps.windows(2).map(|w| (w[0], w[1])).collect();
    let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let mut out = format!(
        "digraph \"{}\" {{\n  rankdir=LR;\n  node [shape=box, fontname=\"Helvetica\"];\n",
        quote(v.application)
    );
    for (i, node) in v.graph.nodes.iter().enumerate() {
        let r = &node.resource;
        let kind = qualified_kind(&r.group, &r.kind);
        let place = r.namespace.as_ref().map_or(r.name.clone(), |ns| format!("{ns}/{}", r.name));
        let (status, colour) = match health_of(v, node) {
            None => ("missing", "red"),
            Some(a) => match a.status {
                HealthStatus::Healthy => ("Healthy", "darkgreen"),
                HealthStatus::Progressing => ("Progressing", "orange"),
                HealthStatus::Degraded => ("Degraded", "red"),
                HealthStatus::Unknown => ("Unknown", "gray"),
            },
        };
        let mut style = Vec::new();
        if node.missing() {
            style.push("dashed");
        }
        if node.managed {
            style.push("bold");
        }
        let style = if style.is_empty() { String::new() } else { format!(", style=\"{}\"", style.join(",")) };
        let pen = if path.contains(&i) { ", penwidth=2" } else { "" };
        out.push_str(&format!(
            "  n{i} [label=\"{}\\n{}\\n{status}\", color=\"{colour}\"{style}{pen}];\n",
            quote(&kind),
            quote(&place)
        ));
    }
    for l in &v.graph.links {
        let extra = match (hot.contains(&(l.from, l.to)), l.optional) {
            (true, _) => ", color=\"red\", penwidth=2",
            (false, true) => ", style=\"dashed\"",
            _ => "",
        };
        out.push_str(&format!("  n{} -> n{} [label=\"{}\"{extra}];\n", l.from, l.to, l.edge));
    }
    out.push_str("}\n");
    out
}

/// JSON: the nodes (with their health), the edges by node index, the diagnosis.
pub fn json(v: &GraphView<'_>) -> Value {
    let nodes: Vec<Value> = v
        .graph
        .nodes
        .iter()
        .map(|n| {
            let a = health_of(v, n);
            let mut o = json!({"resource": n.resource, "managed": n.managed, "missing": n.missing()});
            if let Some(a) = a {
                o["health"] = json!(a.status);
                if !a.message.is_empty() {
                    o["message"] = json!(a.message);
                }
            }
            o
        })
        .collect();
    let edges: Vec<Value> = v
        .graph
        .links
        .iter()
        .map(|l| json!({"from": l.from, "to": l.to, "edge": l.edge, "optional": l.optional}))
        .collect();
    json!({
        "application": v.application,
        "nodes": nodes,
        "edges": edges,
        "diagnosis": v.diagnosis,
        "truncated": v.truncated,
    })
}
