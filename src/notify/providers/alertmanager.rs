//! Alertmanager's v2 API (`POST /api/v2/alerts`,
//! <https://github.com/prometheus/alertmanager/blob/main/api/v2/openapi.yaml>): a JSON array of
//! one alert. The Secret's `address` is Alertmanager's base URL; a `token` alone is sent as a
//! bearer token, with a `username` as basic auth. Alertmanager answers `200`, `400` for a bad
//! alert, `5xx` when it cannot take it.
//!
//! A lifecycle Event is a moment, not a state: the alert has no `endsAt`, so Alertmanager
//! resolves it after its `resolve_timeout`.

use base64::Engine;
use serde_json::json;

use super::{address, cut, message, post_json, title};
use crate::api::notification::Severity;
use crate::notify::message::{Message, ProviderSecret, Request};

/// The `alertname` label of every alert.
pub const ALERTNAME: &str = "KsyncApplicationEvent";

/// The request for `msg`.
pub fn request(secret: &ProviderSecret, msg: &Message) -> Result<Request, String> {
    let base = address(secret)?;
    let url = format!("{}/api/v2/alerts", base.trim_end_matches('/'));
    let severity = match msg.severity {
        Severity::Warning => "warning",
        Severity::Normal => "info",
    };
    let mut alert = json!({
        "labels": {
            "alertname": ALERTNAME,
            "namespace": cut(&msg.namespace, 63),
            "application": cut(&msg.application, 253),
            "reason": cut(&msg.reason, 128),
            "severity": severity,
        },
        "annotations": {
            "summary": title(msg),
            "description": message(msg),
            "revision": msg.revision.as_deref().map(|s| cut(s, 253)).unwrap_or_default(),
            "commit": msg.commit.as_deref().map(|s| cut(s, 64)).unwrap_or_default(),
        },
        "startsAt": msg.at,
    });
    if let Some(u) = &msg.source_url {
        alert["generatorURL"] = json!(cut(u, 1024));
    }
    let mut headers = vec![];
    match (secret.username.as_deref(), secret.token.as_deref()) {
        (Some(user), Some(pass)) => {
            let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
            headers.push(("Authorization".to_string(), format!("Basic {basic}")));
        }
        (None, Some(token)) => headers.push(("Authorization".to_string(), format!("Bearer {token}"))),
        _ => {}
    }
    Ok(post_json(url, &json!([alert]), headers))
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{body, header, msg, secret};
    use super::*;

    #[test]
    fn the_documented_shape() {
        let mut s = secret();
        s.address = Some("http://alertmanager.monitoring:9093/".into());
        s.username = None;
        let r = request(&s, &msg()).unwrap();
        assert_eq!(r.url, "http://alertmanager.monitoring:9093/api/v2/alerts");
        assert_eq!(header(&r, "authorization"), Some("Bearer SECRET-TOKEN"));
        let b = body(&r);
        let alerts = b.as_array().unwrap();
        assert_eq!(alerts.len(), 1);
        let a = &alerts[0];
        assert_eq!(a["labels"]["alertname"], ALERTNAME);
        assert_eq!(a["labels"]["application"], "web");
        assert_eq!(a["labels"]["severity"], "warning");
        assert_eq!(a["annotations"]["commit"], "0123456789abcdef0123456789abcdef01234567");
        assert_eq!(a["startsAt"], "2026-12-05T18:00:00Z");
        assert_eq!(a["generatorURL"], "https://git.example.com/team/web.git");
    }

    #[test]
    fn basic_auth_with_a_username() {
        let r = request(&secret(), &msg()).unwrap();
        let want = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("SECRET-USER:SECRET-TOKEN"));
        assert_eq!(header(&r, "authorization"), Some(want.as_str()));
    }

    #[test]
    fn no_auth_without_a_token() {
        let mut s = secret();
        s.token = None;
        s.username = None;
        assert!(header(&request(&s, &msg()).unwrap(), "authorization").is_none());
    }
}
