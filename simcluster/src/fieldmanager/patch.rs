//! The non-apply patch types as kube-apiserver applies them: JSON merge patch (RFC 7386),
//! JSON patch (RFC 6902) and strategic merge patch (k8s.io/apimachinery strategicpatch with
//! the server's options: parallel lists merged, unmatched nulls ignored).

use serde_json::{Map, Value, json};

use crate::errors::ApiError;
use crate::schema::TypeNav;

/// A patch the server refuses, with the HTTP code, reason and message it answers.
#[derive(Clone, Debug, PartialEq)]
pub struct PatchError {
    /// HTTP status code (400, 422, 500).
    pub code: u16,
    /// Status reason (`BadRequest`, `Invalid`; empty for the 500s of unexpected errors).
    pub reason: String,
    /// Status message.
    pub message: String,
    /// Status details (`{}` for the generic 422), if any.
    pub details: Option<Value>,
}

impl PatchError {
    fn bad_request(message: impl Into<String>) -> PatchError {
        PatchError { code: 400, reason: "BadRequest".into(), message: message.into(), details: None }
    }

    /// The 422 the server answers for a JSON patch that does not apply (whatever the cause).
    fn unprocessable() -> PatchError {
        PatchError {
            code: 422,
            reason: "Invalid".into(),
            message: "the server rejected our request due to an error in our request".into(),
            details: Some(json!({})),
        }
    }

    fn internal(message: impl Into<String>) -> PatchError {
        PatchError { code: 500, reason: String::new(), message: message.into(), details: None }
    }

    /// The Status error to answer.
    pub fn to_api_error(&self) -> ApiError {
        ApiError::status(self.code, &self.reason, self.message.clone(), self.details.clone())
    }
}

impl From<PatchError> for ApiError {
    fn from(e: PatchError) -> ApiError {
        e.to_api_error()
    }
}

impl std::fmt::Display for PatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for PatchError {}

// ---------------------------------------------------------------------------------------------
// JSON merge patch
// ---------------------------------------------------------------------------------------------

/// RFC 7386 JSON merge patch: objects merged recursively, `null` deletes, anything else replaces.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(pm) => {
            let mut out = match target {
                Value::Object(tm) => tm.clone(),
                _ => Map::new(),
            };
            for (k, pv) in pm {
                if pv.is_null() {
                    out.remove(k);
                } else {
                    let merged = merge_patch(out.get(k).unwrap_or(&Value::Null), pv);
                    out.insert(k.clone(), merged);
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

// ---------------------------------------------------------------------------------------------
// JSON patch
// ---------------------------------------------------------------------------------------------

fn go_json_kind(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Null => "null",
    }
}

fn parse_pointer(path: &str) -> Option<Vec<String>> {
    if path.is_empty() {
        return Some(Vec::new());
    }
    let rest = path.strip_prefix('/')?;
    Some(rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect())
}

fn array_index(tok: &str, len: usize, allow_end: bool) -> Option<usize> {
    if allow_end && tok == "-" {
        return Some(len);
    }
    if tok.is_empty() || (tok.len() > 1 && tok.starts_with('0')) || !tok.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let i: usize = tok.parse().ok()?;
    if i > len || (!allow_end && i == len) { None } else { Some(i) }
}

fn get_at<'v>(doc: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut cur = doc;
    for tok in path {
        cur = match cur {
            Value::Object(m) => m.get(tok)?,
            Value::Array(a) => a.get(array_index(tok, a.len(), false)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn parent_mut<'v>(doc: &'v mut Value, path: &[String]) -> Option<&'v mut Value> {
    let mut cur = doc;
    for tok in path {
        cur = match cur {
            Value::Object(m) => m.get_mut(tok)?,
            Value::Array(a) => {
                let i = array_index(tok, a.len(), false)?;
                a.get_mut(i)?
            }
            _ => return None,
        };
    }
    Some(cur)
}

fn add_at(doc: &mut Value, path: &[String], value: Value) -> Option<()> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Some(());
    };
    match parent_mut(doc, parent)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Some(())
        }
        Value::Array(a) => {
            let i = array_index(last, a.len(), true)?;
            a.insert(i, value);
            Some(())
        }
        _ => None,
    }
}

fn remove_at(doc: &mut Value, path: &[String]) -> Option<Value> {
    let (last, parent) = path.split_last()?;
    match parent_mut(doc, parent)? {
        Value::Object(m) => m.remove(last),
        Value::Array(a) => {
            let i = array_index(last, a.len(), false)?;
            Some(a.remove(i))
        }
        _ => None,
    }
}

