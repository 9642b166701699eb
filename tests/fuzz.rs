//! Fuzz harness (issue 18): what a tenant writes and the controller parses, and the plan built
//! from it, over hostile input. For every input: no panic (a stack overflow or an abort fails the
//! whole binary), an error with a message or a result, the same result twice, and bounded
//! memory (decoded text within `render::MAX_DECODED_TEXT_BYTES`; the alias bombs run in a child
//! process under `ulimit -v`).
//!
//! - `.ksync.yaml` parsing: `source::discovery::parse_file` and `parse_all`;
//! - manifest decoding: `yaml::from_str_multiple` + `render::objects_of` (Helm and Kustomize
//!   output) and `render::plain::render` over files on disk (YAML, JSON, invalid UTF-8);
//! - plan building: `plan::validate::validate`, `plan::build`, `plan::revision::desired_state_hash`
//!   and `plan::revision::stored` over arbitrary desired, live and managed objects.
//!
//! Inputs are structured YAML (nesting, anchors and aliases, tags, multi-document streams,
//! duplicate keys, numbers at the edges, huge strings), bombs, and mutations of the real examples
//! in `examples/` and `testdata/`. 256 cases per property with a fixed seed, nothing written to
//! disk on failure; `PROPTEST_CASES` and `PROPTEST_RNG_SEED` override (docs/development.md).

use std::collections::BTreeMap;

use kuvryn_sync::api::application::Destination;
use kuvryn_sync::api::common::GroupKind;
use kuvryn_sync::plan::{self, Conflict, Inputs, revision, validate};
use kuvryn_sync::render;
use kuvryn_sync::source::discovery;
use kuvryn_sync::yaml;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use serde_json::{Value, json};

fn config() -> ProptestConfig {
    // `default()` reads PROPTEST_CASES and PROPTEST_RNG_SEED; only fill in what is unset.
    let mut config = ProptestConfig { failure_persistence: None, ..ProptestConfig::default() };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 256;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(18);
    }
    config
}

// ---------------------------------------------------------------------------------------------
// Corpus: the real examples, mutated.

const CORPUS: &[&str] = &[
    include_str!("../examples/quickstart/.ksync.yaml"),
    include_str!("../examples/quickstart/apps/web/deployment.yaml"),
    include_str!("../examples/quickstart/apps/web/configmap.yaml"),
    include_str!("../examples/quickstart/apps/web/service.yaml"),
    include_str!("../examples/quickstart/apps/api/kustomization.yaml"),
    include_str!("../examples/quickstart/apps/api/base/deployment.yaml"),
    include_str!("../examples/quickstart/apps/greeter/values.yaml"),
    include_str!("../examples/quickstart/apps/greeter/templates/deployment.yaml"),
    include_str!("../testdata/render/plain/a.yaml"),
    include_str!("../testdata/render/plain/z.json"),
    include_str!("../testdata/render/plain/nested/list.yml"),
    include_str!("../testdata/api/application-full.yaml"),
    include_str!("../testdata/api/repository-full.yaml"),
    include_str!("../testdata/plan/plan.yaml"),
];

/// `.ksync.yaml` files that parse.
const KSYNC_VALID: &[&str] = &[
    include_str!("../examples/quickstart/.ksync.yaml"),
    "applications: []\n",
    "apiVersion: sync.kuvryn.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  labels: {tier: front}\n  annotations: {a: b}\nspec:\n  source: {path: apps/web}\n  serviceAccountName: deployer\n  destination: {namespace: web, allowedNamespaces: [web-*], clusterResources: [{group: '', kind: Namespace}]}\n",
];

/// Tokens that mean something to YAML, inserted by mutations.
const TOKENS: &[&str] = &[
    ":",
    ": ",
    "- ",
    "\n",
    "  ",
    "\t",
    "&a ",
    "*a",
    "&b [*a, *a]",
    "<<: *a\n",
    "!!str ",
    "!!binary ",
    "!!int ",
    "!custom ",
    "!<tag:x> ",
    "%YAML 1.2\n---\n",
    "%TAG ! tag:x,2000:\n---\n",
    "---\n",
    "...\n",
    "{",
    "}",
    "[",
    "]",
    ",",
    "#",
    "'",
    "\"",
    "\\",
    "|",
    ">-",
    "? ",
    "~",
    "\u{feff}",
    "\0",
    "\u{85}",
    "\u{2028}",
    "é",
    "😀",
    "apiVersion: ",
    "kind: List\nitems: ",
    "metadata: {name: x}",
    "applications:\n",
    "9223372036854775808",
    "-9223372036854775809",
    "1e309",
    ".nan",
    "0x",
    "0o9",
];

