//! Clients acting as a tenant's service account, all over one connection pool.
//!
//! An Application's reads and writes of its objects are made as its service account: the
//! controller's own credentials with `Impersonate-User: system:serviceaccount:<ns>:<name>`. A
//! `kube::Client` built per service account from an impersonating configuration has its own TLS
//! configuration, connection pool and handshakes (docs/performance.md measured what sharing them
//! saves), up to a thousand of each on a platform. Here one base
//! client (the budget, the `429` retries, the fences, one pool) carries every service account's
//! requests, and [`client`] gives each service account a `kube::Client` that sets its header on
//! every request before handing it to the base.
//!
//! Contract ([`as_service_account`]): every request sent through a client from [`client`]
//! carries exactly one `Impersonate-User`, the service account's, and no other `Impersonate-*`
//! header: whatever a caller set is removed, so a request is never sent as the controller itself,
//! nor as a user or group a caller named. The base must impersonate no one itself
//! ([`without_impersonation`]), or its own header would replace the service account's.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use kube::client::Body;

/// The header naming whom a request acts as.
const IMPERSONATE_USER: HeaderName = HeaderName::from_static("impersonate-user");

/// `config` acting as itself: every impersonation it names removed (the base of [`client`]).
pub fn without_impersonation(config: &kube::Config) -> kube::Config {
    let mut config = config.clone();
    config.auth_info.impersonate = None;
    config.auth_info.impersonate_groups = None;
    config.auth_info.impersonate_uid = None;
    config.auth_info.impersonate_user_extra = None;
    config
}

/// A client acting as `system:serviceaccount:<namespace>:<name>` through `base` (made with
/// [`without_impersonation`]); its default namespace is `default_namespace`. No groups are named:
/// the API server gives an impersonated ServiceAccount its own groups, and naming them would need
/// the right to impersonate any group. An error when the name cannot be a header value.
pub fn client(
    base: &kube::Client,
    namespace: &str,
    name: &str,
    default_namespace: &str,
) -> Result<kube::Client, kube::Error> {
    let user = HeaderValue::from_str(&format!("system:serviceaccount:{namespace}:{name}"))
        .map_err(|e| kube::Error::HttpError(e.into()))?;
    Ok(kube::Client::new(AsServiceAccount { base: base.clone(), user }, default_namespace))
}

/// A client acting as `system:serviceaccount:<namespace>:<name>` over a base of its own made
/// from `config` (for one-off use, as `ksync diff` does; a replica shares one base).
pub fn standalone(config: &kube::Config, namespace: &str, name: &str) -> Result<kube::Client, kube::Error> {
    let base = kube::Client::try_from(without_impersonation(config))?;
    client(&base, namespace, name, &config.default_namespace)
}

/// `headers` as acting as `user`: every `Impersonate-*` header removed, then `Impersonate-User`
/// set to `user`.
pub fn as_service_account(headers: &mut HeaderMap, user: &HeaderValue) {
    let named: Vec<HeaderName> = headers.keys().filter(|k| k.as_str().starts_with("impersonate-")).cloned().collect();
    for name in named {
        headers.remove(&name);
    }
    headers.insert(IMPERSONATE_USER, user.clone());
}

/// Sends each request through `base` as `user` ([`as_service_account`]).
#[derive(Clone)]
struct AsServiceAccount {
    base: kube::Client,
    user: HeaderValue,
}

impl tower::Service<Request<Body>> for AsServiceAccount {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

    /// Always ready: the base's own queue and budget do the waiting.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        as_service_account(request.headers_mut(), &self.user);
        let base = self.base.clone();
        // Errors come back as the base's `kube::Error`s (a closed fence stays one).
        Box::pin(async move { base.send(request).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_service_account_is_impersonated() {
        let user = HeaderValue::from_static("system:serviceaccount:team:deployer");
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("no header", &[]),
            ("the controller's own impersonation", &[("impersonate-user", "admin")]),
            (
                "a caller's user, groups, uid and extra",
                &[
                    ("impersonate-user", "system:admin"),
                    ("impersonate-group", "system:masters"),
                    ("impersonate-group", "system:authenticated"),
                    ("impersonate-uid", "0"),
                    ("impersonate-extra-scopes", "all"),
                ],
            ),
        ];
        for (what, headers) in cases {
            let mut map = HeaderMap::new();
            map.insert("content-type", HeaderValue::from_static("application/json"));
            for (k, v) in *headers {
                map.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
            }
            as_service_account(&mut map, &user);
            let impersonating: Vec<(&str, &HeaderValue)> = map
                .iter()
                .filter(|(k, _)| k.as_str().starts_with("impersonate-"))
                .map(|(k, v)| (k.as_str(), v))
                .collect();
            assert_eq!(impersonating, [("impersonate-user", &user)], "{what}");
            assert_eq!(map["content-type"], "application/json", "{what}: other headers are kept");
        }
    }

    #[test]
    fn a_name_that_cannot_be_a_header_is_refused() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
            let base = kube::Client::try_from(without_impersonation(&config)).unwrap();
            assert!(client(&base, "team", "deployer", "default").is_ok());
            assert!(client(&base, "team", "bad\nname", "default").is_err());
        });
    }

    #[test]
    fn the_base_impersonates_no_one() {
        let mut config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        config.auth_info.impersonate = Some("admin".into());
        config.auth_info.impersonate_groups = Some(vec!["system:masters".into()]);
        config.auth_info.impersonate_uid = Some("0".into());
        let base = without_impersonation(&config);
        assert_eq!(base.auth_info.impersonate, None);
        assert_eq!(base.auth_info.impersonate_groups, None);
        assert_eq!(base.auth_info.impersonate_uid, None);
        assert_eq!(base.auth_info.impersonate_user_extra, None);
    }
}
