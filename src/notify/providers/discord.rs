//! Discord webhooks (<https://discord.com/developers/docs/resources/webhook#execute-webhook>):
//! a POST of JSON with one embed. Discord's limits: title 256, description 4,096, field name
//! 256 and value 1,024 characters, 25 fields. Discord answers `204` (or `200`), `429` with
//! `Retry-After`.

use serde_json::json;

use super::{address, cut, facts, message, post_json, title};
use crate::api::notification::{Provider, Severity};
use crate::notify::message::{Message, ProviderSecret, Request};

/// The request for `msg`.
pub fn request(provider: &Provider, secret: &ProviderSecret, msg: &Message) -> Result<Request, String> {
    let url = address(secret)?;
    let color = match msg.severity {
        Severity::Warning => 0xE0_1E_5A,
        Severity::Normal => 0x2E_B6_7D,
    };
    let fields: Vec<_> = facts(msg)
        .into_iter()
        .take(25)
        .map(|(k, v)| json!({"name": k, "value": cut(&v, 1024), "inline": k != "Source" && k != "Commit"}))
        .collect();
    let mut body = json!({
        "username": "Kuvryn Sync",
        "embeds": [{
            "title": cut(&title(msg), 256),
            "description": cut(&message(msg), 4096),
            "color": color,
            "fields": fields,
            "timestamp": msg.at,
        }],
    });
    // Discord webhooks post to their own channel; a `channel` is shown as a mention.
    if let Some(channel) = &provider.channel {
        body["content"] = json!(cut(channel, 128));
    }
    Ok(post_json(url, &body, vec![]))
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{body, msg, provider, secret};
    use super::*;
    use crate::api::notification::ProviderType;

    #[test]
    fn the_documented_shape() {
        let r = request(&provider(ProviderType::Discord), &secret(), &msg()).unwrap();
        let b = body(&r);
        assert_eq!(b["username"], "Kuvryn Sync");
        assert!(b.get("content").is_none());
        let e = &b["embeds"][0];
        assert_eq!(e["title"], "team/web: HealthTimeout");
        assert_eq!(e["timestamp"], "2026-12-05T18:00:00Z");
        assert_eq!(e["color"], 0xE01E5A);
        assert!(e["fields"].as_array().unwrap().iter().any(|f| f["name"] == "Reason" && f["value"] == "HealthTimeout"));
    }

    #[test]
    fn fields_are_within_discords_limits() {
        let mut m = msg();
        m.application = "a".repeat(300);
        m.message = "m".repeat(9000);
        m.source_url = Some("u".repeat(3000));
        let b = body(&request(&provider(ProviderType::Discord), &secret(), &m).unwrap());
        let e = &b["embeds"][0];
        assert!(e["title"].as_str().unwrap().chars().count() <= 256);
        assert!(e["description"].as_str().unwrap().chars().count() <= 4096);
        for f in e["fields"].as_array().unwrap() {
            assert!(f["value"].as_str().unwrap().chars().count() <= 1024);
        }
    }
}
