//! The manager's own identity, as the API server authenticates it: what the admission webhook
//! and the Application controller compare a recorded approver or rollback requester with, so
//! that nothing the manager itself wrote counts as a person's decision.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};

/// The prefix of a service account's username.
const SERVICE_ACCOUNT: &str = "system:serviceaccount:";

/// The manager's username when it runs as a service account, as a SelfSubjectReview says;
/// `None` when it runs with anything else (a person's kubeconfig in `ksync dev` or on a laptop,
/// where the manager cannot be told from that person by name) or the review failed (logged).
pub async fn own_service_account(client: &kube::Client) -> Option<String> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    match api.create(&PostParams::default(), &SelfSubjectReview::default()).await {
        Ok(review) => {
            let username = review.status.and_then(|s| s.user_info).and_then(|u| u.username).unwrap_or_default();
            service_account(&username)
        }
        Err(e) => {
            tracing::warn!(error = %e, "who am I (SelfSubjectReview) failed: approvals are told from the manager's by field manager only");
            None
        }
    }
}

/// `username` when it is a service account's.
pub fn service_account(username: &str) -> Option<String> {
    username.starts_with(SERVICE_ACCOUNT).then(|| username.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_service_accounts_are_told_apart() {
        assert_eq!(
            service_account("system:serviceaccount:kuvryn-system:kuvryn-sync").as_deref(),
            Some("system:serviceaccount:kuvryn-system:kuvryn-sync")
        );
        for person in ["admin", "kubernetes-admin", "system:admin", "alice@example.com", ""] {
            assert_eq!(service_account(person), None, "{person}");
        }
    }
}