#[derive(Clone, Debug)]
enum Mutation {
    Insert(usize, String),
    Delete(usize, usize),
    Duplicate(usize, usize),
    Truncate(usize),
    Bytes(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let token = prop_oneof![
        4 => proptest::sample::select(TOKENS).prop_map(str::to_string),
        1 => ".{0,12}",
    ];
    prop_oneof![
        4 => (any::<usize>(), token).prop_map(|(p, t)| Mutation::Insert(p, t)),
        2 => (any::<usize>(), 0..64usize).prop_map(|(p, n)| Mutation::Delete(p, n)),
        1 => (any::<usize>(), 0..256usize).prop_map(|(p, n)| Mutation::Duplicate(p, n)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..4)).prop_map(|(p, b)| Mutation::Bytes(p, b)),
    ]
}

fn mutate(base: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut b = base.to_vec();
    for m in mutations {
        let at = |p: usize, len: usize| p % (len + 1);
        match m {
            Mutation::Insert(p, t) => {
                let p = at(*p, b.len());
                b.splice(p..p, t.bytes());
            }
            Mutation::Delete(p, n) => {
                let p = at(*p, b.len());
                let end = (p + n).min(b.len());
                b.drain(p..end);
            }
            Mutation::Duplicate(p, n) => {
                let p = at(*p, b.len());
                let end = (p + n).min(b.len());
                let copy = b[p..end].to_vec();
                b.splice(end..end, copy);
            }
            Mutation::Truncate(p) => b.truncate(at(*p, b.len())),
            Mutation::Bytes(p, bytes) => {
                let p = at(*p, b.len());
                b.splice(p..p, bytes.iter().copied());
            }
        }
    }
    b
}

fn mutated(corpus: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    (proptest::sample::select(corpus), proptest::collection::vec(mutation(), 0..6))
        .prop_map(|(base, ms)| mutate(base.as_bytes(), &ms))
}

/// Valid YAML of odd shape: a file parsed, a few of its values replaced by arbitrary ones (or
/// a field added or dropped), written back.
fn edited(corpus: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    let edit = (any::<u64>(), tree(), 0u8..3);
    (proptest::sample::select(corpus), proptest::collection::vec(edit, 1..4)).prop_map(|(base, edits)| {
        let mut v: Value = yaml::from_str(base).unwrap();
        for (pick, with, op) in edits {
            edit_at(&mut v, pick, with, op);
        }
        yaml::to_string(&v).unwrap_or_default().into_bytes()
    })
}

/// Walk down from `v` by the digits of `pick`, then replace the value there (op 0), add a field
/// `extra` (1) or drop its first field (2).
fn edit_at(v: &mut Value, mut pick: u64, with: Value, op: u8) {
    let mut cur = v;
    loop {
        let n = match &*cur {
            Value::Object(m) => m.len(),
            Value::Array(a) => a.len(),
            _ => 0,
        };
        if n == 0 || pick.is_multiple_of(5) {
            break;
        }
        let i = (pick / 5) as usize % n;
        pick /= 11;
        cur = match cur {
            Value::Object(m) => m.values_mut().nth(i).unwrap(),
            Value::Array(a) => &mut a[i],
            _ => unreachable!(),
        };
    }
    match (op, cur) {
        (1, Value::Object(m)) => {
            m.insert("extra".into(), with);
        }
        (2, Value::Object(m)) => {
            if let Some(k) = m.keys().next().cloned() {
                m.remove(&k);
            }
        }
        (_, cur) => *cur = with,
    }
}

// ---------------------------------------------------------------------------------------------
// Structured YAML.

