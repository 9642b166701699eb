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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
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
