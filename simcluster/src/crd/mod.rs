//! CustomResourceDefinitions: CRD validation, the resources a CRD serves, and for custom
//! resources: structural defaulting, pruning (unknown-field warnings / strict errors), schema
//! validation, CEL `x-kubernetes-validations` (kube-cel), printer columns as Table.
//!
//! Everything here is pure, over `serde_json::Value`. The server core calls, for a write of a
//! custom resource: [`CrdVersion::default_and_prune`] on the decoded body (warnings or a strict
//! 400), then [`CrdVersion::validate`] on the final object (422 through
//! [`crate::errors::ApiError::invalid`] with the kind and the group). For reads as Table:
//! [`CrdVersion::table`].

pub(crate) mod cel;
mod definition;
mod fielderr;
mod formats;
mod jsonpath;
mod schema;
mod table;
#[cfg(test)]
mod tests;

use serde_json::{Value, json};

use crate::errors::Cause;

/// A validated CustomResourceDefinition.
#[derive(Clone, Debug, PartialEq)]
pub struct CrdModel {
    /// `spec.group`.
    pub group: String,
    /// `spec.names.plural`.
    pub plural: String,
    /// `spec.names.singular` (defaulted to the lowercased kind).
    pub singular: String,
    /// `spec.names.kind`.
    pub kind: String,
    /// `spec.names.listKind` (defaulted to `<kind>List`).
    pub list_kind: String,
    /// `spec.names.shortNames`.
    pub short_names: Vec<String>,
    /// `spec.names.categories`.
    pub categories: Vec<String>,
    /// `spec.scope == Namespaced`.
    pub namespaced: bool,
    /// `spec.versions`, in order.
    pub versions: Vec<CrdVersion>,
}

/// One version of a CRD.
#[derive(Clone, Debug, PartialEq)]
pub struct CrdVersion {
    /// Version name (`v1`).
    pub name: String,
    /// Served.
    pub served: bool,
    /// The storage version.
    pub storage: bool,
    /// `schema.openAPIV3Schema`.
    pub schema: std::sync::Arc<Value>,
    /// `subresources.status` is set.
    pub status_subresource: bool,
    /// `subresources.scale`, if set.
    pub scale_subresource: Option<Value>,
    /// `additionalPrinterColumns` as written.
    pub printer_columns: Vec<Value>,
    /// `selectableFields[*].jsonPath`.
    pub selectable_fields: Vec<String>,
}

/// The `fieldValidation` query parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop unknown fields with a warning each (the default).
    #[default]
    Warn,
    /// Refuse unknown fields (400).
    Strict,
}

/// The `includeObject` query parameter of Table requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// `"object": null`.
    None,
    /// `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

/// Validate a CustomResourceDefinition object as the real server does on create/update (names,
/// versions, structural schema basics, defaults, CEL rules compile, printer columns, selectable
/// fields, subresources) and build the model. The causes go into a 422 for
/// `CustomResourceDefinition.apiextensions.k8s.io`.
pub fn parse(crd: &Value) -> Result<CrdModel, Vec<Cause>> {
    definition::parse(crd)
}

impl CrdModel {
    /// The version named `name`.
    pub fn version(&self, name: &str) -> Option<&CrdVersion> {
        self.versions.iter().find(|v| v.name == name)
    }

    /// The storage version.
    pub fn storage_version(&self) -> Option<&CrdVersion> {
        self.versions.iter().find(|v| v.storage)
    }

    /// `status.acceptedNames` once the names are accepted.
    pub fn accepted_names(&self) -> Value {
        let mut n = json!({"plural": self.plural, "kind": self.kind});
        if !self.singular.is_empty() {
            n["singular"] = json!(self.singular);
        }
        if !self.short_names.is_empty() {
            n["shortNames"] = json!(self.short_names);
        }
        if !self.list_kind.is_empty() {
            n["listKind"] = json!(self.list_kind);
        }
        if !self.categories.is_empty() {
            n["categories"] = json!(self.categories);
        }
        n
    }
}

/// The status a CRD has in the create response, before the names are accepted:
/// `{"conditions": null, "acceptedNames": {"plural": "", "kind": ""}, "storedVersions": [...]}`.
pub fn initial_status(model: &CrdModel) -> Value {
    json!({
        "conditions": null,
        "acceptedNames": {"plural": "", "kind": ""},
        "storedVersions": model.storage_version().map(|v| vec![v.name.clone()]).unwrap_or_default(),
    })
}

/// What the server writes into the CRD's status once accepted (`now`: RFC 3339, seconds):
/// conditions NamesAccepted (NoConflicts) and Established (InitialNamesAccepted),
/// `acceptedNames`, `storedVersions` (the storage version; on updates the server should keep
/// earlier entries and append a new storage version).
pub fn accepted_status(model: &CrdModel, now: &str) -> Value {
    json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now,
             "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now,
             "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
        ],
        "acceptedNames": model.accepted_names(),
        "storedVersions": model.storage_version().map(|v| vec![v.name.clone()]).unwrap_or_default(),
    })
}