#[derive(Clone, Debug)]
enum Node {
    Scalar(String),
    Seq(Vec<Node>, bool),
    Map(Vec<(String, Node)>, bool),
    Anchor(&'static str, Box<Node>),
    Alias(&'static str),
    Tagged(&'static str, Box<Node>),
    Merge(&'static str),
}

fn scalar() -> impl Strategy<Value = String> {
    let edge = proptest::sample::select(vec![
        "~",
        "null",
        "Null",
        "true",
        "yes",
        "on",
        "0",
        "-0",
        "+12",
        "0x7fffffffffffffff",
        "0xffffffffffffffffff",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "340282366920938463463374607431768211456",
        "1e308",
        "1e309",
        "-1e309",
        "1e-400",
        ".nan",
        ".inf",
        "-.inf",
        "0o777",
        "0b101",
        "1_000",
        "0.",
        ".5",
        "'quoted ''single'''",
        "\"\\u0000\\U0001F600\\x41\"",
        "\"\\ud800\"",
        "\"\\q\"",
        "\"unterminated",
        "|\n  literal\n",
        ">-\n  folded\n",
        "",
        "''",
        "\"\"",
        "a: b",
        "- x",
        "@reserved",
        "`tick",
        "%",
        "*undefined",
        "&",
        "!",
        "? ",
        "#comment",
    ])
    .prop_map(str::to_string);
    prop_oneof![
        6 => "[a-zA-Z0-9 _./-]{0,16}",
        3 => edge,
        2 => any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap_or_default()),
        1 => (1usize..300_000).prop_map(|n| format!("\"{}\"", "x".repeat(n))),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => any::<f64>().prop_map(|n| n.to_string()),
    ]
}

fn key() -> impl Strategy<Value = String> {
    // A small alphabet: duplicate keys happen.
    prop_oneof![
        8 => proptest::sample::select(vec!["a", "b", "name", "kind", "apiVersion", "metadata", "spec", "items",
            "applications", "1", "null", "~", "true", "? [x]", "\"q\"", "'s'", "k:", "-"]).prop_map(str::to_string),
        1 => "[a-z]{1,8}",
    ]
}

fn node() -> impl Strategy<Value = Node> {
    const ANCHORS: &[&str] = &["a", "b", "c"];
    let leaf = prop_oneof![
        6 => scalar().prop_map(Node::Scalar),
        1 => proptest::sample::select(ANCHORS).prop_map(Node::Alias),
    ];
    leaf.prop_recursive(8, 96, 8, |inner| {
        prop_oneof![
            3 => (proptest::collection::vec(inner.clone(), 0..8), any::<bool>()).prop_map(|(v, f)| Node::Seq(v, f)),
            4 => (proptest::collection::vec((key(), inner.clone()), 0..8), any::<bool>())
                .prop_map(|(v, f)| Node::Map(v, f)),
            2 => (proptest::sample::select(ANCHORS), inner.clone()).prop_map(|(a, n)| Node::Anchor(a, Box::new(n))),
            1 => (proptest::sample::select(vec!["!!str", "!!map", "!!seq", "!!int", "!!binary", "!custom", "!!set", "!!omap"]), inner)
                .prop_map(|(t, n)| Node::Tagged(t, Box::new(n))),
            1 => proptest::sample::select(ANCHORS).prop_map(Node::Merge),
        ]
    })
}

/// Render `n` as YAML: block style unless asked for flow (or inside flow, where block is
/// invalid anyway).
fn render(n: &Node, indent: usize, flow: bool, out: &mut String) {
    let pad = " ".repeat(indent);
    match n {
        Node::Scalar(s) => out.push_str(s),
        Node::Alias(a) => out.push_str(&format!("*{a}")),
        Node::Anchor(a, inner) => {
            out.push_str(&format!("&{a} "));
            render(inner, indent, flow, out);
        }
        Node::Tagged(t, inner) => {
            out.push_str(&format!("{t} "));
            render(inner, indent, flow, out);
        }
        Node::Merge(a) => out.push_str(&format!("{{<<: *{a}}}")),
        Node::Seq(items, f) if *f || flow || items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render(item, indent, true, out);
            }
            out.push(']');
        }
        Node::Seq(items, _) => {
            for item in items {
                out.push_str(&format!("\n{pad}- "));
                render(item, indent + 2, false, out);
            }
        }
        Node::Map(entries, f) if *f || flow || entries.is_empty() => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&format!("{k}: "));
                render(v, indent, true, out);
            }
            out.push('}');
        }
        Node::Map(entries, _) => {
            for (k, v) in entries {
                out.push_str(&format!("\n{pad}{k}: "));
                render(v, indent + 2, false, out);
            }
        }
    }
}

fn structured() -> impl Strategy<Value = String> {
    let prefix = proptest::sample::select(vec!["", "", "", "---\n", "%YAML 1.2\n---\n", "--- !custom\n", "\u{feff}"]);
    let separator = proptest::sample::select(vec!["\n---\n", "\n...\n---\n", "\n--- |\n  x\n---\n", "\n"]);
    (prefix, proptest::collection::vec(node(), 1..4), separator).prop_map(|(prefix, docs, sep)| {
        let mut out = prefix.to_string();
        for (i, d) in docs.iter().enumerate() {
            if i > 0 {
                out.push_str(sep);
            }
            render(d, 0, false, &mut out);
        }
        out.push('\n');
        out
    })
}

