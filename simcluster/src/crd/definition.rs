//! Validation of a CustomResourceDefinition object (names, scope, versions, structural schema
//! basics, defaults, CEL rules, printer columns, selectable fields, subresources) and the
//! model it yields.

use serde_json::Value;

use super::fielderr::{self as fe, Bad};
use super::schema::{self, addl, items, list_map_keys, props, ty};
use super::{CrdModel, CrdVersion, cel, jsonpath};
use crate::errors::Cause;

const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn matches(pattern: &str, s: &str) -> bool {
    super::formats::regex(pattern).is_some_and(|r| r.is_match(s))
}

/// `IsDNS1035Label` errors.
fn dns1035(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !matches(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", s) {
        errs.push(DNS1035_MSG.to_string());
    }
    errs
}

/// `IsDNS1123Subdomain` errors.
fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if !matches(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", s) {
        errs.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    errs
}

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn strings(v: &Value, k: &str) -> Vec<String> {
    v.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Validate a CRD and build its model.
pub(crate) fn parse(crd: &Value) -> Result<CrdModel, Vec<Cause>> {
    let mut errs = Vec::new();
    let empty = Value::Object(Default::default());
    let spec = crd.get("spec").filter(|s| s.is_object()).unwrap_or(&empty);
    let names = spec.get("names").filter(|s| s.is_object()).unwrap_or(&empty);
    let group = text(spec, "group").to_string();
    let plural = text(names, "plural").to_string();
    let kind = text(names, "kind").to_string();
    // v1 defaulting of names.
    let singular = match text(names, "singular") {
        "" => kind.to_lowercase(),
        s => s.to_string(),
    };
    let list_kind = match text(names, "listKind") {
        "" if !kind.is_empty() => format!("{kind}List"),
        s => s.to_string(),
    };
    let short_names = strings(names, "shortNames");
    let categories = strings(names, "categories");

    let name = crd.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    if name.is_empty() {
        errs.push(fe::required("metadata.name", "name or generateName is required"));
    } else if name != format!("{plural}.{group}") {
        errs.push(fe::invalid("metadata.name", Bad::str(name), "must be spec.names.plural+\".\"+spec.group"));
    }

    if group.is_empty() {
        errs.push(fe::required("spec.group", ""));
    } else {
        let e = dns1123_subdomain(&group);
        if !e.is_empty() {
            errs.push(fe::invalid("spec.group", Bad::str(&group), &e.join(",")));
        } else if !group.contains('.') {
            errs.push(fe::invalid("spec.group", Bad::str(&group), "should be a domain with at least one dot"));
        }
    }

    match text(spec, "scope") {
        "" => errs.push(fe::required("spec.scope", "")),
        "Namespaced" | "Cluster" => {}
        other => errs.push(fe::not_supported("spec.scope", Bad::str(other), &["Cluster".into(), "Namespaced".into()])),
    }
    let namespaced = text(spec, "scope") == "Namespaced";

    for (field, value) in [("plural", &plural), ("singular", &singular)] {
        let p = format!("spec.names.{field}");
        if value.is_empty() {
            errs.push(fe::required(&p, ""));
        } else if let e = dns1035(value)
            && !e.is_empty()
        {
            errs.push(fe::invalid(&p, Bad::str(value), &e.join(",")));
        }
    }
    for (field, value) in [("kind", &kind), ("listKind", &list_kind)] {
        let p = format!("spec.names.{field}");
        if value.is_empty() {
            errs.push(fe::required(&p, ""));
        } else if let e = dns1035(&value.to_lowercase())
            && !e.is_empty()
        {
            errs.push(fe::invalid(
                &p,
                Bad::str(value),
                &format!("may have mixed case, but should otherwise match: {}", e.join(",")),
            ));
        }
    }
    if !kind.is_empty() && kind == list_kind {
        errs.push(fe::invalid("spec.names.listKind", Bad::str(&list_kind), "kind and listKind may not be the same"));
    }
    for (field, list) in [("shortNames", &short_names), ("categories", &categories)] {
        for (i, s) in list.iter().enumerate() {
            let e = dns1035(s);
            if !e.is_empty() {
                errs.push(fe::invalid(&fe::index(&format!("spec.names.{field}"), i), Bad::str(s), &e.join(",")));
            }
        }
    }

    if let Some(strategy) = spec.pointer("/conversion/strategy").and_then(Value::as_str)
        && !matches!(strategy, "None" | "Webhook")
    {
        errs.push(fe::not_supported(
            "spec.conversion.strategy",
            Bad::str(strategy),
            &["None".into(), "Webhook".into()],
        ));
    }
    if spec.get("preserveUnknownFields") == Some(&Value::Bool(true)) {
        errs.push(fe::invalid(
            "spec.preserveUnknownFields",
            Bad::Json(Value::Bool(true)),
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        ));
    }

    let raw_versions = spec.get("versions").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut versions = Vec::new();
    let mut storage = 0;
    let mut seen = Vec::new();
    let mut unique = true;
    for (i, v) in raw_versions.iter().enumerate() {
        let vp = fe::index("spec.versions", i);
        let vname = text(v, "name").to_string();
        if vname.is_empty() {
            errs.push(fe::required(&fe::child(&vp, "name"), ""));
        } else if let e = dns1035(&vname)
            && !e.is_empty()
        {
            errs.push(fe::invalid(&fe::child(&vp, "name"), Bad::str(&vname), &e.join(",")));
        }
        if seen.contains(&vname) {
            unique = false;
        }
        seen.push(vname.clone());
        let served = v.get("served").and_then(Value::as_bool).unwrap_or(false);
        let is_storage = v.get("storage").and_then(Value::as_bool).unwrap_or(false);
        if is_storage {
            storage += 1;
        }
        let schema_value = v.pointer("/schema/openAPIV3Schema").cloned();
        match &schema_value {
            None => errs.push(fe::required(&format!("{vp}.schema.openAPIV3Schema"), "schemas are required")),
            Some(s) => {
                let sp = format!("{vp}.schema.openAPIV3Schema");
                structural(s, &sp, Level::Root, &mut errs);
                cel::check_rules(s, &sp, true, &mut errs);
            }
        }
        let schema_value = schema_value.unwrap_or(Value::Null);
        let printer_columns = v.get("additionalPrinterColumns").and_then(Value::as_array).cloned().unwrap_or_default();
        for (j, c) in printer_columns.iter().enumerate() {
            check_column(c, &fe::index(&fe::child(&vp, "additionalPrinterColumns"), j), &mut errs);
        }
        let selectable_fields: Vec<String> = v
            .get("selectableFields")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|f| text(f, "jsonPath").to_string()).collect())
            .unwrap_or_default();
        check_selectable(&selectable_fields, &schema_value, &fe::child(&vp, "selectableFields"), &mut errs);
        let status_subresource = v.pointer("/subresources/status").is_some_and(|s| !s.is_null());
        let scale_subresource = v.pointer("/subresources/scale").filter(|s| !s.is_null()).cloned();
        if let Some(scale) = &scale_subresource {
            check_scale(scale, &format!("{vp}.subresources.scale"), &mut errs);
        }
        versions.push(CrdVersion {
            name: vname,
            served,
            storage: is_storage,
            schema: std::sync::Arc::new(schema_value),
            status_subresource,
            scale_subresource,
            printer_columns,
            selectable_fields,
        });
    }
    if raw_versions.is_empty() {
        errs.push(fe::required("spec.versions", "must have exactly one version marked as storage version"));
    } else {
        if !unique {
            errs.push(fe::invalid(
                "spec.versions",
                Bad::Json(Value::Array(raw_versions.clone())),
                "must contain unique version names",
            ));
        }
        if storage != 1 {
            errs.push(fe::invalid(
                "spec.versions",
                Bad::Json(Value::Array(raw_versions.clone())),
                "must have exactly one version marked as storage version",
            ));
        }
    }

    if !errs.is_empty() {
        return Err(errs);
    }
    Ok(CrdModel { group, plural, singular, kind, list_kind, short_names, categories, namespaced, versions })
}

