//! Microsoft Teams incoming webhooks and Workflows ("Post to a channel when a webhook request
//! is received"): a POST of a `message` carrying one Adaptive Card 1.4
//! (<https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/connectors-using>).
//! Teams answers `200` (classic) or `202` (Workflows), `429` when throttled.

use serde_json::json;

use super::{address, facts, message, post_json, title};
use crate::api::notification::Severity;
use crate::notify::message::{Message, ProviderSecret, Request};

/// The request for `msg`.
pub fn request(secret: &ProviderSecret, msg: &Message) -> Result<Request, String> {
    let url = address(secret)?;
    let color = match msg.severity {
        Severity::Warning => "Attention",
        Severity::Normal => "Good",
    };
    let facts: Vec<_> = facts(msg).into_iter().map(|(k, v)| json!({"title": k, "value": v})).collect();
    let body = json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": [
                    {"type": "TextBlock", "text": title(msg), "weight": "Bolder", "size": "Medium", "color": color, "wrap": true},
                    {"type": "TextBlock", "text": message(msg), "wrap": true},
                    {"type": "FactSet", "facts": facts},
                ],
            },
        }],
    });
    Ok(post_json(url, &body, vec![]))
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{body, header, msg, secret};
    use super::*;

    #[test]
    fn the_documented_shape() {
        let r = request(&secret(), &msg()).unwrap();
        assert_eq!(header(&r, "content-type"), Some("application/json"));
        let b = body(&r);
        assert_eq!(b["type"], "message");
        let a = &b["attachments"][0];
        assert_eq!(a["contentType"], "application/vnd.microsoft.card.adaptive");
        let card = &a["content"];
        assert_eq!(card["type"], "AdaptiveCard");
        assert_eq!(card["version"], "1.4");
        assert_eq!(card["body"][0]["text"], "team/web: HealthTimeout");
        assert_eq!(card["body"][1]["text"], "deployment/web: 0 of 1 Pods available after 2m");
        let facts = card["body"][2]["facts"].as_array().unwrap();
        assert!(facts.iter().any(|f| f["title"] == "Revision" && f["value"] == "web-5f2c"));
    }
}