/// Inputs built to exhaust a parser: alias bombs of containers and of text, deep nesting.
fn bombs() -> impl Strategy<Value = String> {
    prop_oneof![
        // At most 100,000 expansions: the parser's limit (1,000,000 replayed events) takes seconds
        // to reach in a debug build; the tests in src/yaml.rs and below go past it.
        (1u32..14, 2usize..12).prop_map(|(levels, fanout)| {
            let levels = (1..=levels).take_while(|l| fanout.pow(*l) <= 100_000).count().max(1);
            let mut s = format!("a0: &a0 [{}]\n", vec!["lol"; fanout].join(", "));
            for i in 1..levels {
                s.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); fanout].join(", ")));
            }
            s
        }),
        // Up to 77 MiB of repeated text: the parser's 64 MiB budget is reached at times.
        (1usize..65_536, 1usize..1_200).prop_map(|(size, aliases)| {
            let mut s = format!("big: &big {}\n", "x".repeat(size));
            for i in 0..aliases / 10 + 1 {
                s.push_str(&format!("a{i}: &a{i} y\n"));
            }
            s + "list: [" + &"*big, ".repeat(aliases) + "]\n"
        }),
        (1usize..150_000, proptest::sample::select(vec!["[", "{a: ", "- ", "{", "[{", "? "]))
            .prop_map(|(n, open)| open.repeat(n)),
        (1usize..100_000).prop_map(|n| format!("{}x{}", "[".repeat(n), "]".repeat(n))),
        (1usize..2_000).prop_map(|n| (0..n).map(|i| format!("{}k:\n", " ".repeat(i))).collect()),
        (1usize..20_000).prop_map(|n| "---\n".repeat(n)),
        (1usize..50_000).prop_map(|n| "- &x [*x]\n".repeat(n)),
    ]
}

fn yaml_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => structured(),
        4 => mutated(CORPUS).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        1 => bombs(),
        1 => any::<String>(),
    ]
}

fn text_bytes(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(text_bytes).sum(),
        Value::Object(m) => m.iter().map(|(k, v)| k.len() + text_bytes(v)).sum(),
        _ => 0,
    }
}