fn replace_at(doc: &mut Value, path: &[String], value: Value) -> Option<()> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Some(());
    };
    match parent_mut(doc, parent)? {
        Value::Object(m) => {
            let slot = m.get_mut(last)?;
            *slot = value;
            Some(())
        }
        Value::Array(a) => {
            let i = array_index(last, a.len(), false)?;
            a[i] = value;
            Some(())
        }
        _ => None,
    }
}

/// RFC 6902 JSON patch. A body that is not a list is a 400 (as the server's decoding error);
/// any operation that does not apply (failed `test`, missing path, bad op) is the server's
/// generic 422 with empty details.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Value::Array(ops) = patch else {
        return Err(PatchError::bad_request(format!(
            "error decoding patch: json: cannot unmarshal {} into Go value of type []handlers.jsonPatchOp",
            go_json_kind(patch)
        )));
    };
    let mut doc = target.clone();
    for op in ops {
        apply_op(&mut doc, op).ok_or_else(PatchError::unprocessable)?;
    }
    Ok(doc)
}

fn apply_op(doc: &mut Value, op: &Value) -> Option<()> {
    let kind = op.get("op")?.as_str()?;
    let path = parse_pointer(op.get("path")?.as_str()?)?;
    match kind {
        "add" => add_at(doc, &path, op.get("value")?.clone()),
        "remove" => remove_at(doc, &path).map(|_| ()),
        "replace" => replace_at(doc, &path, op.get("value")?.clone()),
        "test" => {
            let want = op.get("value").unwrap_or(&Value::Null);
            match get_at(doc, &path) {
                Some(v) if v == want => Some(()),
                None if want.is_null() => Some(()),
                _ => None,
            }
        }
        "move" => {
            let from = parse_pointer(op.get("from")?.as_str()?)?;
            let v = remove_at(doc, &from)?;
            add_at(doc, &path, v)
        }
        "copy" => {
            let from = parse_pointer(op.get("from")?.as_str()?)?;
            let v = get_at(doc, &from)?.clone();
            add_at(doc, &path, v)
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch
// ---------------------------------------------------------------------------------------------

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER_PREFIX: &str = "$setElementOrder/";
const DELETE_PRIMITIVE_PREFIX: &str = "$deleteFromPrimitiveList/";

/// Go's `%v` of decoded JSON, for error messages.
fn go_fmt(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_fmt).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            format!("map[{}]", keys.into_iter().map(|k| format!("{k}:{}", go_fmt(&m[k]))).collect::<Vec<_>>().join(" "))
        }
    }
}

fn strategies(ty: &TypeNav) -> (bool, bool) {
    let s = ty.patch_strategy().unwrap_or("");
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    (parts.contains(&"merge"), parts.contains(&"replace"))
}

/// Strategic merge patch against a built-in type: lists with a merge strategy merged by their
/// merge key (new items first, as the server orders them), `$patch: delete|replace|merge`,
/// `$setElementOrder/<field>`, `$deleteFromPrimitiveList/<field>` and `$retainKeys`.
pub fn strategic_merge_patch(target: &Value, patch: &Value, ty: &TypeNav) -> Result<Value, PatchError> {
    let Value::Object(pm) = patch else {
        return Err(PatchError::bad_request(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            go_json_kind(patch)
        )));
    };
    let original = match target {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    merge_map(original, pm.clone(), ty).map(Value::Object)
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    ty: &TypeNav,
) -> Result<Map<String, Value>, PatchError> {
    if let Some(d) = patch.get(DIRECTIVE) {
        return match d.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                Ok(strip_directives_map(patch))
            }
            Some("delete") => Ok(Map::new()),
            _ => Err(PatchError::internal(format!(
                "unknown patch type: {} in map: {}",
                go_fmt(d),
                go_fmt(&Value::Object(patch.clone()))
            ))),
        };
    }
    apply_retain_keys(&mut original, &mut patch)?;
    merge_set_element_order(&mut original, &mut patch, ty)?;

    for (k, pv) in patch {
        let (key, delete_list) = match k.strip_prefix(DELETE_PRIMITIVE_PREFIX) {
            Some(rest) => (rest.to_string(), true),
            None => (k.clone(), false),
        };
        if pv.is_null() {
            original.remove(&key);
            continue;
        }
        let Some(ov) = original.get(&key) else {
            if !delete_list {
                original.insert(key, strip_directives(discard_nulls(pv)));
            }
            continue;
        };
        let fty = ty.field(&key);
        let same_kind = matches!((ov, &pv), (Value::Object(_), Value::Object(_)) | (Value::Array(_), Value::Array(_)));
        if !same_kind {
            if !delete_list {
                original.insert(key, strip_directives(discard_nulls(pv)));
            }
            continue;
        }
        let merged = match (ov.clone(), pv) {
            (Value::Object(om), Value::Object(pm2)) => {
                let (_, replace) = strategies(&fty);
                if replace {
                    Value::Object(strip_directives_map(pm2))
                } else {
                    Value::Object(merge_map(om, pm2, &fty)?)
                }
            }
            (Value::Array(oa), Value::Array(pa)) => merge_slice_handler(oa, pa, &fty, delete_list)?,
            (_, pv) => pv,
        };
        original.insert(key, merged);
    }
    Ok(original)
}