/// The message of the 400 BadRequest (reason `BadRequest`, no details) for unknown fields with
/// `fieldValidation=Strict`, from the causes [`CrdVersion::default_and_prune`] returned:
/// `Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.extra"`.
pub fn strict_decoding_message(kind: &str, version: &str, causes: &[Cause]) -> String {
    let fields: Vec<&str> = causes.iter().map(|c| c.message.as_str()).collect();
    format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        fields.join(", ")
    )
}

/// The `Warning` header value for one pruned field path: `299 - "unknown field \"spec.extra\""`.
pub fn unknown_field_warning(path: &str) -> String {
    format!("299 - \"unknown field \\\"{path}\\\"\"")
}

fn has_rules(s: &Value) -> bool {
    match s {
        Value::Object(m) => {
            m.get("x-kubernetes-validations").and_then(Value::as_array).is_some_and(|a| !a.is_empty())
                || ["properties", "additionalProperties", "items"].iter().any(|k| match m.get(*k) {
                    Some(Value::Object(p)) if *k == "properties" => p.values().any(has_rules),
                    Some(v) => has_rules(v),
                    None => false,
                })
        }
        _ => false,
    }
}

impl CrdVersion {
    /// Structural pruning of unknown fields, then null pruning and defaulting, as the real
    /// server decodes a custom resource. Returns the sorted paths of the pruned unknown fields
    /// (one `Warning` header each, see [`unknown_field_warning`]); with `Ignore` they are
    /// dropped silently (empty list); with `Strict` they are errors: causes with `field` the
    /// path and `message` `unknown field "<path>"` (see [`strict_decoding_message`] for the 400).
    /// `apiVersion`, `kind` and ObjectMeta fields of `metadata` are kept; unknown `metadata`
    /// fields are pruned too.
    pub fn default_and_prune(&self, obj: &mut Value, validation: FieldValidation) -> Result<Vec<String>, Vec<Cause>> {
        let mut unknown = Vec::new();
        schema::prune(obj, Some(&self.schema), "", true, &mut unknown);
        unknown.sort();
        unknown.dedup();
        if validation == FieldValidation::Strict && !unknown.is_empty() {
            return Err(unknown
                .iter()
                .map(|p| Cause::new("FieldValueInvalid", format!("unknown field \"{p}\""), p.clone()))
                .collect());
        }
        schema::prune_nulls(obj, &self.schema);
        schema::apply_defaults(obj, &self.schema);
        Ok(if validation == FieldValidation::Ignore { Vec::new() } else { unknown })
    }

    /// Defaulting only (what the server also applies to objects read from storage).
    pub fn apply_defaults(&self, obj: &mut Value) {
        schema::prune_nulls(obj, &self.schema);
        schema::apply_defaults(obj, &self.schema);
    }

    /// Schema validation (types, required, enum, bounds, lengths, pattern, items, properties,
    /// formats), list-type set/map uniqueness, then the CEL `x-kubernetes-validations` (with
    /// transition rules on `old`); on update (`old` given) unchanged values are ratcheted.
    /// When schema errors block the CEL rules, the extra `<nil>` cause is appended. Root rules
    /// see `self.metadata.name`/`generateName`. Causes are ready for `ApiError::invalid`.
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut errs = Vec::new();
        schema::validate_value(&self.schema, obj, old, "", &mut errs);
        let old_lists_ok = old.is_none_or(|o| {
            let mut e = Vec::new();
            schema::validate_list_types(&self.schema, o, "", &mut e);
            e.is_empty()
        });
        if old_lists_ok {
            schema::validate_list_types(&self.schema, obj, "", &mut errs);
        }
        if has_rules(&self.schema) {
            if schema::has_blocking(&errs) {
                errs.push(schema::rules_not_checked());
            } else {
                cel::validate(&self.schema, obj, old, "", true, false, &mut errs);
            }
        }
        errs
    }

    /// A `meta.k8s.io/v1` Table of `objects` (one row each; a GET of one object passes one):
    /// the Name column then the printer columns (or a default Age column when there are none),
    /// cells `null` when missing, `object` per `include_object`. `list_meta` becomes the
    /// Table's `metadata` (`resourceVersion`, `continue`, `remainingItemCount`; empty values
    /// dropped). Date cells are ages relative to the current time.
    pub fn table(&self, objects: &[Value], include_object: IncludeObject, list_meta: Value) -> Value {
        table::table(self, objects, include_object, list_meta, jiff::Timestamp::now())
    }

    /// [`CrdVersion::table`] at a given time.
    pub fn table_at(
        &self,
        objects: &[Value],
        include_object: IncludeObject,
        list_meta: Value,
        now: jiff::Timestamp,
    ) -> Value {
        table::table(self, objects, include_object, list_meta, now)
    }

    /// The value of a selectable field (or printer column path) in `obj`, as the string a field
    /// selector compares (`None` when absent).
    pub fn field_value(&self, obj: &Value, json_path: &str) -> Option<String> {
        let steps = jsonpath::parse(json_path).ok()?;
        jsonpath::eval(&steps, obj).first().and_then(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(fielderr::go_v(other)),
        })
    }
}