fn decode(text: &str) -> Result<Vec<Value>, String> {
    let docs: Vec<Value> = yaml::from_str_multiple(text).map_err(|e| e.to_string())?;
    render::objects_of(docs, "fuzz").map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(config())]

    /// Manifest decoding as for Helm and Kustomize output: objects, or an error with a message;
    /// the same twice; never more text than the input plus the alias allowance.
    #[test]
    fn manifest_decoding(text in yaml_text()) {
        let first = decode(&text);
        match &first {
            Ok(objects) => {
                prop_assert!(objects.iter().all(Value::is_object));
                let bytes: usize = objects.iter().map(text_bytes).sum();
                prop_assert!(bytes <= render::MAX_DECODED_TEXT_BYTES, "{bytes} bytes of text");
            }
            Err(e) => prop_assert!(!e.trim().is_empty()),
        }
        prop_assert_eq!(&first, &decode(&text));
        // One document, as `.ksync.yaml` and values files are read.
        match yaml::from_str::<Value>(&text) {
            Ok(v) => prop_assert!(text_bytes(&v) <= render::MAX_DECODED_TEXT_BYTES),
            Err(e) => prop_assert!(!e.to_string().trim().is_empty()),
        }
    }

    /// The plain renderer over files on disk: YAML, JSON and bytes that are not UTF-8.
    #[test]
    fn plain_render(yaml_file in yaml_text(), json_file in prop_oneof![
        mutated(CORPUS),
        (1usize..200_000).prop_map(|n| "[".repeat(n).into_bytes()),
        any::<Vec<u8>>(),
    ]) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), &yaml_file).unwrap();
        std::fs::write(dir.path().join("b.json"), &json_file).unwrap();
        let limits = render::Limits::default();
        let first = render::plain::render(dir.path(), &limits);
        if let Err(e) = &first {
            prop_assert!(!e.to_string().trim().is_empty());
        }
        prop_assert_eq!(first, render::plain::render(dir.path(), &limits));
    }

    /// `.ksync.yaml`: Applications with valid names, or an error naming the file with a message.
    #[test]
    fn ksync_yaml(content in prop_oneof![
        3 => edited(KSYNC_VALID),
        2 => mutated(KSYNC_VALID),
        1 => mutated(CORPUS),
        2 => structured().prop_map(String::into_bytes),
        1 => bombs().prop_map(String::into_bytes),
        1 => any::<Vec<u8>>(),
    ]) {
        let first = discovery::parse_file("teams/a/.ksync.yaml", &content, "team-a", "platform");
        match &first {
            Ok(apps) => {
                for app in apps {
                    prop_assert!(!app.name.is_empty() && app.name.len() <= 63, "{:?}", app.name);
                    prop_assert_eq!(&app.file, "teams/a/.ksync.yaml");
                    prop_assert!(app.spec.is_object());
                }
            }
            Err(e) => {
                prop_assert_eq!(&e.file, "teams/a/.ksync.yaml");
                prop_assert!(!e.message.trim().is_empty());
            }
        }
        prop_assert_eq!(&first, &discovery::parse_file("teams/a/.ksync.yaml", &content, "team-a", "platform"));
        // The same file twice: a declared name is declared twice.
        let files = vec![("a/.ksync.yaml".to_string(), content.clone()), ("b/.ksync.yaml".to_string(), content)];
        let all = discovery::parse_all(&files, "team-a", "platform");
        match (&first, all) {
            (Ok(apps), Err(e)) => {
                prop_assert!(!apps.is_empty(), "{e}");
                prop_assert!(e.message.contains("declared twice"), "{e}");
            }
            (Ok(apps), Ok(all)) => prop_assert!(apps.is_empty() && all.is_empty()),
            (Err(_), Err(e)) => prop_assert!(!e.message.trim().is_empty()),
            (Err(e), Ok(_)) => prop_assert!(false, "parse_all accepted what parse_file refused: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Plan building.

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[a-z0-9]{0,6}".prop_map(Value::from),
        ".{0,24}".prop_map(Value::from),
        (1usize..2_000).prop_map(|n| Value::from("v".repeat(n))),
    ]
}

fn tree() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 64, 6, |inner| {
        let name = prop_oneof![
            4 => proptest::sample::select(vec!["a", "b", "app", ""]).prop_map(Value::from),
            1 => leaf(),
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(
                proptest::sample::select(vec![
                    "a",
                    "b",
                    "name",
                    "image",
                    "data",
                    "replicas",
                    "f:spec",
                    "k:{\"name\":\"a\"}"
                ])
                .prop_map(str::to_string),
                inner.clone(),
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
            // Lists keyed by name, as containers are (names repeat, some are not strings).
            proptest::collection::vec((name, inner), 0..6).prop_map(|items| {
                Value::Array(items.into_iter().map(|(n, v)| json!({"name": n, "value": v})).collect())
            }),
        ]
    })
}

fn string_or_odd(choices: Vec<&'static str>) -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => proptest::sample::select(choices).prop_map(Value::from),
        1 => leaf(),
    ]
}

