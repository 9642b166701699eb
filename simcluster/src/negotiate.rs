//! Response shaping by the Accept header: plain objects (JSON or YAML), `Table` (server-side
//! printing), `PartialObjectMetadata`/`PartialObjectMetadataList` (metadata-only clients).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::errors::ApiError;
use crate::http::Encoding;
use crate::registry::ResourceType;
use crate::server::{Req, Target};
use crate::state::State;

/// The representation chosen for a response.
#[derive(Clone, Debug, PartialEq)]
pub enum Form {
    /// The object itself.
    Plain(Encoding),
    /// `meta.k8s.io/<version>` Table.
    Table(String),
    /// `meta.k8s.io/<version>` PartialObjectMetadata (single objects and watch events).
    Metadata(String),
    /// `meta.k8s.io/<version>` PartialObjectMetadataList (lists; watches get no events).
    MetadataList(String),
}

fn not_acceptable() -> ApiError {
    ApiError::status(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        None,
    )
}

/// Choose the representation from the Accept header.
pub fn choose(req: &Req) -> Result<Form, ApiError> {
    if !req.accept.iter().any(|m| Encoding::of(m).is_some() || m.mime == "application/vnd.kubernetes.protobuf") {
        return Err(ApiError::status(
            406,
            "NotAcceptable",
            "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf",
            Some(json!({})),
        ));
    }
    for m in &req.accept {
        let Some(enc) = Encoding::of(m) else { continue };
        match m.param("as") {
            None => return Ok(Form::Plain(enc)),
            Some(as_) => {
                let v = m.param("v").unwrap_or("");
                if m.param("g") != Some("meta.k8s.io") || !matches!(v, "v1" | "v1beta1") {
                    continue;
                }
                match as_ {
                    "Table" => return Ok(Form::Table(v.into())),
                    "PartialObjectMetadata" => return Ok(Form::Metadata(v.into())),
                    "PartialObjectMetadataList" => return Ok(Form::MetadataList(v.into())),
                    _ => continue,
                }
            }
        }
    }
    Err(not_acceptable())
}

fn go_type(rt: &ResourceType, list: bool) -> String {
    if rt.custom {
        return if list { "*unstructured.UnstructuredList".into() } else { "*unstructured.Unstructured".into() };
    }
    let pkg = if rt.group.is_empty() { "core" } else { rt.group.split('.').next().unwrap_or("core") };
    format!("*{pkg}.{}{}", rt.kind, if list { "List" } else { "" })
}

/// The metadata-only form of an object.
pub fn partial(obj: &Value, version: &str) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": format!("meta.k8s.io/{version}"), "metadata": obj["metadata"]})
}

/// Shape a handler's body. Returns the body, its encoding and a Content-Type override.
pub fn shape(
    state: &Arc<State>,
    req: &Req,
    t: &Target,
    body: Value,
    _event: bool,
) -> Result<(Value, Encoding, Option<String>), ApiError> {
    let is_status = body["kind"] == "Status";
    let form = match choose(req) {
        Ok(f) => f,
        Err(e) if is_status => {
            let _ = e;
            Form::Plain(Encoding::Json)
        }
        Err(e) => return Err(e),
    };
    if is_status {
        let enc = if let Form::Plain(e) = form { e } else { Encoding::Json };
        return Ok((body, enc, None));
    }
    let is_list = body.get("items").is_some() && body["kind"].as_str().is_some_and(|k| k.ends_with("List"));
    match form {
        Form::Plain(enc) => Ok((body, enc, None)),
        Form::Metadata(v) => {
            if is_list {
                return Err(ApiError::status(
                    406,
                    "NotAcceptable",
                    format!(
                        "you requested PartialObjectMetadata, but the requested object is a list ({})",
                        go_type(&t.rt, true)
                    ),
                    None,
                ));
            }
            Ok((partial(&body, &v), Encoding::Json, None))
        }
        Form::MetadataList(v) => {
            if !is_list {
                return Err(ApiError::status(
                    406,
                    "NotAcceptable",
                    format!(
                        "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
                        go_type(&t.rt, false)
                    ),
                    None,
                ));
            }
            let items: Vec<Value> = body["items"].as_array().into_iter().flatten().map(|i| partial(i, &v)).collect();
            let mut body = body;
            if body["metadata"]["continue"] == "" {
                body["metadata"].as_object_mut().expect("list metadata").remove("continue");
            }
            Ok((
                json!({"kind": "PartialObjectMetadataList", "apiVersion": format!("meta.k8s.io/{v}"), "metadata": body["metadata"], "items": items}),
                Encoding::Json,
                None,
            ))
        }
        Form::Table(v) => {
            let include = include_object(req)?;
            let (objects, meta) = if is_list {
                (body["items"].as_array().cloned().unwrap_or_default(), body["metadata"].clone())
            } else {
                let rv = body["metadata"]["resourceVersion"].clone();
                (vec![body.clone()], json!({"resourceVersion": rv}))
            };
            let objects: Vec<Value> = objects.into_iter().map(|o| crate::api::with_type(&t.rt, o)).collect();
            let mut table = crate::tables::table(state, &t.rt, &objects, include, meta, &v);
            table["apiVersion"] = json!(format!("meta.k8s.io/{v}"));
            Ok((table, Encoding::Json, None))
        }
    }
}

/// `includeObject` of a Table request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// PartialObjectMetadata (the default).
    Metadata,
    /// The whole object.
    Object,
}

fn include_object(req: &Req) -> Result<IncludeObject, ApiError> {
    match req.q("includeObject").unwrap_or("") {
        "" | "Metadata" => Ok(IncludeObject::Metadata),
        "None" => Ok(IncludeObject::None),
        "Object" => Ok(IncludeObject::Object),
        other => Err(ApiError::bad_request(format!(
            "Unable to convert to Table as requested: includeObject: Invalid value: \"{other}\": must be 'Metadata', 'Object', 'None', or empty"
        ))),
    }
}
