//! The dashboard's pages (`ksync ui`) as pure functions: API objects in, HTML out. No client, no
//! server, no clock (the time ages count from comes in). Every string that comes from the
//! cluster goes through [`escape`]: tenants write object names, messages and labels, and a page
//! must never run what they wrote.
//!
//! One file per page: [`apps`] (the Applications table and its filters), [`app`] (one
//! Application), [`graph`] (its resource graph as inline SVG), [`repos`] (Repositories),
//! [`signin`] (the manager-served dashboard's sign-in form); the
//! frame around them (header, navigation, the embedded stylesheet and script) is [`page`].

pub mod app;
pub mod apps;
pub mod graph;
pub mod repos;
pub mod signin;

use std::fmt::Write as _;

use crate::api::common::HealthStatus;

/// The stylesheet, embedded in every page (no CDN: the cluster may have no internet).
pub const STYLE: &str = include_str!("style.css");
/// The script of the Applications page: refreshes the table when the server says Applications
/// changed.
pub const SCRIPT: &str = include_str!("live.js");

/// The `Content-Security-Policy` of every answer: the embedded stylesheet and script, by their
/// SHA-256, are the only style and code a page may run; it may fetch and post only to the
/// dashboard itself, load nothing else, and not be framed. Should a tenant's string ever get
/// through [`escape`], the browser still refuses to run it.
pub fn content_security_policy() -> String {
    use base64::Engine;
    use sha2::{Digest, Sha256};
    let hash = |text: &str| base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()));
    format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; img-src 'self'; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        hash(SCRIPT),
        hash(STYLE)
    )
}

/// `s` with `&`, `<`, `>`, `"` and `'` replaced by entities: safe in element content and in
/// quoted attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` percent-encoded as one path segment or query value (everything but unreserved
/// characters).
pub fn url_part(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The link to an Application's page.
pub fn app_href(namespace: &str, name: &str) -> String {
    format!("/applications/{}/{}", url_part(namespace), url_part(name))
}

/// The CSS class of a state word (`Healthy`, `Degraded`, `Synced`, `True`...): its colour.
pub fn tone_class(word: &str) -> &'static str {
    match word {
        "Healthy" | "Synced" | "True" | "Succeeded" | "create" => "good",
        "Progressing" | "OutOfSync" | "Drifted" | "update" => "warn",
        "Degraded" | "False" | "Failed" | "missing" | "delete" => "bad",
        _ => "dim",
    }
}

/// A state word in its colour.
pub fn badge(word: &str) -> String {
    format!("<span class=\"badge {}\">{}</span>", tone_class(word), escape(word))
}

/// The name of a health status.
pub fn health_word(h: HealthStatus) -> &'static str {
    crate::view::health_name(h)
}

/// A whole page: `title` (escaped here) and `body` (HTML the page functions built, every
/// cluster string in it already escaped). `script`: embed [`SCRIPT`].
pub fn page(title: &str, body: &str, script: bool) -> String {
    let script = if script { format!("<script>{SCRIPT}</script>") } else { String::new() };
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · Kuvryn Sync</title><style>{STYLE}</style></head>\n<body>\
         <header><span class=\"brand\">Kuvryn Sync</span><nav><a href=\"/\">Applications</a>\
         <a href=\"/repositories\">Repositories</a></nav><span class=\"ro\">read-only</span></header>\n\
         <main>{body}</main>{script}</body></html>\n",
        escape(title)
    )
}

/// The page shown instead of another when reading failed: `status` (`403 Forbidden`) and the
/// API server's message.
pub fn error_page(status: &str, message: &str) -> String {
    let hint = if status.starts_with("403") {
        "<p class=\"hint\">The dashboard reads as you (your kubeconfig, or the token you signed in with): ask for read access \
         to these objects, or look at another namespace.</p>"
    } else {
        ""
    };
    page(
        status,
        &format!("<h1>{}</h1><p class=\"error\" id=\"error\">{}</p>{hint}", escape(status), escape(message)),
        false,
    )
}

/// A definition list of `(term, HTML)` rows; the values are HTML already escaped.
pub fn fields(rows: &[(&str, String)]) -> String {
    let mut out = String::from("<dl class=\"fields\">");
    for (k, v) in rows {
        let _ = write!(out, "<dt>{}</dt><dd>{v}</dd>", escape(k));
    }
    out.push_str("</dl>");
    out
}

/// `text` (escaped), or a dim dash when empty.
pub fn text_or_dash(text: &str) -> String {
    if text.is_empty() { "<span class=\"dim\">-</span>".into() } else { escape(text) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(url_part("a b/<c>"), "a%20b%2F%3Cc%3E");
        assert_eq!(app_href("team-a", "web"), "/applications/team-a/web");
    }

    #[test]
    fn the_policy_allows_exactly_the_embedded_script_and_stylesheet() {
        use base64::Engine;
        use sha2::{Digest, Sha256};
        let csp = content_security_policy();
        let p = page("x", "", true);
        // What the browser hashes: the text between the tags.
        let between = |open: &str, close: &str| {
            let start = p.find(open).unwrap() + open.len();
            p[start..start + p[start..].find(close).unwrap()].to_string()
        };
        for (text, directive) in
            [(between("<script>", "</script>"), "script-src"), (between("<style>", "</style>"), "style-src")]
        {
            let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()));
            assert!(csp.contains(&format!("{directive} 'sha256-{hash}'")), "{csp}");
        }
        assert!(csp.starts_with("default-src 'none';") && csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
    }

    #[test]
    fn error_pages_escape_the_message_and_explain_a_403() {
        let p = error_page("403 Forbidden", "applications is forbidden: <b>User</b>");
        assert!(p.contains("applications is forbidden: &lt;b&gt;User&lt;/b&gt;"), "{p}");
        assert!(p.contains("reads as you"));
        assert!(!error_page("404 Not Found", "x").contains("reads as you"));
    }
}
