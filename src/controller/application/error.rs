//! How a reconcile fails when it must be retried, and the label it is counted under.

/// Errors that make the controller retry with back-off (API failures of the controller's own
/// requests; everything about the Application is reported on it instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed.
    #[error("API request failed: {0}")]
    Kube(#[source] kube::Error),
    /// The object has no namespace.
    #[error("the Application has no namespace")]
    NoNamespace,
    /// This replica stopped owning the Application's shard: the reconcile stops, writing
    /// nothing more.
    #[error("this replica no longer owns the Application's shard")]
    NotOwner,
    /// A rollout was about to act on a plan made from watch caches (a bug if it escapes
    /// [`super::reconcile`]: such plans are made again from a fresh list before anything is written).
    #[error("a rollout needs a plan made from a fresh list")]
    Stale,
    /// An object the plan took as absent exists (the API server refused its create-only
    /// apply, [`crate::decisions::absent`]): planned again at once, reading every object.
    #[error("an object taken as absent exists: planning again from what is there")]
    Presumed,
}

impl Error {
    /// The `result` label of `ksync_reconciles_total` for a reconcile that ended in this error.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) | Error::NoNamespace => "error",
            Error::NotOwner => "not_owner",
            // A rollout about to act on a plan from the watch caches: a bug, counted apart.
            Error::Stale => "stale_plan",
            Error::Presumed => "presumed_absent",
        }
    }
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Error {
        // A write the fence stopped: the shard moved, nothing to retry here.
        if crate::client::is_fence_error(&e) { Error::NotOwner } else { Error::Kube(e) }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn each_error_has_its_metric_label() {
        let api = Error::Kube(kube::Error::LinesCodecMaxLineLengthExceeded);
        assert!(std::error::Error::source(&api).is_some(), "an API error keeps its cause");
        let cases = [
            (api, "error"),
            (Error::NoNamespace, "error"),
            (Error::NotOwner, "not_owner"),
            (Error::Stale, "stale_plan"),
            (Error::Presumed, "presumed_absent"),
        ];
        for (e, want) in cases {
            assert_eq!(e.metric_label(), want, "{e}");
        }
    }
}
