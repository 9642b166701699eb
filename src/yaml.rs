//! YAML in and out, one place for the parser's limits.
//!
//! serde-saphyr rejects duplicate keys and bounds what one call may build, aliases included (no
//! "billion laughs"): 64 levels of nesting, 64 MiB of scalar text (text an alias repeats counts
//! again), 250,000 nodes plus 1,000,000 replayed through aliases (the test module checks the
//! ones this code relies on). Its default document budget (1,024 documents per stream) is too
//! low for rendered manifests, so [`from_str_multiple`] raises it to [`MAX_DOCUMENTS`].

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

    /// A document with `anchors` small anchors (the library refuses more than 10 aliases per
    /// anchor) and `aliases` references to one anchored scalar of `scalar` bytes.
    fn scalar_bomb(scalar: usize, aliases: usize) -> String {
        let mut s = format!("big: &big {}\n", "x".repeat(scalar));
        for i in 0..aliases / 10 + 1 {
            s.push_str(&format!("a{i}: &a{i} y\n"));
        }
        s.push_str("list: [");
        s.push_str(&"*big, ".repeat(aliases));
        s.push_str("]\n");
        s
    }

    /// Text repeated by aliases counts toward the 64 MiB of scalars a stream may hold, across
    /// its documents: a small input cannot become gigabytes of strings.
    #[test]
    fn bounds_text_repeated_by_aliases() {
        let doc = scalar_bomb(64 * 1024, 600); // 37.5 MiB of text
        assert!(from_str::<Value>(&doc).is_ok());
        let e = from_str_multiple::<Value>(&[doc.as_str(); 2].join("---\n")).unwrap_err().to_string();
        assert!(e.contains("ScalarBytes"), "{e}");
        let e = from_str::<Value>(&scalar_bomb(1 << 20, 50_000)).unwrap_err().to_string();
        assert!(e.contains("ScalarBytes"), "{e}");
    }

    #[test]
    fn aliases_and_merge_keys() {
        let text = "base: &b {image: web, tags: [a, b]}\ncopy: *b\nmerged: {<<: *b, image: api}\nn: &n 3\nm: *n\n";
        let got: Value = from_str(text).unwrap();
        assert_eq!(got["copy"], got["base"]);
        assert_eq!(got["merged"], serde_json::json!({"image": "api", "tags": ["a", "b"]}));
        assert_eq!(got["m"], 3);
    }

    /// Deep nesting is refused with an error, never a stack overflow, in every form.
    #[test]
    fn refuses_deep_nesting() {
        let n = 100_000;
        let cases = [
            ("flow sequences", "[".repeat(n)),
            ("closed flow sequences", format!("{}{}", "[".repeat(n), "]".repeat(n))),
            ("flow mappings", "{a: ".repeat(n)),
            ("block sequences", (0..3_000).map(|i| format!("{}-\n", " ".repeat(i))).collect()),
            ("block sequences on one line", "- ".repeat(n)),
            ("block mappings", (0..3_000).map(|i| format!("{}a:\n", " ".repeat(i))).collect()),
        ];
        for (what, text) in cases {
            let e = from_str::<Value>(&text).expect_err(what).to_string();
            assert!(!e.is_empty(), "{what}");
            let e = from_str_multiple::<Value>(&text).expect_err(what).to_string();
            assert!(!e.is_empty(), "{what}");
        }
    }
}
