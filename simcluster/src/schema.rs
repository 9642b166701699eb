//! Navigating the structure of an object's type: the built-in v1.36 types
//! (`data/builtin-schemas.json`) and CRD `openAPIV3Schema`s alike, for the field manager
//! (list-map keys, atomic lists and maps) and strategic merge patch (merge keys, strategies).
//! OWNED BY the field-manager work; see `fieldmanager/`.
//!
//! A [`TypeNav`] points at one node of a JSON-schema-like document (`properties`,
//! `additionalProperties`, `items`, `$ref` to a bare definition name, and the
//! `x-kubernetes-*` extensions). A missing node means "untyped": the structure is deduced from
//! the value (maps granular, lists atomic), as the real server does for unknown or
//! `x-kubernetes-preserve-unknown-fields` content.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::{Map, Value};

static BUILTIN_JSON: &str = include_str!("../data/builtin-schemas.json");

/// The parsed built-in definitions (empty if the embedded file were unreadable).
static BUILTIN_DEFS: LazyLock<Map<String, Value>> =
    LazyLock::new(|| match serde_json::from_str::<Value>(BUILTIN_JSON) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    });

/// (apiVersion, kind) → definition name, from the `apiVersion`/`kind` enums of the top-level types.
static BUILTIN_INDEX: LazyLock<HashMap<(String, String), String>> = LazyLock::new(|| {
    let mut index = HashMap::new();
    for (name, def) in BUILTIN_DEFS.iter() {
        if def.get("x-kubernetes-group-version-kind").is_none() {
            continue;
        }
        let props = def.get("properties");
        let enum_of = |field: &str| -> Vec<String> {
            props
                .and_then(|p| p.get(field))
                .and_then(|f| f.get("enum"))
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                .unwrap_or_default()
        };
        for av in enum_of("apiVersion") {
            for kind in enum_of("kind") {
                index.entry((av.clone(), kind)).or_insert_with(|| name.clone());
            }
        }
    }
    index
});

/// How a list is merged and tracked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole (the default for lists without annotation).
    Atomic,
    /// A set of scalars (`v:` path elements).
    Set,
    /// A map keyed by these item fields (`k:` path elements).
    Map(Vec<String>),
}

/// What a node holds, from the schema (or [`NodeKind::Unknown`] when untyped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// An object (struct with properties, or a map with additionalProperties).
    Object,
    /// An array.
    List,
    /// A string, number, boolean, int-or-string, ...
    Scalar,
    /// No schema information: deduce from the value.
    Unknown,
}

/// A position in a type's schema.
#[derive(Clone, Copy, Debug)]
pub struct TypeNav<'a> {
    /// The node as written where it is used (may carry a `$ref` plus overriding extensions).
    local: Option<&'a Value>,
    /// The node after `$ref` resolution (same as `local` without `$ref`).
    resolved: Option<&'a Value>,
    /// The definition name `resolved` comes from, if any.
    name: Option<&'a str>,
    /// Definitions for `$ref` resolution.
    defs: Option<&'a Map<String, Value>>,
    /// Built-in schemas (whose Go types have zero values and defaulted list-map keys).
    builtin: bool,
}

