//! Request parsing and content negotiation: query strings, Accept headers, body decoding.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::errors::ApiError;

/// Percent-decode a query component (`+` is a space).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..(i + 3).min(bytes.len())]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) if hex.len() == 2 => {
                        out.push(b);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse a query string (last value of a repeated key wins, as Go's `Get` takes the first: we
/// keep the first).
pub fn parse_query(q: Option<&str>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.entry(percent_decode(k)).or_insert_with(|| percent_decode(v));
    }
    out
}

/// One media range of an Accept header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaRange {
    /// `application/json`, `application/yaml`, `*/*`, ...
    pub mime: String,
    /// Parameters (`as`, `v`, `g`, ...), lowercase keys.
    pub params: BTreeMap<String, String>,
}

impl MediaRange {
    /// A parameter.
    pub fn param(&self, k: &str) -> Option<&str> {
        self.params.get(k).map(String::as_str)
    }
}

/// Parse an Accept header (no header: `*/*`).
pub fn parse_accept(h: Option<&str>) -> Vec<MediaRange> {
    let h = h.unwrap_or("").trim();
    if h.is_empty() {
        return vec![MediaRange { mime: "*/*".into(), params: BTreeMap::new() }];
    }
    h.split(',')
        .filter_map(|part| {
            let mut it = part.split(';');
            let mime = it.next()?.trim().to_lowercase();
            if mime.is_empty() {
                return None;
            }
            let params = it
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_string()))
                .collect();
            Some(MediaRange { mime, params })
        })
        .collect()
}

/// The serialization a response uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

impl Encoding {
    /// Whether a media range asks for this encoding (`*/*` and `application/*` mean JSON).
    pub fn of(m: &MediaRange) -> Option<Encoding> {
        match m.mime.as_str() {
            "application/json" | "*/*" | "application/*" => Some(Encoding::Json),
            "application/yaml" => Some(Encoding::Yaml),
            _ => None,
        }
    }

    /// The Content-Type of this encoding.
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Json => "application/json",
            Encoding::Yaml => "application/yaml",
        }
    }
}

/// Decode a request body by Content-Type (JSON or YAML).
pub fn decode_body(content_type: Option<&str>, body: &[u8]) -> Result<Value, ApiError> {
    let ct = content_type.unwrap_or("application/json").split(';').next().unwrap_or("").trim().to_lowercase();
    if ct == "application/vnd.kubernetes.protobuf" {
        return crate::protobuf::decode(body).map_err(ApiError::bad_request);
    }
    if !matches!(ct.as_str(), "application/json" | "application/yaml" | "*/*" | "") {
        return Err(ApiError::status(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf",
            None,
        ));
    }
    let text = std::str::from_utf8(body).map_err(|e| ApiError::bad_request(format!("body is not UTF-8: {e}")))?;
    if ct.contains("yaml") {
        yaml_to_json(text)
    } else {
        serde_json::from_str(text).map_err(|e| ApiError::bad_request(json_error_message(text, &e)))
    }
}

/// Parse YAML into JSON.
pub fn yaml_to_json(text: &str) -> Result<Value, ApiError> {
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: yaml: {e}")))
}

/// A JSON syntax error message in the style of Go's `encoding/json` as the server reports it.
pub fn json_error_message(_text: &str, e: &serde_json::Error) -> String {
    format!("couldn't get version/kind; json parse error: {e}")
}

/// Encode a value.
pub fn encode(v: &Value, enc: Encoding) -> Vec<u8> {
    match enc {
        Encoding::Json => serde_json::to_vec(v).unwrap_or_default(),
        Encoding::Yaml => serde_saphyr::to_string(v).unwrap_or_default().into_bytes(),
    }
}

/// The first duplicated object key in a JSON document (by name), as Go's strict decoder reports.
pub fn duplicate_field(body: &[u8]) -> Option<String> {
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    struct Finder<'a>(&'a mut Option<String>);
    impl<'de> Visitor<'de> for Finder<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(k) = map.next_key::<String>()? {
                if !seen.insert(k.clone()) && self.0.is_none() {
                    *self.0 = Some(k);
                }
                map.next_value_seed(Seed(self.0))?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Seed(self.0))?.is_some() {}
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    struct Seed<'a>(&'a mut Option<String>);
    impl<'de> serde::de::DeserializeSeed<'de> for Seed<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(Finder(self.0))
        }
    }
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = de.deserialize_any(Finder(&mut found));
    found
}