fn managed_fields() -> impl Strategy<Value = Value> {
    prop_oneof![
        tree(),
        proptest::collection::vec(
            (string_or_odd(vec!["kuvryn-sync", "kubectl", "kube-controller-manager"]), string_or_odd(vec!["Apply", "Update"]), tree()),
            0..4,
        )
        .prop_map(|entries| {
            Value::Array(
                entries
                    .into_iter()
                    .map(|(manager, operation, fields)| {
                        json!({"manager": manager, "operation": operation, "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields})
                    })
                    .collect(),
            )
        }),
    ]
}

/// A Kubernetes-shaped object, sometimes malformed, sometimes not an object at all.
fn object() -> impl Strategy<Value = Value> {
    let api_version = string_or_odd(vec![
        "v1",
        "v1",
        "apps/v1",
        "apps/v1beta1",
        "apiextensions.k8s.io/v1",
        "rbac.authorization.k8s.io/v1",
        "example.com/v1",
        "",
        "/",
        "a/b/c",
        "v1/",
    ]);
    let kind = string_or_odd(vec![
        "ConfigMap",
        "ConfigMap",
        "Secret",
        "Namespace",
        "Deployment",
        "Service",
        "CustomResourceDefinition",
        "ClusterRole",
        "Widget",
        "PersistentVolumeClaim",
        "",
    ]);
    let name = prop_oneof![
        8 => string_or_odd(vec!["a", "b", "c", "web", "", ".", "..", "a/b", "50%", "ünï", "a\0b"]),
        1 => (250usize..260).prop_map(|n| Value::from("n".repeat(n))),
    ];
    let namespace = prop_oneof![
        Just(None),
        string_or_odd(vec!["team-a", "team-a", "team-b", "prod-1", "", "kube-system"]).prop_map(Some),
        (60usize..300).prop_map(|n| Some(Value::from("a".repeat(n)))),
    ];
    let annotations =
        prop_oneof![Just(None), Just(Some(json!({"sync.kuvryn.io/prune": "disabled"}))), tree().prop_map(Some),];
    let body = proptest::collection::btree_map(
        proptest::sample::select(vec!["spec", "data", "stringData", "status", "items", "rules"])
            .prop_map(str::to_string),
        tree(),
        0..4,
    );
    let crd = prop_oneof![
        Just(None),
        (
            string_or_odd(vec!["example.com", "apps", ""]),
            string_or_odd(vec!["Widget", "ConfigMap"]),
            string_or_odd(vec!["Namespaced", "Cluster", "Other"])
        )
            .prop_map(|(g, k, s)| Some(json!({"group": g, "names": {"kind": k}, "scope": s}))),
    ];
    let shaped = (api_version, kind, name, namespace, annotations, prop::option::of(managed_fields()), body, crd)
        .prop_map(|(av, kind, name, ns, annotations, mf, body, crd)| {
            let mut meta = serde_json::Map::new();
            meta.insert("name".into(), name);
            if let Some(ns) = ns {
                meta.insert("namespace".into(), ns);
            }
            if let Some(a) = annotations {
                meta.insert("annotations".into(), a);
            }
            if let Some(mf) = mf {
                meta.insert("managedFields".into(), mf);
                meta.insert("uid".into(), json!("u-1"));
                meta.insert("resourceVersion".into(), json!("7"));
            }
            let mut o = serde_json::Map::new();
            o.insert("apiVersion".into(), av);
            o.insert("kind".into(), kind);
            o.insert("metadata".into(), Value::Object(meta));
            o.extend(body);
            if let Some(crd) = crd {
                o.insert("spec".into(), crd);
            }
            Value::Object(o)
        });
    prop_oneof![
        12 => shaped,
        1 => leaf(),
        1 => tree(),
    ]
}

/// An object that passes validation (for the destination's namespace), with any body.
fn valid_object() -> impl Strategy<Value = Value> {
    let kind = proptest::sample::select(vec![
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "Service"),
        ("v1", "PersistentVolumeClaim"),
        ("apps/v1", "Deployment"),
        ("example.com/v1", "Widget"),
        ("v1", "Namespace"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ]);
    let annotations = prop_oneof![
        3 => Just(Value::Null),
        1 => Just(json!({"sync.kuvryn.io/prune": "disabled"})),
    ];
    let body = proptest::collection::btree_map(
        proptest::sample::select(vec!["spec", "data", "stringData", "status"]).prop_map(str::to_string),
        tree(),
        0..3,
    );
    (kind, prop::option::of(Just("team-a")), annotations, prop::option::of(managed_fields()), body).prop_map(
        |((av, kind), ns, annotations, mf, body)| {
            let mut o = json!({"apiVersion": av, "kind": kind, "metadata": {"name": "x"}});
            if let Some(ns) = ns {
                o["metadata"]["namespace"] = json!(ns);
            }
            if !annotations.is_null() {
                o["metadata"]["annotations"] = annotations;
            }
            if let Some(mf) = mf {
                o["metadata"]["managedFields"] = mf;
            }
            o.as_object_mut().unwrap().extend(body);
            o
        },
    )
}

/// Valid objects with distinct names, a CustomResourceDefinition for `Widget` among them.
fn valid_objects() -> impl Strategy<Value = Vec<Value>> {
    (proptest::collection::vec(valid_object(), 0..9), prop::bool::weighted(0.8)).prop_map(|(mut objects, crd)| {
        for (i, o) in objects.iter_mut().enumerate() {
            o["metadata"]["name"] = json!(format!("o{i}"));
        }
        if crd {
            objects.push(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.com"},
                "spec": {"group": "example.com", "names": {"kind": "Widget"}, "scope": "Namespaced"}}));
        }
        objects
    })
}

/// The live copy of an object: the same, or with fields changed, added or dropped (a hand edit,
/// server defaults), picked by `seed`.
fn live_of(o: &Value, seed: u64, extra: &Value) -> Value {
    let mut l = o.clone();
    if let Some(m) = l.as_object_mut() {
        match seed % 7 {
            0 => {}
            1 => {
                m.insert("status".into(), extra.clone());
            }
            2 => {
                if let Some(k) = m.keys().find(|k| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata")).cloned() {
                    m.insert(k, extra.clone());
                }
            }
            3 => {
                if let Some(k) = m.keys().rfind(|k| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata")).cloned()
                {
                    m.remove(&k);
                }
            }
            4 => {
                m.insert("spec".into(), extra.clone());
            }
            5 => {
                // Another version of the same object (the same identity).
                let av = m.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
                let group = av.rsplit_once('/').map(|(g, _)| format!("{g}/")).unwrap_or_default();
                m.insert("apiVersion".into(), Value::from(format!("{group}v9")));
            }
            _ => {
                if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("annotations".into(), json!({"sync.kuvryn.io/prune": "disabled"}));
                }
            }
        }
    }
    l
}

