//! The resource graph page (`/applications/{ns}/{name}/graph`): the graph `ksync graph` prints,
//! drawn as inline SVG. Layered from left to right: the managed resources first, then each
//! object in the column of its shortest distance from them. Nodes are boxes (kind, name,
//! health, coloured by health; dashed when missing, a thicker frame when managed); edges are
//! arrows labelled with their kind. The diagnosis path is drawn in red with thick frames and
//! arrows, and its last node is labelled as the root cause with the reason.

use std::fmt::Write as _;

use super::{app_href, escape, page};
use crate::api::common::HealthStatus;
use crate::api::display::{self, qualified_kind};
use crate::view::graph::{GraphView, health_of, tree};
use crate::view::{Palette, one_line};

const BOX_W: usize = 185;
const BOX_H: usize = 58;
const COL_W: usize = 240;
const ROW_H: usize = 92;
const MARGIN: usize = 20;
/// Characters of a name shown in a box (the full name is in its tooltip).
const NAME_CHARS: usize = 24;

/// Each node's column: 0 for the nodes no edge leads to (the managed resources at the top, a
/// Service), else one more than the deepest node with an edge to it (the longest path), so
/// that an owner is always left of what it owns. Cycles (not expected) are cut after as many
/// rounds as there are nodes.
pub fn layers(v: &GraphView<'_>) -> Vec<usize> {
    let n = v.graph.nodes.len();
    let mut layer = vec![0usize; n];
    for _ in 0..n {
        let mut changed = false;
        for l in &v.graph.links {
            if l.from != l.to && layer[l.to] < layer[l.from] + 1 && layer[l.from] + 1 < n {
                layer[l.to] = layer[l.from] + 1;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    layer
}

/// The order of the nodes within each column: the diagnosis path first, then by the mean row
/// of the nodes with an edge to them (fewer crossings), then in graph order.
fn rows_of(v: &GraphView<'_>, layer: &[usize], path: &[usize]) -> Vec<usize> {
    let n = v.graph.nodes.len();
    let columns = layer.iter().max().map_or(0, |m| m + 1);
    let mut row = vec![0usize; n];
    for c in 0..columns {
        let mut members: Vec<usize> = (0..n).filter(|i| layer[*i] == c).collect();
        let weight = |i: usize| {
            let from: Vec<usize> =
                v.graph.links.iter().filter(|l| l.to == i && layer[l.from] < c).map(|l| row[l.from]).collect();
            if from.is_empty() { usize::MAX } else { from.iter().sum::<usize>() * 16 / from.len() }
        };
        members.sort_by_key(|i| (!path.contains(i), weight(*i), *i));
        for (r, i) in members.into_iter().enumerate() {
            row[i] = r;
        }
    }
    row
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

/// The SVG: one `<g class="node ...">` per node (`on-path` on the diagnosis path,
/// `root-cause` at its end, with `data-` attributes naming the node), one line per edge
/// (`hot` on the path).
pub fn svg(v: &GraphView<'_>) -> String {
    let path = v.path();
    let hot: Vec<(usize, usize)> = path.windows(2).map(|w| (w[0], w[1])).collect();
    let layer = layers(v);
    let row = rows_of(v, &layer, &path);
    let columns = layer.iter().max().map_or(1, |m| m + 1);
    let place: Vec<(usize, usize)> =
        (0..v.graph.nodes.len()).map(|i| (MARGIN + layer[i] * COL_W, MARGIN + row[i] * ROW_H)).collect();
    // Room on the right for the root-cause label under the last column.
    let width = MARGIN * 2 + (columns - 1) * COL_W + BOX_W + 60;
    let height = MARGIN * 2 + (row.iter().max().map_or(0, |m| m + 1)).max(1) * ROW_H;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"graph\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"resource graph of {}\">\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"9\" markerHeight=\"9\" markerUnits=\"userSpaceOnUse\" orient=\"auto\">\
         <path d=\"M0,0 L10,5 L0,10 z\" fill=\"#7a8594\"/></marker>\
         <marker id=\"arrow-hot\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"9\" markerHeight=\"9\" markerUnits=\"userSpaceOnUse\" orient=\"auto\">\
         <path d=\"M0,0 L10,5 L0,10 z\" fill=\"#c62828\"/></marker></defs>",
        escape(v.application)
    );
    for l in &v.graph.links {
        let (fx, fy) = place[l.from];
        let (tx, ty) = place[l.to];
        let (x1, y1) = (fx + BOX_W, fy + BOX_H / 2);
        let (x2, y2) = if tx > fx { (tx, ty + BOX_H / 2) } else { (tx + BOX_W / 2, ty) };
        let is_hot = hot.contains(&(l.from, l.to));
        let class = match (is_hot, l.optional) {
            (true, _) => "edge hot",
            (false, true) => "edge optional",
            _ => "edge",
        };
        let marker = if is_hot { "arrow-hot" } else { "arrow" };
        let _ = write!(
            out,
            "<g class=\"{class}\"><line x1=\"{x1}\" y1=\"{y1}\" x2=\"{x2}\" y2=\"{y2}\" marker-end=\"url(#{marker})\"/>\
             <text x=\"{lx}\" y=\"{ly}\">{edge}</text></g>",
            lx = (x1 + 2 * x2) / 3,
            ly = (y1 + 2 * y2) / 3 - 4,
            edge = escape(&l.edge.to_string()),
        );
    }
    for (i, node) in v.graph.nodes.iter().enumerate() {
        let (x, y) = place[i];
        let r = &node.resource;
        let assessment = health_of(v, node);
        let health = match &assessment {
            None => "missing",
            Some(a) => match a.status {
                HealthStatus::Healthy => "Healthy",
                HealthStatus::Progressing => "Progressing",
                HealthStatus::Degraded => "Degraded",
                HealthStatus::Unknown => "Unknown",
            },
        };
        let on_path = path.contains(&i);
        let root = on_path && path.last() == Some(&i);
        let mut class = format!("node h-{}", health.to_lowercase());
        for (yes, c) in
            [(on_path, " on-path"), (root, " root-cause"), (node.managed, " managed"), (node.missing(), " missing")]
        {
            if yes {
                class.push_str(c);
            }
        }
        let kind = qualified_kind(&r.group, &r.kind);
        let mut tip = display::resource(r);
        if let Some(a) = assessment.as_ref().filter(|a| !a.message.is_empty()) {
            tip.push_str(&format!(": {}", one_line(&a.message)));
        }
        let _ = write!(
            out,
            "<g class=\"{class}\" data-kind=\"{kind_e}\" data-namespace=\"{ns}\" data-name=\"{name_e}\" data-health=\"{health}\" \
             data-on-path=\"{on_path}\" data-root-cause=\"{root}\"><title>{tip}</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{BOX_W}\" height=\"{BOX_H}\" rx=\"6\"/>\
             <text class=\"kind\" x=\"{tx}\" y=\"{y1}\">{kind_e}</text>\
             <text class=\"name\" x=\"{tx}\" y=\"{y2}\">{short}</text>\
             <text class=\"health\" x=\"{tx}\" y=\"{y3}\">{health}</text>",
            kind_e = escape(&kind),
            ns = escape(r.namespace.as_deref().unwrap_or("")),
            name_e = escape(&r.name),
            tip = escape(&tip),
            tx = x + 10,
            y1 = y + 17,
            y2 = y + 34,
            y3 = y + 51,
            short = escape(&shorten(&r.name, NAME_CHARS)),
        );
        if root && let Some(d) = v.diagnosis {
            let _ = write!(
                out,
                "<text class=\"root-label\" x=\"{x}\" y=\"{ly}\">▲ root cause: {}</text>",
                escape(&shorten(&d.reason, 40)),
                ly = y + BOX_H + 16,
            );
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out
}

/// The whole page: the root cause in words, the SVG, a legend, and the tree of `ksync graph`.
pub fn render(v: &GraphView<'_>, namespace: &str, name: &str) -> String {
    let mut body = format!(
        "<p class=\"crumbs\"><a href=\"/\">Applications</a> / <a href=\"{href}\">{ns}/{n}</a></p>\
         <h1>Resource graph of {n}</h1>",
        href = escape(&app_href(namespace, name)),
        ns = escape(namespace),
        n = escape(name),
    );
    match v.diagnosis {
        Some(d) => {
            let _ = write!(
                body,
                "<p class=\"rootcause\" id=\"root-cause\">Root cause: <strong>{}</strong>: <span class=\"bad\">{}</span>: {}</p>",
                escape(&display::resource(&d.resource)),
                escape(&d.reason),
                escape(&one_line(&d.message))
            );
        }
        None => body.push_str("<p class=\"dim\">No diagnosis: every managed resource that could be read is Healthy, or nothing was traced.</p>"),
    }
    if v.graph.nodes.is_empty() {
        body.push_str("<p class=\"dim\">No managed resource could be read.</p>");
    } else {
        let _ = write!(body, "<div class=\"graph\">{}</div>", svg(v));
    }
    body.push_str(
        "<p class=\"legend\"><span class=\"badge good\">Healthy</span> <span class=\"badge warn\">Progressing</span> \
         <span class=\"badge bad\">Degraded / missing</span> <span class=\"badge dim\">Unknown</span> · \
         red arrows and frames: the diagnosis path · dashed: missing · thick frame: managed by the Application</p>",
    );
    if v.truncated {
        body.push_str("<p class=\"warn\">Incomplete: the read budget was reached; some objects are not shown.</p>");
    }
    let _ = write!(
        body,
        "<details><summary>As text (ksync graph)</summary><pre>{}</pre></details>",
        escape(&tree(v, Palette::PLAIN))
    );
    page(&format!("graph of {namespace}/{name}"), &body, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::application::{Diagnosis, DiagnosisStep, ResourceRef};
    use crate::graph::{Edge, Graph, Link, Node};
    use serde_json::json;

    fn r(group: &str, kind: &str, name: &str) -> ResourceRef {
        ResourceRef { group: group.into(), kind: kind.into(), namespace: Some("team-a".into()), name: name.into() }
    }

    #[test]
    fn the_diagnosis_path_is_marked_and_names_are_escaped() {
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team-a", "generation": 1},
            "spec": {"replicas": 1}, "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 0,
            "conditions": [{"type": "Available", "status": "False"}]}});
        // A missing ConfigMap with a hostile name, mounted by the Deployment.
        let cm = r("", "ConfigMap", "<script>alert(1)</script>");
        let g = Graph {
            nodes: vec![
                Node { resource: cm.clone(), live: None, managed: false },
                Node { resource: r("apps", "Deployment", "web"), live: Some(deploy), managed: true },
            ],
            links: vec![Link { from: 1, edge: Edge::Mounts, to: 0, optional: false }],
        };
        let to = 0;
        let d = Diagnosis {
            resource: r("apps", "Deployment", "web"),
            reason: "MissingConfigMap".into(),
            message: "ConfigMap <script> does not exist".into(),
            path: vec![DiagnosisStep { edge: "Mounts".into(), resource: cm.clone(), missing: true }],
        };
        let v = GraphView {
            application: "team-a/web",
            graph: &g,
            diagnosis: Some(&d),
            truncated: false,
            assessed: &Default::default(),
        };
        let s = svg(&v);
        assert!(!s.contains("<script>"), "{s}");
        assert_eq!(layers(&v)[to], 1);
        assert!(s.contains("class=\"node h-missing on-path root-cause missing\""), "{s}");
        assert!(s.contains("data-name=\"&lt;script&gt;alert(1)&lt;/script&gt;\""), "{s}");
        assert!(s.contains("root cause: MissingConfigMap"), "{s}");
        assert!(s.contains("class=\"edge hot\""), "{s}");
        let p = render(&v, "team-a", "web");
        assert!(!p.contains("<script>alert"), "{p}");
        assert!(p.contains("id=\"root-cause\""));
    }
}