impl<'a> TypeNav<'a> {
    /// The type of a built-in object, by `apiVersion` (`v1`, `apps/v1`) and `kind`.
    pub fn builtin(api_version: &str, kind: &str) -> Option<TypeNav<'static>> {
        let name = BUILTIN_INDEX.get(&(api_version.to_string(), kind.to_string()))?;
        TypeNav::builtin_definition(name)
    }

    /// A built-in definition by name, e.g. `io.k8s.api.core.v1.PodSpec`.
    pub fn builtin_definition(name: &str) -> Option<TypeNav<'static>> {
        let (key, def) = BUILTIN_DEFS.get_key_value(name)?;
        Some(TypeNav {
            local: Some(def),
            resolved: Some(def),
            name: Some(key.as_str()),
            defs: Some(&BUILTIN_DEFS),
            builtin: true,
        })
    }

    /// No schema: maps are granular, lists atomic, everything else a scalar.
    pub fn untyped() -> TypeNav<'static> {
        TypeNav { local: None, resolved: None, name: None, defs: None, builtin: false }
    }

    /// A self-contained schema, such as a CRD version's `openAPIV3Schema`.
    pub fn new(schema: &'a Value) -> TypeNav<'a> {
        TypeNav { local: Some(schema), resolved: Some(schema), name: None, defs: None, builtin: false }
    }

    /// A schema whose `$ref`s (bare names) resolve against `defs`.
    pub fn with_definitions(schema: &'a Value, defs: &'a Map<String, Value>) -> TypeNav<'a> {
        let mut nav =
            TypeNav { local: Some(schema), resolved: Some(schema), name: None, defs: Some(defs), builtin: false };
        nav.resolve();
        nav
    }

    fn child(&self, node: Option<&'a Value>) -> TypeNav<'a> {
        let mut nav = TypeNav { local: node, resolved: node, name: None, defs: self.defs, builtin: self.builtin };
        nav.resolve();
        nav
    }

    fn resolve(&mut self) {
        // Follow `$ref` chains (bounded, in case of cycles of pure references).
        for _ in 0..16 {
            let Some(node) = self.resolved else { return };
            let Some(r) = node.get("$ref").and_then(Value::as_str) else { return };
            let name = r.rsplit('/').next().unwrap_or(r);
            match self.defs.and_then(|d| d.get_key_value(name)) {
                Some((k, def)) => {
                    self.resolved = Some(def);
                    self.name = Some(k.as_str());
                }
                None => {
                    self.resolved = None;
                    return;
                }
            }
        }
    }

    /// An extension or keyword, the local node's value winning over the referenced definition's.
    fn attr(&self, key: &str) -> Option<&'a Value> {
        self.local.and_then(|n| n.get(key)).or_else(|| self.resolved.and_then(|n| n.get(key)))
    }

    /// True when there is no schema information at this node.
    pub fn is_untyped(&self) -> bool {
        self.resolved.is_none()
    }

    /// True for the built-in (Go-typed) schemas.
    pub fn is_builtin(&self) -> bool {
        self.builtin
    }

    /// The definition name of this node (built-ins), e.g. `io.k8s.api.apps.v1.DeploymentSpec`.
    pub fn definition_name(&self) -> Option<&'a str> {
        self.name
    }

    /// The raw (resolved) schema node.
    pub fn schema(&self) -> Option<&'a Value> {
        self.resolved
    }

    fn types(&self) -> Vec<&'a str> {
        match self.attr("type") {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// What this node holds according to the schema.
    pub fn kind(&self) -> NodeKind {
        let Some(node) = self.resolved else { return NodeKind::Unknown };
        if self.attr("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
            return NodeKind::Scalar;
        }
        let types = self.types();
        if types.contains(&"object") || node.get("properties").is_some() || node.get("additionalProperties").is_some() {
            return NodeKind::Object;
        }
        if types.contains(&"array") || node.get("items").is_some() {
            return NodeKind::List;
        }
        if types.iter().any(|t| matches!(*t, "string" | "integer" | "number" | "boolean"))
            || node.get("oneOf").is_some()
        {
            return NodeKind::Scalar;
        }
        NodeKind::Unknown
    }

    fn preserves_unknown(&self) -> bool {
        self.attr("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true)
    }

    /// True when the object declares `name` as a property (a "named field" of a struct).
    pub fn has_field(&self, name: &str) -> bool {
        self.resolved.and_then(|n| n.get("properties")).and_then(|p| p.get(name)).is_some()
    }

    /// True when this node is a struct (declares properties).
    pub fn is_struct(&self) -> bool {
        self.resolved.and_then(|n| n.get("properties")).and_then(Value::as_object).is_some_and(|p| !p.is_empty())
    }

    /// The type of the member `name` of an object: its property, else `additionalProperties`,
    /// else untyped.
    pub fn field(&self, name: &str) -> TypeNav<'a> {
        let Some(node) = self.resolved else { return self.child(None) };
        if let Some(p) = node.get("properties").and_then(|p| p.get(name)) {
            return self.child(Some(p));
        }
        match node.get("additionalProperties") {
            Some(ap @ Value::Object(_)) => self.child(Some(ap)),
            _ => self.child(None),
        }
    }

    /// Whether `name` may appear in this object (declared, a map, or unknown fields preserved).
    pub fn allows_field(&self, name: &str) -> bool {
        let Some(node) = self.resolved else { return true };
        if self.kind() != NodeKind::Object {
            return true;
        }
        if node.get("properties").and_then(|p| p.get(name)).is_some() || self.preserves_unknown() {
            return true;
        }
        match node.get("additionalProperties") {
            Some(Value::Bool(b)) => *b,
            Some(Value::Object(_)) => true,
            _ => node.get("properties").is_none(),
        }
    }

    /// The type of a list's items.
    pub fn items(&self) -> TypeNav<'a> {
        self.child(self.resolved.and_then(|n| n.get("items")))
    }

    /// The list's merge semantics: `x-kubernetes-list-type` (with `x-kubernetes-list-map-keys`);
    /// a list with only a strategic-merge `x-kubernetes-patch-merge-key` is a map on that key;
    /// otherwise atomic.
    pub fn list_type(&self) -> ListType {
        match self.attr("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => {
                let keys: Vec<String> = self
                    .attr("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|k| k.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                if keys.is_empty() {
                    match self.patch_merge_key() {
                        Some(k) => ListType::Map(vec![k.to_string()]),
                        None => ListType::Atomic,
                    }
                } else {
                    ListType::Map(keys)
                }
            }
            Some(_) => ListType::Atomic,
            None => match (self.patch_merge_key(), self.patch_strategy()) {
                (Some(k), Some(s)) if s.split(',').any(|x| x == "merge") => ListType::Map(vec![k.to_string()]),
                _ => ListType::Atomic,
            },
        }
    }

    /// `x-kubernetes-map-type: atomic` (a struct or map replaced as a whole).
    pub fn is_atomic_map(&self) -> bool {
        self.attr("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
            // A RawExtension (ControllerRevision `data`) is owned as one leaf: `f:data: {}`.
            || (self.builtin && self.name == Some("io.k8s.apimachinery.pkg.runtime.RawExtension"))
    }

    /// `x-kubernetes-patch-strategy` (`merge`, `replace`, `retainKeys`, `merge,retainKeys`).
    pub fn patch_strategy(&self) -> Option<&'a str> {
        self.attr("x-kubernetes-patch-strategy").and_then(Value::as_str)
    }

    /// `x-kubernetes-patch-merge-key`.
    pub fn patch_merge_key(&self) -> Option<&'a str> {
        self.attr("x-kubernetes-patch-merge-key").and_then(Value::as_str)
    }

    /// The default of a list-map key field of this (item) type, used when an item omits it:
    /// the schema's `default`, or for built-ins the server defaults (`protocol: TCP` of ports).
    pub fn key_default(&self, key: &str) -> Option<Value> {
        let field = self.resolved.and_then(|n| n.get("properties")).and_then(|p| p.get(key));
        if let Some(d) = field.and_then(|f| f.get("default")) {
            return Some(d.clone());
        }
        if self.builtin && key == "protocol" {
            return Some(Value::String("TCP".into()));
        }
        None
    }

    /// Check that every field of `value` is declared, as the real server does before applying
    /// to a built-in type: `Err(".spec: field not declared in schema")` (several errors are
    /// joined the Go way: `errors:\n  .a: ...\n  .b: ...`).
    pub fn check_declared(&self, value: &Value) -> Result<(), String> {
        let mut errs = Vec::new();
        self.collect_undeclared(value, String::new(), &mut errs);
        match errs.len() {
            0 => Ok(()),
            1 => Err(errs.remove(0)),
            _ => {
                let mut msg = String::from("errors:");
                for e in errs {
                    msg.push_str("\n  ");
                    msg.push_str(&e);
                }
                Err(msg)
            }
        }
    }

    fn collect_undeclared(&self, value: &Value, path: String, errs: &mut Vec<String>) {
        if self.is_untyped() || self.preserves_unknown() {
            return;
        }
        match value {
            Value::Object(m) if self.kind() == NodeKind::Object => {
                for (k, v) in m {
                    let p = format!("{path}.{k}");
                    if !self.allows_field(k) {
                        errs.push(format!("{p}: field not declared in schema"));
                        continue;
                    }
                    self.field(k).collect_undeclared(v, p, errs);
                }
            }
            Value::Array(items) if self.kind() == NodeKind::List => {
                let it = self.items();
                for (i, v) in items.iter().enumerate() {
                    it.collect_undeclared(v, format!("{path}[{i}]"), errs);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_lookup_and_navigation() {
        let dep = TypeNav::builtin("apps/v1", "Deployment").expect("deployment");
        assert_eq!(dep.definition_name(), Some("io.k8s.api.apps.v1.Deployment"));
        let containers = dep.field("spec").field("template").field("spec").field("containers");
        assert_eq!(containers.list_type(), ListType::Map(vec!["name".into()]));
        assert_eq!(containers.patch_merge_key(), Some("name"));
        assert_eq!(containers.patch_strategy(), Some("merge"));
        let c = containers.items();
        assert_eq!(c.definition_name(), Some("io.k8s.api.core.v1.Container"));
        assert_eq!(c.field("ports").list_type(), ListType::Map(vec!["containerPort".into(), "protocol".into()]));
        assert_eq!(c.field("ports").items().key_default("protocol"), Some(json!("TCP")));
        assert_eq!(c.field("args").list_type(), ListType::Atomic);
        assert!(dep.field("spec").field("selector").is_atomic_map());
        assert!(!dep.field("metadata").field("labels").is_atomic_map());
        assert_eq!(dep.field("metadata").field("labels").field("x").kind(), NodeKind::Scalar);
        assert_eq!(dep.field("metadata").field("finalizers").list_type(), ListType::Set);
        assert!(dep.field("spec").field("nope").is_untyped());
        assert!(TypeNav::builtin("v1", "ConfigMap").is_some());
        assert!(TypeNav::builtin("v1", "Nope").is_none());
        // A local extension overrides the referenced definition's (claimRef is granular).
        let pv = TypeNav::builtin("v1", "PersistentVolume").expect("pv");
        assert!(!pv.field("spec").field("claimRef").is_atomic_map());
        assert!(
            TypeNav::builtin("v1", "Pod")
                .expect("pod")
                .field("metadata")
                .field("ownerReferences")
                .items()
                .is_atomic_map()
        );
    }

    #[test]
    fn crd_schema_and_untyped() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}});
        let t = TypeNav::new(&schema);
        assert_eq!(t.field("spec").field("ports").list_type(), ListType::Map(vec!["name".into()]));
        assert_eq!(t.field("spec").field("tags").list_type(), ListType::Set);
        assert!(t.check_declared(&json!({"spec": {"free": {"x": 1}}})).is_ok());
        assert_eq!(
            t.check_declared(&json!({"spec": {"bad": 1}})),
            Err(".spec.bad: field not declared in schema".into())
        );
        let u = TypeNav::untyped();
        assert!(u.is_untyped());
        assert_eq!(u.field("a").items().list_type(), ListType::Atomic);
        let cm = TypeNav::builtin("v1", "ConfigMap").expect("cm");
        assert_eq!(
            cm.check_declared(
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "spec": {"nope": 1}})
            ),
            Err(".spec: field not declared in schema".into())
        );
    }
}