#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Property,
    Items,
}

/// The structural-schema rules (a subset of `ValidateStructural`) and defaults that validate.
fn structural(s: &Value, path: &str, level: Level, errs: &mut Vec<Cause>) {
    let Some(obj) = s.as_object() else {
        errs.push(fe::invalid(path, Bad::Json(s.clone()), "must be an object"));
        return;
    };
    let t = ty(s);
    let int_or_string = schema::flag(s, "x-kubernetes-int-or-string");
    let preserve = schema::flag(s, "x-kubernetes-preserve-unknown-fields");
    match level {
        Level::Root if t != "object" => {
            errs.push(fe::invalid(&fe::child(path, "type"), Bad::str(t), "must be object at the root"))
        }
        Level::Property | Level::Items if t.is_empty() && !int_or_string && !preserve => errs.push(fe::required(
            &fe::child(path, "type"),
            if level == Level::Items {
                "must not be empty for specified array items"
            } else {
                "must not be empty for specified object fields"
            },
        )),
        _ => {}
    }
    if !t.is_empty() && !matches!(t, "object" | "array" | "string" | "integer" | "number" | "boolean") {
        errs.push(fe::not_supported(
            &fe::child(path, "type"),
            Bad::str(t),
            &["array", "boolean", "integer", "number", "object", "string"].map(String::from),
        ));
    }
    for forbidden in ["$ref", "definitions", "dependencies", "id", "patternProperties", "additionalItems", "$schema"] {
        if obj.contains_key(forbidden) {
            errs.push(fe::forbidden(&fe::child(path, forbidden), &format!("{forbidden} is not supported")));
        }
    }
    if schema::flag(s, "uniqueItems") {
        errs.push(fe::forbidden(
            &fe::child(path, "uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if s.get("additionalProperties") == Some(&Value::Bool(false)) {
        errs.push(fe::forbidden(
            &fe::child(path, "additionalProperties"),
            "additionalProperties cannot be set to false",
        ));
    }
    if obj.contains_key("properties") && obj.get("additionalProperties").is_some_and(|a| a != &Value::Bool(false)) {
        errs.push(fe::forbidden(
            &fe::child(path, "additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if t == "array" && items(s).is_none() {
        errs.push(fe::required(&fe::child(path, "items"), "must be specified"));
    }
    match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
        None => {
            if obj.contains_key("x-kubernetes-list-map-keys") {
                errs.push(fe::forbidden(
                    &fe::child(path, "x-kubernetes-list-map-keys"),
                    "must only be used if x-kubernetes-list-type is \"map\"",
                ));
            }
        }
        Some(lt) => {
            if t != "array" {
                errs.push(fe::invalid(
                    &fe::child(path, "x-kubernetes-list-type"),
                    Bad::str(lt),
                    "must only be used on type=array",
                ));
            }
            match lt {
                "atomic" | "set" => {}
                "map" => {
                    let keys = list_map_keys(s);
                    if keys.is_empty() {
                        errs.push(fe::required(
                            &fe::child(path, "x-kubernetes-list-map-keys"),
                            "must not be empty if x-kubernetes-list-type is map",
                        ));
                    }
                    if let Some(is) = items(s) {
                        if ty(is) != "object" {
                            errs.push(fe::invalid(
                                &format!("{path}.items.type"),
                                Bad::str(ty(is)),
                                "must be object if parent array's x-kubernetes-list-type is map",
                            ));
                        }
                        let req = strings(is, "required");
                        for (i, k) in keys.iter().enumerate() {
                            match props(is).and_then(|p| p.get(k)) {
                                None => errs.push(fe::invalid(
                                    &fe::index(&fe::child(path, "x-kubernetes-list-map-keys"), i),
                                    Bad::str(k),
                                    "entries must all be names of item properties",
                                )),
                                Some(p) => {
                                    if !matches!(ty(p), "string" | "integer" | "number" | "boolean") {
                                        errs.push(fe::invalid(
                                            &format!("{path}.items.properties[{k}].type"),
                                            Bad::str(ty(p)),
                                            "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                        ));
                                    }
                                    if !req.contains(k) && p.get("default").is_none() {
                                        errs.push(fe::required(
                                            &format!("{path}.items.properties[{k}]"),
                                            "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                                        ));
                                    }
                                }
                            }
                        }
                    }
                }
                other => errs.push(fe::not_supported(
                    &fe::child(path, "x-kubernetes-list-type"),
                    Bad::str(other),
                    &["atomic".into(), "map".into(), "set".into()],
                )),
            }
        }
    }
    if let Some(d) = s.get("default") {
        check_default(s, d, path, errs);
    }
    if let Some(p) = props(s) {
        let mut keys: Vec<&String> = p.keys().collect();
        keys.sort();
        for k in keys {
            structural(&p[k.as_str()], &format!("{path}.properties[{k}]"), Level::Property, errs);
        }
    }
    if let Some(a) = addl(s) {
        structural(a, &fe::child(path, "additionalProperties"), Level::Property, errs);
    }
    if let Some(is) = items(s) {
        structural(is, &fe::child(path, "items"), Level::Items, errs);
    }
}

/// A default must be pruned (no unknown fields) and validate against its schema.
fn check_default(s: &Value, d: &Value, path: &str, errs: &mut Vec<Cause>) {
    let dp = fe::child(path, "default");
    let mut pruned = d.clone();
    let mut unknown = Vec::new();
    schema::prune(&mut pruned, Some(s), "", false, &mut unknown);
    if !unknown.is_empty() {
        errs.push(fe::invalid(
            &dp,
            Bad::Json(d.clone()),
            &format!("must not have unknown fields: {}", unknown.join(", ")),
        ));
        return;
    }
    let mut verrs = Vec::new();
    schema::validate_value(s, d, None, "", &mut verrs);
    schema::validate_list_types(s, d, "", &mut verrs);
    for mut c in verrs {
        c.field = if c.field == "<nil>" { dp.clone() } else { format!("{dp}.{}", c.field) };
        errs.push(c);
    }
}

fn check_column(c: &Value, path: &str, errs: &mut Vec<Cause>) {
    let types = ["boolean", "date", "integer", "number", "string"].map(String::from);
    let formats = ["byte", "date", "date-time", "double", "float", "int32", "int64", "password"].map(String::from);
    if text(c, "name").is_empty() {
        errs.push(fe::required(&fe::child(path, "name"), ""));
    }
    match text(c, "type") {
        "" => errs.push(fe::required(&fe::child(path, "type"), &format!("must be one of {}", types.join(",")))),
        t if !types.iter().any(|x| x == t) => {
            errs.push(fe::not_supported(&fe::child(path, "type"), Bad::str(t), &types))
        }
        _ => {}
    }
    let f = text(c, "format");
    if !f.is_empty() && !formats.iter().any(|x| x == f) {
        errs.push(fe::not_supported(&fe::child(path, "format"), Bad::str(f), &formats));
    }
    let jp = text(c, "jsonPath");
    if jp.is_empty() {
        errs.push(fe::required(&fe::child(path, "jsonPath"), ""));
    } else if jsonpath::parse(jp).is_err() || !jp.trim_start_matches('{').starts_with('.') {
        errs.push(fe::invalid(&fe::child(path, "jsonPath"), Bad::str(jp), "must be a simple json path"));
    }
    if c.get("priority").and_then(Value::as_i64).is_some_and(|p| p < 0) {
        errs.push(fe::invalid(&fe::child(path, "priority"), Bad::Json(c["priority"].clone()), "must not be negative"));
    }
}

/// The schema node a simple field path (`.spec.a.b`) leads to.
fn schema_at<'a>(s: &'a Value, path: &str) -> Option<&'a Value> {
    let steps = jsonpath::parse(path).ok()?;
    let mut cur = s;
    for st in steps {
        match st {
            jsonpath::Step::Field(f) => {
                cur = match props(cur).and_then(|p| p.get(&f)) {
                    Some(x) => x,
                    None if f == "metadata" => return Some(&Value::Null),
                    None => addl(cur)?,
                };
            }
            _ => return None,
        }
    }
    Some(cur)
}

fn check_selectable(fields: &[String], s: &Value, path: &str, errs: &mut Vec<Cause>) {
    if fields.len() > 8 {
        errs.push(fe::too_many(path, fields.len() as i64, 8));
    }
    let mut seen: Vec<&String> = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let p = fe::child(&fe::index(path, i), "jsonPath");
        if f.is_empty() {
            errs.push(fe::required(&p, ""));
            continue;
        }
        match schema_at(s, f) {
            None => errs.push(fe::invalid(&p, Bad::str(f), "is an invalid path: does not refer to a valid field")),
            Some(node) => {
                if node.is_null() {
                    errs.push(fe::invalid(&p, Bad::str(f), "must not point to fields in metadata"));
                } else if !matches!(ty(node), "string" | "integer" | "boolean") {
                    errs.push(fe::invalid(&p, Bad::str(f), "must point to a field of type string, boolean or integer"));
                }
            }
        }
        if seen.contains(&f) {
            errs.push(fe::duplicate(&p, Bad::str(f)));
        }
        seen.push(f);
    }
}

fn check_scale(scale: &Value, path: &str, errs: &mut Vec<Cause>) {
    let spec = text(scale, "specReplicasPath");
    if spec.is_empty() {
        errs.push(fe::required(&fe::child(path, "specReplicasPath"), ""));
    } else if !spec.starts_with(".spec.") {
        errs.push(fe::invalid(
            &fe::child(path, "specReplicasPath"),
            Bad::str(spec),
            "should be a json path under .spec",
        ));
    }
    let status = text(scale, "statusReplicasPath");
    if status.is_empty() {
        errs.push(fe::required(&fe::child(path, "statusReplicasPath"), ""));
    } else if !status.starts_with(".status.") {
        errs.push(fe::invalid(
            &fe::child(path, "statusReplicasPath"),
            Bad::str(status),
            "should be a json path under .status",
        ));
    }
    let sel = text(scale, "labelSelectorPath");
    if !(sel.is_empty() || sel.starts_with(".spec.") || sel.starts_with(".status.")) {
        errs.push(fe::invalid(
            &fe::child(path, "labelSelectorPath"),
            Bad::str(sel),
            "should be a json path under either .spec or .status",
        ));
    }
}
