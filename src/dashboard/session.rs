//! Signing in and out of the manager-served dashboard: the form, checking a pasted token with the
//! API server (a SelfSubjectReview, which stores nothing), and the cookies ([`super::auth`]).

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};

use super::auth::{self, Tokens};
use crate::dashboard::web;

/// The sign-in form with `status`, `next` and `message`, setting `cookies`.
pub fn form(status: StatusCode, next: &str, message: &str, cookies: &[String]) -> Response {
    let mut response = (status, Html(web::signin::render(next, message))).into_response();
    set_cookies(&mut response, cookies);
    response
}

fn set_cookies(response: &mut Response, cookies: &[String]) {
    for c in cookies {
        if let Ok(v) = HeaderValue::from_str(c) {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
}

/// Whether cookies are marked `Secure`: always, but when the browser came to a loopback name (a
/// `kubectl port-forward`), where it treats plain HTTP as secure anyway. Served over plain HTTP
/// under another name, the browser then refuses the cookie, so a token never crosses a network
/// in clear text.
pub fn secure(headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    !super::host_allowed(host, true)
}

/// Whether a form post comes from a page of this site: a page of another site must not sign the
/// browser in with a token of its choosing (login CSRF). Browsers send `Origin` on every POST and
/// `Sec-Fetch-Site`; a client without them (curl) is not a browser another site can drive.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = value("sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return false;
    }
    let Some(origin) = value("origin") else { return true };
    let Some(origin) = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://")) else {
        return false;
    };
    // The name the browser used: `Host`, or the one a reverse proxy that rewrote it passes on.
    [value("host"), value("x-forwarded-host")].into_iter().flatten().any(|h| h.eq_ignore_ascii_case(origin))
}

/// The fields of the sign-in form.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Fields {
    /// The token pasted.
    pub token: String,
    /// The namespace asked for (may be empty).
    pub namespace: String,
    /// Where to go after.
    pub next: String,
}

/// The fields of an `application/x-www-form-urlencoded` body.
pub fn fields(body: &[u8]) -> Fields {
    let mut f = Fields::default();
    for (k, v) in form_urlencoded::parse(body) {
        match k.as_ref() {
            "token" => f.token = v.trim().to_string(),
            "namespace" => f.namespace = v.trim().to_string(),
            "next" => f.next = v.into_owned(),
            _ => {}
        }
    }
    f
}

/// The namespace of a ServiceAccount's user name (`system:serviceaccount:NS:NAME`).
pub fn service_account_namespace(username: &str) -> Option<&str> {
    let rest = username.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    (auth::namespace_name(ns) && !name.is_empty()).then_some(ns)
}

/// POST `/login`: check the token with the API server, then set the cookies and go to `next`.
pub async fn sign_in(tokens: &Tokens, headers: &HeaderMap, body: &[u8]) -> Response {
    if !same_origin(headers) {
        let page = web::error_page("403 Forbidden", "signing in is accepted only from this dashboard's own form");
        return (StatusCode::FORBIDDEN, Html(page)).into_response();
    }
    let f = fields(body);
    let next = auth::local_path(&f.next);
    if let Err(m) = auth::check_token(&f.token) {
        return form(StatusCode::BAD_REQUEST, next, m, &[]);
    }
    if !f.namespace.is_empty() && !auth::namespace_name(&f.namespace) {
        return form(StatusCode::BAD_REQUEST, next, "the namespace is not a namespace name", &[]);
    }
    let cluster = match tokens.cluster(&f.token, "default") {
        Ok(c) => c,
        Err(e) => return form(StatusCode::BAD_GATEWAY, next, &e.to_string(), &[]),
    };
    let review = Api::<SelfSubjectReview>::all(cluster.client);
    let username = match review.create(&PostParams::default(), &SelfSubjectReview::default()).await {
        Ok(r) => r.status.and_then(|s| s.user_info).and_then(|u| u.username),
        // The review API turned off or forbidden: the token was accepted all the same.
        Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => None,
        Err(kube::Error::Api(s)) if s.code == 401 => {
            tokens.forget(&f.token);
            let message = "The API server did not accept this token: check that it is whole and has not expired.";
            return form(StatusCode::UNAUTHORIZED, next, message, &[]);
        }
        Err(e) => {
            let message = format!("could not check the token with the API server: {e}");
            return form(StatusCode::BAD_GATEWAY, next, &message, &[]);
        }
    };
    let namespace = if f.namespace.is_empty() {
        username.as_deref().and_then(service_account_namespace).unwrap_or("default").to_string()
    } else {
        f.namespace
    };
    tracing::info!(user = username.as_deref().unwrap_or("(unknown)"), "signed in to the dashboard");
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, next.to_string())]).into_response();
    set_cookies(&mut response, &auth::sign_in_cookies(&f.token, &namespace, secure(headers)));
    response
}