fn discard_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, discard_nulls(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(discard_nulls).collect()),
        other => other,
    }
}

fn is_directive_key(k: &str) -> bool {
    k == DIRECTIVE || k == RETAIN_KEYS || k.starts_with(SET_ORDER_PREFIX) || k.starts_with(DELETE_PRIMITIVE_PREFIX)
}

fn strip_directives_map(m: Map<String, Value>) -> Map<String, Value> {
    m.into_iter().filter(|(k, _)| !is_directive_key(k)).map(|(k, v)| (k, strip_directives(v))).collect()
}

fn strip_directives(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_directives_map(m)),
        Value::Array(a) => Value::Array(
            a.into_iter()
                .filter(|x| !x.as_object().is_some_and(|m| m.contains_key(DIRECTIVE)))
                .map(strip_directives)
                .collect(),
        ),
        other => other,
    }
}

fn apply_retain_keys(original: &mut Map<String, Value>, patch: &mut Map<String, Value>) -> Result<(), PatchError> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else { return Ok(()) };
    let Value::Array(list) = retain else {
        return Err(PatchError::bad_request("invalid patch format of retainKeys"));
    };
    let keys: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
    for (k, v) in patch.iter() {
        if v.is_null() || k.starts_with(DELETE_PRIMITIVE_PREFIX) || k.starts_with(SET_ORDER_PREFIX) {
            continue;
        }
        if !keys.contains(&k.as_str()) {
            return Err(PatchError::bad_request("invalid patch format of retainKeys"));
        }
    }
    original.retain(|k, _| keys.contains(&k.as_str()));
    Ok(())
}

fn merge_set_element_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    ty: &TypeNav,
) -> Result<(), PatchError> {
    let order_keys: Vec<String> = patch.keys().filter(|k| k.starts_with(SET_ORDER_PREFIX)).cloned().collect();
    for ok in order_keys {
        let Some(Value::Array(order)) = patch.remove(&ok) else {
            return Err(PatchError::bad_request("invalid patch format of setElementOrder list"));
        };
        let key = ok[SET_ORDER_PREFIX.len()..].to_string();
        let fty = ty.field(&key);
        let merge_key = fty.patch_merge_key().map(str::to_string);
        let orig_list = match original.get(&key) {
            Some(Value::Array(a)) => Some(a.clone()),
            Some(_) => return Err(PatchError::bad_request("invalid patch format of setElementOrder list")),
            None => None,
        };
        let patch_list = match patch.remove(&key) {
            Some(Value::Array(a)) => Some(a),
            Some(_) => return Err(PatchError::bad_request("invalid patch format of setElementOrder list")),
            None => None,
        };
        let merged = match (&orig_list, patch_list) {
            (Some(o), None) => o.clone(),
            (None, Some(p)) => match strip_directives(Value::Array(p)) {
                Value::Array(a) => a,
                _ => Vec::new(),
            },
            (Some(o), Some(p)) => match merge_slice_handler(o.clone(), p, &fty, false)? {
                Value::Array(a) => a,
                other => vec![other],
            },
            (None, None) => continue,
        };
        let mk = merge_key.as_deref();
        let (patch_items, server_only): (Vec<Value>, Vec<Value>) =
            merged.into_iter().partition(|item| index_of(&order, item, mk).is_some());
        let server_order = orig_list.unwrap_or_default();
        let both = normalize_element_order(patch_items, server_only, &order, &server_order, mk);
        original.insert(key, Value::Array(both));
    }
    Ok(())
}

fn merge_slice_handler(
    original: Vec<Value>,
    patch: Vec<Value>,
    ty: &TypeNav,
    delete_list: bool,
) -> Result<Value, PatchError> {
    let (merge, _) = strategies(ty);
    if merge || delete_list {
        merge_slice(original, patch, ty, delete_list).map(Value::Array)
    } else {
        Ok(strip_directives(Value::Array(patch)))
    }
}