fn destination() -> impl Strategy<Value = Destination> {
    let pattern = prop_oneof![
        4 => "[a-z0-9*-]{1,12}",
        1 => Just(format!("{}b", "*a".repeat(31))),
        1 => Just("*".to_string()),
    ];
    let group_kind = (
        proptest::sample::select(vec!["", "apiextensions.k8s.io", "rbac.authorization.k8s.io", "example.com"]),
        proptest::sample::select(vec!["*", "Namespace", "CustomResourceDefinition", "ClusterRole", "Widget"]),
    )
        .prop_map(|(g, k)| GroupKind { group: g.into(), kind: k.into() });
    (proptest::collection::vec(pattern, 0..4), proptest::collection::vec(group_kind, 0..4), prop::bool::weighted(0.8))
        .prop_map(|(allowed, mut cluster, all)| {
            if all {
                // Most valid desired states reach the plan.
                for group in ["", "apiextensions.k8s.io", "rbac.authorization.k8s.io"] {
                    cluster.push(GroupKind { group: group.into(), kind: "*".into() });
                }
            }
            Destination { namespace: "team-a".into(), allowed_namespaces: allowed, cluster_resources: cluster }
        })
}

fn scopes() -> BTreeMap<(String, String), bool> {
    [
        ("", "ConfigMap", true),
        ("", "Secret", true),
        ("", "Service", true),
        ("", "PersistentVolumeClaim", true),
        ("", "Namespace", false),
        ("apps", "Deployment", true),
        ("rbac.authorization.k8s.io", "ClusterRole", false),
        ("apiextensions.k8s.io", "CustomResourceDefinition", false),
    ]
    .into_iter()
    .map(|(g, k, n)| ((g.to_string(), k.to_string()), n))
    .collect()
}

