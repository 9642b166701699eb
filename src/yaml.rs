//! YAML in and out, one place for the parser's limits.
//!
//! serde-saphyr rejects duplicate keys and bounds alias expansion (no "billion laughs"); its
//! default document budget (1,024 documents per stream) is too low for rendered manifests, so
//! [`from_str_multiple`] raises it to [`MAX_DOCUMENTS`].

use serde::de::DeserializeOwned;

/// Most YAML documents accepted in one stream.
pub const MAX_DOCUMENTS: usize = 100_000;

/// A YAML error, with the parser's location information in its message.
pub type Error = serde_saphyr::Error;

fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_documents: MAX_DOCUMENTS,
        },
    }
}

/// Parse one YAML document.
pub fn from_str<T: DeserializeOwned>(s: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(s, options())
}

/// Parse a multi-document YAML stream (empty documents are skipped).
pub fn from_str_multiple<T: DeserializeOwned>(s: &str) -> Result<Vec<T>, Error> {
    serde_saphyr::from_str_multiple_with_options(s, options())
}

/// Serialize one value as a YAML document.
pub fn to_string<T: serde::Serialize>(v: &T) -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn rejects_duplicate_keys() {
        assert!(from_str::<Value>("a: 1\na: 2\n").is_err());
    }

    #[test]
    fn accepts_more_documents_than_the_library_default() {
        let stream = "---\na: 1\n".repeat(2_000);
        let docs: Vec<Value> = from_str_multiple(&stream).unwrap();
        assert_eq!(docs.len(), 2_000);
    }

    #[test]
    fn bounds_alias_expansion() {
        let mut s = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            s.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert!(from_str::<Value>(&s).is_err(), "an alias bomb must be refused");
    }
}