/// The position in `list` of the item matching `item` (by merge key for maps).
fn index_of(list: &[Value], item: &Value, merge_key: Option<&str>) -> Option<usize> {
    match (merge_key, item) {
        (Some(k), Value::Object(m)) => {
            let want = m.get(k)?;
            list.iter().position(|x| x.get(k) == Some(want))
        }
        _ => list.iter().position(|x| x == item),
    }
}

fn normalize_element_order(
    mut patch: Vec<Value>,
    mut server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: Option<&str>,
) -> Vec<Value> {
    let pos = |list: &[Value], v: &Value| index_of(list, v, merge_key).map(|i| i as i64).unwrap_or(-1);
    patch.sort_by_key(|v| pos(patch_order, v));
    server_only.sort_by_key(|v| pos(server_order, v));
    // mergeSortedSlice(left = server-only, right = patch items) by the live order.
    let mut out = Vec::with_capacity(patch.len() + server_only.len());
    let (mut left, mut right) = (server_only.into_iter().peekable(), patch.into_iter().peekable());
    loop {
        match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => out.extend(left.by_ref()),
            (None, Some(_)) => out.extend(right.by_ref()),
            (Some(l), Some(r)) => {
                let (li, ri) = (index_of(server_order, l, merge_key), index_of(server_order, r, merge_key));
                let take_left = matches!((li, ri), (Some(a), Some(b)) if a < b);
                if take_left {
                    out.extend(left.next());
                } else {
                    out.extend(right.next());
                }
            }
        }
    }
    out
}

fn merge_slice(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    ty: &TypeNav,
    delete_list: bool,
) -> Result<Vec<Value>, PatchError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let first = original.first().or(patch.first());
    let maps = first.is_some_and(Value::is_object);
    if !maps {
        if delete_list {
            return Ok(original.into_iter().filter(|v| !patch.contains(v)).collect());
        }
        let mut merged: Vec<Value> = Vec::new();
        for v in original.iter().chain(patch.iter()) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        let (patch_items, server_only): (Vec<Value>, Vec<Value>) = merged.into_iter().partition(|v| patch.contains(v));
        return Ok(normalize_element_order(patch_items, server_only, &patch, &original, None));
    }
    let Some(merge_key) = ty.patch_merge_key() else {
        return Err(PatchError::internal("cannot merge lists without merge key for a list".to_string()));
    };
    // Special elements: $patch delete / replace.
    let mut plain = Vec::new();
    let mut replace = false;
    for v in patch {
        let Some(directive) = v.get(DIRECTIVE).cloned() else {
            plain.push(v);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let Some(kv) = v.get(merge_key).cloned() else {
                    return Err(PatchError::internal(format!(
                        "map: {} does not contain declared merge key: {merge_key}",
                        go_fmt(&v)
                    )));
                };
                original.retain(|x| x.get(merge_key) != Some(&kv));
            }
            Some("replace") => replace = true,
            Some("merge") => {
                return Err(PatchError::internal("merging lists cannot yet be specified in the patch"));
            }
            _ => {
                return Err(PatchError::internal(format!(
                    "unknown patch type: {} in map: {}",
                    go_fmt(&directive),
                    go_fmt(&v)
                )));
            }
        }
    }
    let (original, patch) = if replace {
        (plain.into_iter().map(strip_directives).collect::<Vec<_>>(), Vec::new())
    } else {
        (original, plain)
    };
    let server_order = original.clone();
    let it = ty.items();
    let mut merged = original;
    for pv in &patch {
        let Some(kv) = pv.get(merge_key) else {
            return Err(PatchError::internal(format!(
                "map: {} does not contain declared merge key: {merge_key}",
                go_fmt(pv)
            )));
        };
        match merged.iter().position(|x| x.get(merge_key) == Some(kv)) {
            Some(i) => {
                let om = merged[i].as_object().cloned().unwrap_or_default();
                let pm = pv.as_object().cloned().unwrap_or_default();
                merged[i] = Value::Object(merge_map(om, pm, &it)?);
            }
            None => merged.push(strip_directives(discard_nulls(pv.clone()))),
        }
    }
    let mk = Some(merge_key);
    let (patch_items, server_only): (Vec<Value>, Vec<Value>) =
        merged.into_iter().partition(|item| index_of(&patch, item, mk).is_some());
    Ok(normalize_element_order(patch_items, server_only, &patch, &server_order, mk))
}
