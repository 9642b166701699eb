//! A generic webhook: a POST of the [`Message`] as JSON, signed so the receiver can tell it
//! came from us and is recent.
//!
//! Headers: `X-Ksync-Timestamp: <unix seconds>`, `X-Ksync-Signature: sha256=<hex>` (HMAC-SHA256
//! keyed by the Secret's `token` over `"<timestamp>.<body>"`), `X-Ksync-Delivery: <event uid>`
//! (the same on every retry: a receiver can de-duplicate by it). Without a `token` the request
//! is refused: an unsigned webhook could be forged by anyone who learns its URL.

use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use super::{address, cut, message, post_json};
use crate::notify::message::{Message, ProviderSecret, Request};

/// The header carrying the signed timestamp.
pub const TIMESTAMP: &str = "X-Ksync-Timestamp";
/// The header carrying the signature.
pub const SIGNATURE: &str = "X-Ksync-Signature";
/// The header carrying the Event's uid.
pub const DELIVERY: &str = "X-Ksync-Delivery";

/// The request for `msg`.
pub fn request(secret: &ProviderSecret, msg: &Message) -> Result<Request, String> {
    let url = address(secret)?;
    let key = secret
        .token
        .as_deref()
        .filter(|t| !t.is_empty())
        .ok_or("the provider Secret has no `token` key (the HMAC key of a Webhook)")?;
    let body = json!({
        "event": msg.event,
        "namespace": msg.namespace,
        "application": msg.application,
        "severity": msg.severity,
        "reason": msg.reason,
        "message": message(msg),
        "revision": msg.revision.as_deref().map(|s| cut(s, 253)),
        "commit": msg.commit.as_deref().map(|s| cut(s, 64)),
        "sourceURL": msg.source_url.as_deref().map(|s| cut(s, 1024)),
        "at": msg.at,
    });
    let mut req = post_json(url, &body, vec![]);
    let timestamp = msg.sent.to_string();
    let signature = sign(key.as_bytes(), &timestamp, &req.body);
    req.headers.push((TIMESTAMP.to_string(), timestamp));
    req.headers.push((SIGNATURE.to_string(), format!("sha256={signature}")));
    req.headers.push((DELIVERY.to_string(), msg.event.clone()));
    Ok(req)
}

/// Lower-case hex HMAC-SHA256 keyed by `key` over `"<timestamp>.<body>"`.
pub fn sign(key: &[u8], timestamp: &str, body: &[u8]) -> String {
    // HMAC accepts a key of any length: new_from_slice cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{body, header, msg, secret};
    use super::*;

    #[test]
    fn hmac_sha256_of_rfc_4231() {
        // RFC 4231 test case 2 (key "Jefe"): the MAC the signature is made with.
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn the_documented_shape_and_signature() {
        let r = request(&secret(), &msg()).unwrap();
        assert_eq!(header(&r, "content-type"), Some("application/json"));
        assert_eq!(header(&r, TIMESTAMP), Some("1796493600"));
        assert_eq!(header(&r, DELIVERY), Some("uid-1"));
        let want = format!("sha256={}", sign(b"SECRET-TOKEN", "1796493600", &r.body));
        assert_eq!(header(&r, SIGNATURE), Some(want.as_str()));
        // A receiver verifying by hand: HMAC over "<timestamp>.<body>".
        let mut mac = Hmac::<Sha256>::new_from_slice(b"SECRET-TOKEN").unwrap();
        mac.update(format!("1796493600.{}", String::from_utf8(r.body.clone()).unwrap()).as_bytes());
        assert!(mac.verify_slice(&hex(&want["sha256=".len()..])).is_ok());
        let b = body(&r);
        assert_eq!(b["application"], "web");
        assert_eq!(b["severity"], "Warning");
        assert_eq!(b["commit"], "0123456789abcdef0123456789abcdef01234567");
        assert_eq!(b["event"], "uid-1");
    }

    #[test]
    fn no_token_no_request() {
        let mut s = secret();
        s.token = None;
        assert!(request(&s, &msg()).unwrap_err().contains("token"));
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
}
