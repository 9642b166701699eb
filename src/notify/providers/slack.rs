//! Slack incoming webhooks (<https://api.slack.com/messaging/webhooks>): a POST of JSON with a
//! `text` fallback and an attachment coloured by severity, to the webhook URL (the Secret's
//! `address`). Slack answers `200 ok`, `429` with `Retry-After`, `4xx` with an error name.

use serde_json::json;

use super::{address, facts, message, post_json, title};
use crate::api::notification::{Provider, Severity};
use crate::notify::message::{Message, ProviderSecret, Request};

/// The request for `msg`.
pub fn request(provider: &Provider, secret: &ProviderSecret, msg: &Message) -> Result<Request, String> {
    let url = address(secret)?;
    let color = match msg.severity {
        Severity::Warning => "danger",
        Severity::Normal => "good",
    };
    let fields: Vec<_> = facts(msg)
        .into_iter()
        .map(|(k, v)| json!({"title": k, "value": v, "short": k != "Source" && k != "Commit"}))
        .collect();
    let mut body = json!({
        "text": title(msg),
        "attachments": [{
            "color": color,
            "title": title(msg),
            "text": message(msg),
            "fields": fields,
            "ts": msg.sent,
        }],
    });
    if let Some(channel) = &provider.channel {
        body["channel"] = json!(channel);
    }
    Ok(post_json(url, &body, vec![]))
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{body, header, msg, provider, secret};
    use super::*;
    use crate::api::notification::ProviderType;

    #[test]
    fn the_documented_shape() {
        let mut p = provider(ProviderType::Slack);
        p.channel = Some("#deploys".into());
        let r = request(&p, &secret(), &msg()).unwrap();
        assert_eq!(r.url, "https://hooks.example.com/SECRET-ADDRESS");
        assert_eq!(header(&r, "content-type"), Some("application/json"));
        let b = body(&r);
        assert_eq!(b["text"], "team/web: HealthTimeout");
        assert_eq!(b["channel"], "#deploys");
        let a = &b["attachments"][0];
        assert_eq!(a["color"], "danger");
        assert_eq!(a["text"], "deployment/web: 0 of 1 Pods available after 2m");
        let fields = a["fields"].as_array().unwrap();
        assert!(fields.iter().any(|f| f["title"] == "Commit" && f["value"] == msg().commit.unwrap()));
        assert!(fields.iter().any(|f| f["title"] == "Revision" && f["value"] == "web-5f2c"));
    }

    #[test]
    fn no_channel_unless_set() {
        let r = request(&provider(ProviderType::Slack), &secret(), &msg()).unwrap();
        assert!(body(&r).get("channel").is_none());
    }

    #[test]
    fn a_long_message_is_bounded() {
        let mut m = msg();
        m.message = "x".repeat(10_000);
        let r = request(&provider(ProviderType::Slack), &secret(), &m).unwrap();
        assert_eq!(body(&r)["attachments"][0]["text"].as_str().unwrap().chars().count(), 1024);
    }
}
