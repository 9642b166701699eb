//! Who a request of the manager-served dashboard reads as: the bearer token it carries, checked
//! by the API server on every read. The manager's own credentials are never used for a page.
//!
//! A token comes, in this order, from the header an authenticating proxy sets
//! (`--dashboard-token-header`, such as oauth2-proxy's `X-Forwarded-Access-Token`), from
//! `Authorization: Bearer`, or from the `ksync-token` cookie the sign-in form sets. A request with
//! none is answered with the sign-in form (401) and reads nothing: there is no anonymous
//! dashboard. Trusting these headers needs no trust in whoever set them: a token is only as good
//! as the API server finds it, and a forged one reads nothing.
//!
//! Clients are cached by the SHA-256 of their token (never the token itself as a key), for
//! [`CLIENT_IDLE`] after their last use and at most [`MAX_CLIENTS`] at once, so a page does not
//! pay a TLS handshake per request.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, header};
use kube::config::AuthInfo;
use sha2::{Digest, Sha256};

use crate::read::connect::Cluster;

/// The cookie the sign-in form sets: the token itself (HttpOnly, SameSite=Strict).
pub const TOKEN_COOKIE: &str = "ksync-token";
/// The cookie of the namespace shown when the user may not list every namespace.
pub const NAMESPACE_COOKIE: &str = "ksync-namespace";
/// Longest token accepted from the form: a cookie holds about 4 KiB. Longer ones (some OIDC ID
/// tokens) must come in a header.
pub const MAX_COOKIE_TOKEN: usize = 3800;
/// How long a cached client lives after its last use.
pub const CLIENT_IDLE: Duration = Duration::from_secs(600);
/// Most clients cached at once.
pub const MAX_CLIENTS: u64 = 1000;
/// How long a token the API server accepted is taken as valid without asking again
/// ([`Tokens::verify`]): a revoked token opens no new event stream after this long.
pub const VERIFIED_FOR: Duration = Duration::from_secs(60);
/// How long the sign-in cookie lasts (the token may expire sooner: the API server then refuses
/// it and the form is shown again).
pub const COOKIE_MAX_AGE: Duration = Duration::from_secs(12 * 3600);

/// Where a request's token came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The authenticating proxy's header.
    ProxyHeader,
    /// `Authorization: Bearer`.
    Authorization,
    /// The sign-in cookie.
    Cookie,
}

/// The bearer token of a request and where it came from; None without one (an empty value counts
/// as none).
pub fn token(headers: &HeaderMap, proxy_header: Option<&HeaderName>) -> Option<(String, Source)> {
    let value = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(t) = proxy_header.and_then(value).map(|t| t.strip_prefix("Bearer ").unwrap_or(t).trim())
        && !t.is_empty()
    {
        return Some((t.to_string(), Source::ProxyHeader));
    }
    if let Some(t) = value(&header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer ")).map(str::trim)
        && !t.is_empty()
    {
        return Some((t.to_string(), Source::Authorization));
    }
    cookie(headers, TOKEN_COOKIE).filter(|t| !t.is_empty()).map(|t| (t, Source::Cookie))
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().to_string())
}

/// Whether `token` may be stored in the sign-in cookie: 1 to [`MAX_COOKIE_TOKEN`] visible ASCII
/// characters without `;`, `,`, `"` or `\`. Bearer tokens (JWTs, `id.secret` tokens) are.
pub fn check_token(token: &str) -> Result<(), &'static str> {
    if token.is_empty() {
        return Err("paste a bearer token");
    }
    if token.len() > MAX_COOKIE_TOKEN {
        return Err(
            "this token is too long for a cookie: send it in the Authorization header (an authenticating proxy can)",
        );
    }
    if !token.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b';' | b',' | b'"' | b'\\')) {
        return Err("this is not a bearer token: it may hold only visible ASCII characters, without ; , \" or \\");
    }
    Ok(())
}

