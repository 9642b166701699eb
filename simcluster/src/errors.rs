//! API errors as the real kube-apiserver writes them: `Status` bodies with reason, code,
//! message and details (causes), and the plain-text 404 of unknown paths.

use serde_json::{Value, json};

/// One `details.causes[]` entry of a Status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldManagerConflict`, ...
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Field path such as `metadata.name` or `spec.replicas`; empty when there is none.
    pub field: String,
}

impl Cause {
    /// A cause.
    pub fn new(reason: &str, message: impl Into<String>, field: impl Into<String>) -> Cause {
        Cause { reason: reason.into(), message: message.into(), field: field.into() }
    }

    /// The JSON form (`field` omitted when empty).
    pub fn to_json(&self) -> Value {
        let mut v = json!({"reason": self.reason, "message": self.message});
        if !self.field.is_empty() {
            v["field"] = json!(self.field);
        }
        v
    }
}

/// An error response.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiError {
    /// A `Status` body.
    Status {
        /// HTTP code.
        code: u16,
        /// `NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, ... (empty: omitted).
        reason: String,
        /// Message.
        message: String,
        /// `details`, if any.
        details: Option<Value>,
    },
    /// Plain text `404 page not found` (unknown paths and groups).
    PageNotFound,
}

/// Result type of request handling.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

impl ApiError {
    /// A Status error.
    pub fn status(code: u16, reason: &str, message: impl Into<String>, details: Option<Value>) -> ApiError {
        ApiError::Status { code, reason: reason.into(), message: message.into(), details }
    }

    /// 404 NotFound for a named object: `<resource>.<group> "name" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> ApiError {
        let qualified = qualified(group, resource);
        ApiError::status(
            404,
            "NotFound",
            format!("{qualified} \"{name}\" not found"),
            Some(details(name, group, resource)),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> ApiError {
        let qualified = qualified(group, resource);
        ApiError::status(
            409,
            "AlreadyExists",
            format!("{qualified} \"{name}\" already exists"),
            Some(details(name, group, resource)),
        )
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
        let qualified = qualified(group, resource);
        ApiError::status(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {qualified} \"{name}\": {why}"),
            Some(details(name, group, resource)),
        )
    }

    /// 422 Invalid with causes: `<Kind>.<group> "name" is invalid: <cause messages>`.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: &[Cause]) -> ApiError {
        let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let msgs: Vec<String> = causes
            .iter()
            .map(|c| if c.field.is_empty() { c.message.clone() } else { format!("{}: {}", c.field, c.message) })
            .collect();
        let message = if msgs.len() == 1 {
            format!("{qualified} \"{name}\" is invalid: {}", msgs[0])
        } else {
            format!("{qualified} \"{name}\" is invalid: [{}]", msgs.join(", "))
        };
        let mut d =
            json!({"name": name, "kind": kind, "causes": causes.iter().map(Cause::to_json).collect::<Vec<_>>()});
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        ApiError::status(422, "Invalid", message, Some(d))
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::status(400, "BadRequest", message, None)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::status(405, "MethodNotAllowed", message, Some(json!({})))
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::status(500, "InternalError", message, None)
    }

    /// HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::Status { code, .. } => *code,
            ApiError::PageNotFound => 404,
        }
    }

    /// The Status body (`None` for plain-text errors).
    pub fn body(&self) -> Option<Value> {
        match self {
            ApiError::Status { code, reason, message, details } => {
                let mut v = json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": message,
                    "code": code,
                });
                if !reason.is_empty() {
                    v["reason"] = json!(reason);
                }
                if let Some(d) = details {
                    v["details"] = d.clone();
                }
                Some(v)
            }
            ApiError::PageNotFound => None,
        }
    }
}

/// `resource.group`, or `resource` for the core group.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") }
}

/// The usual `details` of an object error: name, group (omitted for core), kind (= resource).
pub fn details(name: &str, group: &str, resource: &str) -> Value {
    let mut d = json!({"name": name, "kind": resource});
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}
