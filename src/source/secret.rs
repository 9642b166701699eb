//! A Repository's Git credentials: its `spec.secretRef` Secret, used only for the URLs the
//! Secret lists. Shared by the controllers and `ksync diff`.

use kube::api::Api;
use kube::{Client, ResourceExt};

use super::Credentials;
use crate::api::names;

/// The credentials of a Repository (`spec.secretRef`) for its `url`, read as the controller;
/// the inner error is a message to report.
///
/// # Contract
/// The manager reads Secrets with its own rights, so a Secret is used only when it says so: its
/// [`names::annotations::GIT_URLS`] annotation lists `url` ([`crate::source::url::allowed_by`]).
/// Otherwise nothing of it is used or sent anywhere, and the message is the same whether the
/// Secret is missing or only not marked for this URL (it tells nothing of a Secret its reader
/// may not see).
pub async fn of_repository(
    client: &Client,
    ns: &str,
    secret_ref: Option<&crate::api::common::LocalObjectReference>,
    url: &str,
) -> Result<Result<Credentials, String>, kube::Error> {
    let Some(r) = secret_ref else { return Ok(Ok(Credentials::default())) };
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let secret = secrets.get_opt(&r.name).await?;
    Ok(usable(secret, &r.name, url))
}

/// The credentials of `secret` (named `name`) when it may be sent to `url` (see [`of_repository`]).
pub fn usable(
    secret: Option<k8s_openapi::api::core::v1::Secret>,
    name: &str,
    url: &str,
) -> Result<Credentials, String> {
    let allowed = secret.as_ref().is_some_and(|s| {
        let listed = s.annotations().get(names::annotations::GIT_URLS);
        let remote = crate::source::url::Remote::parse(url);
        matches!((listed, remote), (Some(l), Ok(remote)) if crate::source::url::allowed_by(&remote, l))
    });
    match secret.filter(|_| allowed) {
        Some(s) => {
            Ok(Credentials::from_secret_data(&s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()))
        }
        None => Err(format!(
            "the credentials Secret {name:?} (spec.secretRef) does not exist, or its {} annotation does not list this \
             Repository's URL: a Secret is sent only to the Git URLs it lists (see Credentials in docs/repositories.md)",
            names::annotations::GIT_URLS
        )),
    }
}

/// Whether a chart Repository's Secret whose [`names::annotations::CHART_URLS`] annotation is
/// `listed` may be sent to `url`: some entry has the same scheme (`https`, `http`, `oci`) and
/// host (case aside), and a path `url`'s path equals or continues at a `/`. No wildcards, no
/// credentials in an entry. Table test: `a_chart_secret_is_sent_only_to_the_urls_it_lists`.
pub fn chart_url_allowed(url: &str, listed: &str) -> bool {
    fn key(u: &str) -> Option<(String, String, String)> {
        let (scheme, rest) = u.trim().split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        if !matches!(scheme.as_str(), "https" | "http" | "oci") {
            return None;
        }
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() || host.contains('@') {
            return None;
        }
        Some((scheme, host.to_ascii_lowercase(), path.trim_end_matches('/').to_string()))
    }
    let Some((scheme, host, path)) = key(url) else { return false };
    listed.split(|c: char| c == ',' || c.is_whitespace()).filter(|e| !e.is_empty()).any(|entry| {
        key(entry).is_some_and(|(s, h, p)| {
            s == scheme
                && h == host
                && (p.is_empty() || path == p || path.strip_prefix(&p).is_some_and(|rest| rest.starts_with('/')))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    #[test]
    fn a_chart_secret_is_sent_only_to_the_urls_it_lists() {
        // (url, listed, allowed)
        let cases = [
            ("https://charts.example.com", "https://charts.example.com", true),
            ("https://charts.example.com/team-a", "https://Charts.Example.com/", true),
            ("oci://registry.example.com/team-a/charts", "oci://registry.example.com/team-a", true),
            (
                "oci://registry.example.com/team-a/charts",
                "https://x.example.com, oci://registry.example.com/team-a/",
                true,
            ),
            ("oci://registry.example.com/team-ab", "oci://registry.example.com/team-a", false),
            ("oci://registry.example.com/team-a", "https://registry.example.com/team-a", false),
            ("https://attacker.example.com", "https://charts.example.com", false),
            ("https://charts.example.com.attacker.io", "https://charts.example.com", false),
            ("https://charts.example.com", "", false),
            ("https://charts.example.com", "charts.example.com", false),
            ("https://u@charts.example.com", "https://charts.example.com", false),
            ("ftp://charts.example.com", "ftp://charts.example.com", false),
        ];
        for (url, listed, allowed) in cases {
            assert_eq!(chart_url_allowed(url, listed), allowed, "{url} by {listed:?}");
        }
    }
    use k8s_openapi::api::core::v1::Secret;

    fn secret(git_urls: Option<&str>) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("team-git".into());
        if let Some(u) = git_urls {
            s.metadata.annotations = Some([(names::annotations::GIT_URLS.to_string(), u.to_string())].into());
        }
        s.data = Some(
            [
                ("username".to_string(), ByteString(b"deploy".to_vec())),
                ("password".to_string(), ByteString(b"hunter22".to_vec())),
            ]
            .into(),
        );
        s
    }

    #[test]
    fn a_secret_is_sent_only_to_the_urls_it_lists() {
        let url = "https://git.example.com/team-a/app.git";
        // (name, the Secret, usable)
        let cases = [
            ("missing", None, false),
            ("not marked for Git (a database password)", Some(secret(None)), false),
            ("marked for another server", Some(secret(Some("https://attacker.example.com/"))), false),
            ("marked for another team's path", Some(secret(Some("https://git.example.com/team-b"))), false),
            ("marked for this URL's directory", Some(secret(Some("https://git.example.com/team-a/"))), true),
            (
                "marked for this host among others",
                Some(secret(Some("ssh://git@x.example.com, https://git.example.com"))),
                true,
            ),
        ];
        let mut refusals = std::collections::BTreeSet::new();
        for (name, s, usable) in cases {
            match super::usable(s, "team-git", url) {
                Ok(c) => {
                    assert!(usable, "{name}: used");
                    assert!(!c.is_anonymous(), "{name}");
                }
                Err(message) => {
                    assert!(!usable, "{name}: refused: {message}");
                    assert!(!message.contains("hunter22") && !message.contains("attacker"), "{message}");
                    refusals.insert(message);
                }
            }
        }
        // One message whatever the reason: nothing tells a missing Secret from an unmarked one.
        assert_eq!(refusals.len(), 1, "{refusals:?}");
    }
}