/// Whether `namespace` is a namespace name (a DNS label), as kept in [`NAMESPACE_COOKIE`].
pub fn namespace_name(namespace: &str) -> bool {
    !namespace.is_empty()
        && namespace.len() <= 63
        && namespace.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !namespace.starts_with('-')
        && !namespace.ends_with('-')
}

/// `Set-Cookie` values signing in with `token` (checked by [`check_token`]) and `namespace`.
/// `secure`: add `Secure`, so the browser sends them only over HTTPS.
pub fn sign_in_cookies(token: &str, namespace: &str, secure: bool) -> [String; 2] {
    let attrs = cookie_attributes(COOKIE_MAX_AGE.as_secs(), secure);
    [format!("{TOKEN_COOKIE}={token}; {attrs}"), format!("{NAMESPACE_COOKIE}={namespace}; {attrs}")]
}

/// `Set-Cookie` values that remove both cookies.
pub fn sign_out_cookies(secure: bool) -> [String; 2] {
    let attrs = cookie_attributes(0, secure);
    [format!("{TOKEN_COOKIE}=; {attrs}"), format!("{NAMESPACE_COOKIE}=; {attrs}")]
}

fn cookie_attributes(max_age: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}")
}

/// Where to go after signing in: `next` when it is a path of this site, else `/`. A value such
/// as `//evil.example` or `https://evil.example` would send the browser elsewhere.
pub fn local_path(next: &str) -> &str {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && !next.bytes().any(|b| b.is_ascii_control());
    if ok { next } else { "/" }
}

/// The configuration of a client reading as `token`: the API server, its CA and timeouts from
/// `base`, and no other credential of `base` (client certificate, token file, exec plugin,
/// impersonation, extra headers).
pub fn user_config(base: &kube::Config, token: &str) -> kube::Config {
    let mut c = kube::Config::new(base.cluster_url.clone());
    c.root_cert = base.root_cert.clone();
    c.root_cert_file = base.root_cert_file.clone();
    c.accept_invalid_certs = base.accept_invalid_certs;
    c.tls_server_name = base.tls_server_name.clone();
    c.proxy_url = base.proxy_url.clone();
    c.connect_timeout = base.connect_timeout;
    c.read_timeout = base.read_timeout;
    c.write_timeout = base.write_timeout;
    c.default_retry = false;
    c.auth_info = AuthInfo { token: Some(token.to_string().into()), ..AuthInfo::default() };
    c
}

/// Clients reading as the tokens requests carry.
pub struct Tokens {
    base: kube::Config,
    /// The authenticating proxy's header, when one is configured.
    pub proxy_header: Option<HeaderName>,
    clients: moka::sync::Cache<[u8; 32], kube::Client>,
    /// Hashes of tokens a review accepted, for [`VERIFIED_FOR`].
    verified: moka::sync::Cache<[u8; 32], ()>,
}