/// A permutation of `v` picked by `seed` (xorshift; only determinism matters).
fn shuffled<T: Clone>(v: &[T], mut seed: u64) -> Vec<T> {
    let mut out = v.to_vec();
    for i in (1..out.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    out
}

proptest! {
    #![proptest_config(config())]

    /// Validation lists its problems, sorted and with messages; on valid objects the plan and
    /// both digests do not depend on input order, and the stored plan stays bounded.
    #[test]
    fn plan_building(
        objects in prop_oneof![
            2 => valid_objects(),
            1 => proptest::collection::vec(object(), 0..12),
            1 => (valid_objects(), proptest::collection::vec(object(), 1..3)).prop_map(|(mut v, odd)| { v.extend(odd); v }),
        ],
        others in proptest::collection::vec(object(), 0..6),
        destination in destination(),
        extra in tree(),
        seeds in proptest::collection::vec(any::<u64>(), 4),
        prune in any::<bool>(),
        adopt in any::<bool>(),
    ) {
        let limits = validate::Limits { max_objects: 10, max_object_bytes: 64 * 1024 };
        let desired = match validate::validate(&objects, &destination, &scopes(), limits) {
            Ok(desired) => desired,
            Err(problems) => {
                prop_assert!(!problems.is_empty());
                prop_assert!(problems.iter().all(|p| !p.trim().is_empty()));
                prop_assert!(problems.windows(2).all(|w| w[0] < w[1]), "sorted and deduplicated");
                // Unvalidated input still gives a plan, the same one twice.
                let inputs = Inputs { managed: objects.clone(), prune, ..Default::default() };
                prop_assert_eq!(plan::build(&objects, &inputs), plan::build(&objects, &inputs));
                return Ok(());
            }
        };
        prop_assert!(desired.len() <= limits.max_objects);
        let mut live = BTreeMap::new();
        let mut dry_run = BTreeMap::new();
        let mut conflicts = BTreeMap::new();
        for (i, d) in desired.iter().enumerate() {
            let id = validate::identity(d);
            let s = seeds[0].rotate_left(i as u32 * 7);
            if s % 3 != 0 {
                live.insert(id.clone(), live_of(d, s / 3, &extra));
            }
            if s % 4 == 0 {
                dry_run.insert(id.clone(), live_of(d, s / 4, &extra));
            }
            if s % 5 == 0 {
                conflicts.insert(id, vec![
                    Conflict { field: ".spec.replicas".into(), manager: "kubectl".into() },
                    Conflict { field: ".data".into(), manager: "other".into() },
                ]);
            }
        }
        let mut managed: Vec<Value> = desired.iter().chain(&others).cloned().collect();
        managed.extend(others.iter().map(|o| live_of(o, seeds[1], &extra)));
        let inputs = Inputs {
            live,
            dry_run,
            managed: managed.clone(),
            prune,
            conflicts,
            one_wave: seeds[0] & 1 == 0,
            ..Default::default()
        };

        let p = plan::build(&desired, &inputs);
        prop_assert!(p.digest.starts_with("sha256:") && p.digest.len() == 71);
        prop_assert_eq!(&p, &plan::build(&desired, &inputs));
        let reordered = Inputs { managed: shuffled(&managed, seeds[3] | 1), ..inputs.clone() };
        prop_assert_eq!(&p, &plan::build(&shuffled(&desired, seeds[2] | 1), &reordered));
        prop_assert!(p.entries.len() <= desired.len() + managed.len());

        let hash = revision::desired_state_hash(&desired);
        prop_assert_eq!(&hash, &revision::desired_state_hash(&shuffled(&desired, seeds[2] | 1)));

        let stored = revision::stored(&p, adopt);
        let s = stored.summary.clone();
        prop_assert_eq!(s.create + s.update + s.unchanged + s.delete, p.entries.len() as i32);
        prop_assert!(stored.entries.len() <= kuvryn_sync::api::revision::MAX_PLAN_ENTRIES);
        let size = serde_json::to_vec(&stored).unwrap().len();
        prop_assert!(size <= revision::MAX_PLAN_BYTES + 1024, "{size} bytes");
        prop_assert_eq!(&stored.digest, &p.digest);
    }
}

// ---------------------------------------------------------------------------------------------
// Memory, measured.

/// Set in the child process [`alias_bombs_stay_under_a_memory_limit`] starts.
const CHILD: &str = "KSYNC_FUZZ_MEMORY_CHILD";

/// Address space the child may use: a parse that expanded aliases without bound would need
/// gigabytes and abort.
const CHILD_LIMIT_KIB: u64 = 2 * 1024 * 1024;

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn scalar_bomb(scalar: usize, aliases: usize) -> String {
    let mut s = format!("big: &big {}\n", "x".repeat(scalar));
    for i in 0..aliases / 10 + 1 {
        s.push_str(&format!("a{i}: &a{i} y\n"));
    }
    s + "list: [" + &"*big, ".repeat(aliases) + "]\n"
}

/// Alias bombs, refused within a 2 GiB address space: 50,000 aliases of a 1 MiB scalar would be
/// 50 GiB of text, 12 levels of 10 aliases 10^12 nodes, 200 files of 37.5 MiB of aliased text
/// each 7.5 GiB. Runs itself again as a child under `ulimit -v`, so an unbounded parse aborts
/// the child, not the machine.
#[test]
fn alias_bombs_stay_under_a_memory_limit() {
    if std::env::var_os(CHILD).is_some() {
        let text = scalar_bomb(1 << 20, 50_000);
        assert!(!yaml::from_str::<Value>(&text).unwrap_err().to_string().is_empty());
        assert!(discovery::parse_file(".ksync.yaml", text.as_bytes(), "a", "r").is_err());
        let mut laughs = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..12 {
            laughs.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 10].join(", ")));
        }
        assert!(yaml::from_str_multiple::<Value>(&laughs).is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = scalar_bomb(64 * 1024, 600);
        for i in 0..200 {
            std::fs::write(dir.path().join(format!("{i:03}.yaml")), &file).unwrap();
        }
        let e = render::plain::render(dir.path(), &render::Limits::default()).unwrap_err().to_string();
        assert!(e.contains("render limit"), "{e}");
        eprintln!("peak RSS: {} KiB", peak_rss_kib());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {CHILD_LIMIT_KIB} && exec \"$0\" \"$@\""))
        .arg(exe)
        .args(["--exact", "alias_bombs_stay_under_a_memory_limit", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed ({}):\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("1 passed"), "the child ran no test:\n{stdout}");
    eprintln!("{}", stderr.lines().find(|l| l.starts_with("peak RSS")).unwrap_or("peak RSS: unknown"));
}