/// POST `/logout`: remove the cookies and show the form.
pub fn sign_out(headers: &HeaderMap) -> Response {
    if !same_origin(headers) {
        return (StatusCode::FORBIDDEN, Html(web::error_page("403 Forbidden", "cross-site request refused")))
            .into_response();
    }
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/login")]).into_response();
    set_cookies(&mut response, &auth::sign_out_cookies(secure(headers)));
    response
}

/// Middleware: a page answered to a browser signed in by the form gets a sign-out button.
pub async fn add_sign_out(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let signed_in = auth::cookie(request.headers(), auth::TOKEN_COOKIE).is_some_and(|t| !t.is_empty());
    let response = next.run(request).await;
    let html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if !signed_in || !html || response.status() == StatusCode::UNAUTHORIZED {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "page too large").into_response();
    };
    let page = web::signin::with_sign_out(&String::from_utf8_lossy(&bytes));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(page))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_this_sites_pages_may_post_the_form() {
        // (headers, accepted)
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[("host", "dash.example")], true),
            (&[("host", "dash.example"), ("origin", "https://dash.example")], true),
            (&[("host", "localhost:8090"), ("origin", "http://localhost:8090")], true),
            (&[("host", "dash.example"), ("origin", "https://evil.example")], false),
            (&[("host", "dash.example"), ("origin", "https://dash.example.evil.example")], false),
            (&[("host", "dash.example"), ("origin", "null")], false),
            (&[("origin", "https://dash.example")], false),
            (
                &[
                    ("host", "kuvryn-sync-dashboard:8090"),
                    ("x-forwarded-host", "dash.example"),
                    ("origin", "https://dash.example"),
                ],
                true,
            ),
            (
                &[
                    ("host", "kuvryn-sync-dashboard:8090"),
                    ("x-forwarded-host", "evil.example"),
                    ("origin", "https://dash.example"),
                ],
                false,
            ),
            (&[("host", "dash.example"), ("origin", "ftp://dash.example")], false),
            (&[("host", "dash.example"), ("sec-fetch-site", "same-origin")], true),
            (&[("host", "dash.example"), ("sec-fetch-site", "cross-site")], false),
            (&[("host", "dash.example"), ("sec-fetch-site", "same-site")], false),
        ];
        for (pairs, ok) in cases {
            assert_eq!(same_origin(&headers(pairs)), *ok, "{pairs:?}");
        }
    }

    #[test]
    fn cookies_are_secure_except_on_a_loopback_name() {
        assert!(!secure(&headers(&[("host", "localhost:8090")])));
        assert!(!secure(&headers(&[("host", "127.0.0.1:8090")])));
        assert!(secure(&headers(&[("host", "dash.example")])));
        assert!(secure(&headers(&[])));
    }

    #[test]
    fn the_form_fields_and_a_service_accounts_namespace() {
        let f = fields(b"token=%20abc.def%20&namespace=team-a&next=%2Fapplications%2Fx%2Fy&other=1");
        assert_eq!(f, Fields { token: "abc.def".into(), namespace: "team-a".into(), next: "/applications/x/y".into() });
        assert_eq!(fields(b""), Fields::default());
        // (user name, namespace)
        let cases = [
            ("system:serviceaccount:team-a:deployer", Some("team-a")),
            ("system:serviceaccount:team-a:", None),
            ("system:serviceaccount:Bad:x", None),
            ("alice@example.com", None),
        ];
        for (user, ns) in cases {
            assert_eq!(service_account_namespace(user), ns, "{user}");
        }
    }
}