/// The key a token is cached by: its SHA-256, never the token.
pub fn token_key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Tokens {
    /// Clients for the API server of `base` (its credentials are not used).
    pub fn new(base: kube::Config, proxy_header: Option<HeaderName>) -> Tokens {
        let clients = moka::sync::Cache::builder().max_capacity(MAX_CLIENTS).time_to_idle(CLIENT_IDLE).build();
        let verified = moka::sync::Cache::builder().max_capacity(MAX_CLIENTS).time_to_live(VERIFIED_FOR).build();
        Tokens { base, proxy_header, clients, verified }
    }

    /// A client reading as `token`, acting in `namespace`.
    pub fn cluster(&self, token: &str, namespace: &str) -> Result<Cluster, crate::command::Error> {
        let config = user_config(&self.base, token);
        let key = token_key(token);
        let client = self.clients.try_get_with(key, || kube::Client::try_from(config.clone())).map_err(|e| {
            crate::command::Error::Unavailable(format!("making a client for {}: {e}", self.base.cluster_url))
        })?;
        Ok(Cluster { client, namespace: namespace.to_string(), url: self.base.cluster_url.to_string(), config })
    }

    /// Forget the client of `token` (the API server refused it).
    pub fn forget(&self, token: &str) {
        let key = token_key(token);
        self.clients.invalidate(&key);
        self.verified.invalidate(&key);
    }

    /// Whether the API server accepts `token`: one SelfSubjectReview, its answer kept for
    /// [`VERIFIED_FOR`] by the token's hash. What holds a watch open (an event stream) asks
    /// first, so a made-up token costs one refused review and nothing that lasts.
    ///
    /// # Errors
    /// [`crate::command::Error::Unauthorized`] when the API server refuses the token (its client
    /// is forgotten); [`crate::command::Error::Unavailable`] when it could not be asked.
    pub async fn verify(&self, token: &str) -> Result<(), crate::command::Error> {
        use k8s_openapi::api::authentication::v1::SelfSubjectReview;
        let key = token_key(token);
        if self.verified.contains_key(&key) {
            return Ok(());
        }
        let cluster = self.cluster(token, "default")?;
        let review = kube::Api::<SelfSubjectReview>::all(cluster.client);
        match review.create(&kube::api::PostParams::default(), &SelfSubjectReview::default()).await {
            // The review API turned off or forbidden: the token was authenticated all the same.
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => {}
            Err(kube::Error::Api(s)) if s.code == 401 => {
                self.forget(token);
                let message = s.message.clone();
                return Err(crate::command::Error::Unauthorized { message, source: kube::Error::Api(s) });
            }
            Err(e) => {
                return Err(crate::command::Error::Unavailable(format!(
                    "could not check the token with the API server {}: {e}",
                    self.base.cluster_url
                )));
            }
        }
        self.verified.insert(key, ());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_token_is_taken_from_the_proxy_header_then_authorization_then_the_cookie() {
        let proxy = HeaderName::from_static("x-forwarded-access-token");
        // (headers, proxy header configured, token found)
        type Case<'a> = (&'a [(&'a str, &'a str)], bool, Option<(&'a str, Source)>);
        let cases: &[Case] = &[
            (&[], true, None),
            (&[("authorization", "Bearer abc")], false, Some(("abc", Source::Authorization))),
            (&[("authorization", "Basic dXNlcjpwdw==")], false, None),
            (&[("authorization", "Bearer ")], false, None),
            (&[("cookie", "a=b; ksync-token=tok; ksync-namespace=ns")], false, Some(("tok", Source::Cookie))),
            (&[("cookie", "ksync-token=")], false, None),
            (&[("cookie", "not-ksync-token=x")], false, None),
            (
                &[("x-forwarded-access-token", "px"), ("authorization", "Bearer abc"), ("cookie", "ksync-token=c")],
                true,
                Some(("px", Source::ProxyHeader)),
            ),
            (&[("x-forwarded-access-token", "Bearer px")], true, Some(("px", Source::ProxyHeader))),
            // The proxy's header counts only when it is the configured one.
            (&[("x-forwarded-access-token", "px")], false, None),
            (
                &[("x-forwarded-access-token", ""), ("authorization", "Bearer abc")],
                true,
                Some(("abc", Source::Authorization)),
            ),
            (
                &[("authorization", "Bearer abc"), ("cookie", "ksync-token=c")],
                true,
                Some(("abc", Source::Authorization)),
            ),
        ];
        for (pairs, configured, want) in cases {
            let got = token(&headers(pairs), configured.then_some(&proxy));
            assert_eq!(got.as_ref().map(|(t, s)| (t.as_str(), *s)), *want, "{pairs:?} {configured}");
        }
    }

    #[test]
    fn only_bearer_tokens_that_fit_a_cookie_are_accepted_from_the_form() {
        let long = "a".repeat(MAX_COOKIE_TOKEN + 1);
        // (token, accepted)
        let cases = [
            ("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln-_", true),
            ("abcdef.0123456789abcdef", true),
            ("", false),
            ("has space", false),
            ("semi;colon", false),
            ("comma,", false),
            ("quote\"", false),
            ("back\\slash", false),
            ("new\nline", false),
            ("é", false),
            (long.as_str(), false),
        ];
        for (t, ok) in cases {
            assert_eq!(check_token(t).is_ok(), ok, "{t:?}");
        }
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_when_asked() {
        let [t, n] = sign_in_cookies("tok", "team-a", true);
        assert_eq!(t, "ksync-token=tok; Path=/; Max-Age=43200; HttpOnly; SameSite=Strict; Secure");
        assert_eq!(n, "ksync-namespace=team-a; Path=/; Max-Age=43200; HttpOnly; SameSite=Strict; Secure");
        let [t, _] = sign_in_cookies("tok", "team-a", false);
        assert!(!t.contains("Secure"), "{t}");
        let [t, n] = sign_out_cookies(false);
        assert_eq!(t, "ksync-token=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
        assert!(n.starts_with("ksync-namespace=; ") && n.contains("Max-Age=0"), "{n}");
    }

    #[test]
    fn only_local_paths_are_followed_after_signing_in() {
        // (next, where to go)
        let cases = [
            ("/", "/"),
            ("/applications/a/b?x=1", "/applications/a/b?x=1"),
            ("", "/"),
            ("//evil.example/", "/"),
            ("/\\evil.example", "/"),
            ("https://evil.example/", "/"),
            ("evil", "/"),
            ("/a\r\nSet-Cookie: x=y", "/"),
        ];
        for (next, want) in cases {
            assert_eq!(local_path(next), want, "{next:?}");
        }
    }

    #[test]
    fn namespace_names_are_dns_labels() {
        for (ns, ok) in
            [("team-a", true), ("a1", true), ("", false), ("-a", false), ("a-", false), ("A", false), ("a;b", false)]
        {
            assert_eq!(namespace_name(ns), ok, "{ns:?}");
        }
        assert!(!namespace_name(&"a".repeat(64)));
    }

    #[test]
    fn a_users_client_keeps_none_of_the_managers_credentials() {
        let mut base = kube::Config::new("https://10.0.0.1:443".parse().unwrap());
        base.root_cert = Some(vec![b"ca".to_vec()]);
        base.tls_server_name = Some("kubernetes.default.svc".into());
        base.read_timeout = Some(Duration::from_secs(295));
        base.auth_info = AuthInfo {
            token: Some("manager-token".to_string().into()),
            token_file: Some("/var/run/secrets/kubernetes.io/serviceaccount/token".into()),
            client_certificate_data: Some("cert".into()),
            client_key_data: Some("key".to_string().into()),
            impersonate: Some("system:admin".into()),
            username: Some("admin".into()),
            password: Some("pw".to_string().into()),
            ..AuthInfo::default()
        };
        base.headers = vec![(HeaderName::from_static("x-extra"), "1".parse().unwrap())];
        let c = user_config(&base, "user-token");
        use secrecy::ExposeSecret;
        assert_eq!(c.auth_info.token.as_ref().map(|t| t.expose_secret().to_string()).as_deref(), Some("user-token"));
        let mut rest = c.auth_info.clone();
        rest.token = None;
        assert_eq!(
            serde_json::to_value(&rest).unwrap(),
            serde_json::to_value(AuthInfo::default()).unwrap(),
            "a credential of the manager was kept"
        );
        assert!(c.headers.is_empty());
        assert_eq!(c.cluster_url, base.cluster_url);
        assert_eq!(c.root_cert, base.root_cert);
        assert_eq!(c.tls_server_name, base.tls_server_name);
        assert_eq!(c.read_timeout, base.read_timeout);
    }
}
