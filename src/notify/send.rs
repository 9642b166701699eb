//! Sending one delivery: the provider's request, rate-limited per provider address, retried as
//! [`super::retry`] decides, stopped as soon as this replica no longer owns the Event's shard.
//!
//! What a failure reports (the provider's status and a bounded excerpt of its answer) is
//! redacted of the Secret's values: a provider may echo the URL or token it was called with.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use super::message::{Message, Method, ProviderSecret, Request};
use super::retry::{Verdict, verdict};
use crate::api::notification::Provider;

/// One request's time limit.
pub const TIMEOUT: Duration = Duration::from_secs(15);
/// The longest excerpt of a provider's answer kept.
pub const EXCERPT: usize = 256;
/// Requests per second to one provider address, and the burst above it (Slack's and Discord's
/// webhooks allow about one a second).
pub const RATE: u32 = 1;
pub const BURST: u32 = 5;

/// How a delivery ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The provider accepted it.
    Delivered { attempts: u32, answer: String },
    /// The provider refused it, or kept failing: the reason (redacted, bounded).
    Failed { attempts: u32, reason: String },
    /// It could not be built (a configuration error), or this replica lost the shard mid-way
    /// (the next owner delivers it).
    NotSent { reason: String },
}

/// Sends deliveries. One per replica: its rate limits hold across Notifications.
pub struct Sender {
    client: reqwest::Client,
    limits: Mutex<HashMap<String, Arc<DefaultDirectRateLimiter>>>,
}

impl Default for Sender {
    fn default() -> Self {
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            // A redirect could carry the token to another host.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a reqwest client without custom TLS builds");
        Sender { client, limits: Mutex::new(HashMap::new()) }
    }
}

impl Sender {
    /// Deliver `msg` through `provider`, while `owned()` says this replica still owns the
    /// Event's shard.
    pub async fn deliver(
        &self,
        provider: &Provider,
        secret: &ProviderSecret,
        msg: &Message,
        owned: impl Fn() -> bool,
    ) -> Outcome {
        let secrets = secret_values(secret);
        let mut attempt = 0;
        loop {
            if !owned() {
                return Outcome::NotSent { reason: "this replica no longer owns the shard".into() };
            }
            attempt += 1;
            let now = jiff::Timestamp::now().as_second();
            let msg = Message { sent: now, ..msg.clone() };
            let req = match super::providers::request(provider, secret, &msg) {
                Ok(r) => r,
                Err(reason) => return Outcome::NotSent { reason },
            };
            self.limit(&req.url).until_ready().await;
            let (status, retry_after, text) = self.send(req).await;
            let text = crate::redact::redact(&text, secrets.iter().map(String::as_str));
            let text = super::providers::excerpt(&text, EXCERPT);
            // GitLab refuses to set a state the commit already has: that is delivered.
            let already = status.is_some_and(|s| super::providers::already_delivered(provider.type_, s, &text));
            let status = if already { Some(200) } else { status };
            match verdict(attempt, status, retry_after.as_deref(), &text, now) {
                Verdict::Delivered => return Outcome::Delivered { attempts: attempt, answer: text },
                Verdict::Failed(reason) => return Outcome::Failed { attempts: attempt, reason },
                Verdict::Retry(wait) => {
                    tracing::debug!(attempt, ?wait, status, "a notification delivery is retried");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// One attempt: the status, its `Retry-After`, and the answer's text (or the error's).
    async fn send(&self, req: Request) -> (Option<u16>, Option<String>, String) {
        let method = match req.method {
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
        };
        let mut builder = self.client.request(method, &req.url).body(req.body);
        for (name, value) in req.headers {
            builder = builder.header(name, value);
        }
        match builder.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let retry_after =
                    resp.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(String::from);
                let text = resp.text().await.unwrap_or_default();
                (Some(status), retry_after, text)
            }
            // reqwest's error names the URL: strip it (a webhook URL is a secret).
            Err(e) => (None, None, e.without_url().to_string()),
        }
    }

    fn limit(&self, url: &str) -> Arc<DefaultDirectRateLimiter> {
        let mut limits = self.limits.lock().expect("rate limits lock");
        limits
            .entry(url.to_string())
            .or_insert_with(|| {
                let quota = Quota::per_second(NonZeroU32::new(RATE).expect("RATE > 0"))
                    .allow_burst(NonZeroU32::new(BURST).expect("BURST > 0"));
                Arc::new(RateLimiter::direct(quota))
            })
            .clone()
    }
}

/// What a provider's answer must not show: the Secret's values, and the path and query of the
/// address on their own (a webhook URL's secret part; an error page echoes the path, not the
/// whole URL).
fn secret_values(secret: &ProviderSecret) -> Vec<String> {
    let mut out: Vec<String> =
        [&secret.address, &secret.token, &secret.username].into_iter().flatten().cloned().collect();
    if let Some(url) = secret.address.as_deref().and_then(|a| reqwest::Url::parse(a).ok()) {
        out.extend([url.path().trim_matches('/').to_string(), url.query().unwrap_or_default().to_string()]);
    }
    out.retain(|v| v.len() >= crate::redact::MIN_LEN);
    out
}

/// Time since `start`, for the duration histogram.
pub fn elapsed(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_echoing_the_address_path_is_redacted() {
        let secret = ProviderSecret {
            address: Some("https://hooks.example.com/services/T0/B0/XyZsecret?k=v1".into()),
            token: Some("tok".into()),
            username: None,
        };
        let values = secret_values(&secret);
        let echoed = "404 no_service: /services/T0/B0/XyZsecret (k=v1) tok";
        let shown = crate::redact::redact(echoed, values.iter().map(String::as_str));
        assert!(!shown.contains("XyZsecret") && !shown.contains("k=v1") && !shown.contains("tok"), "{shown}");
    }
}
