//! Every name the product exposes to users: API group, labels, annotations, condition types,
//! condition reasons and Event reasons. Controllers, the CLI, the webhook and tests use these
//! constants and never spell a name inline (see `docs/api.md` for what each one means).

/// The API group of every Kuvryn Sync kind.
pub const GROUP: &str = "sync.kuvryn.io";
/// The one served and stored version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of our objects.
pub const API_VERSION: &str = "sync.kuvryn.io/v1alpha1";
/// Field manager used for Server-Side Apply of managed objects.
pub const FIELD_MANAGER: &str = "kuvryn-sync";
/// Field manager used for our own status writes (kept apart from [`FIELD_MANAGER`]).
pub const STATUS_FIELD_MANAGER: &str = "kuvryn-sync-status";

/// Labels written by Kuvryn Sync.
pub mod labels {
    /// `app.kubernetes.io/managed-by`, on every object Kuvryn Sync applies or creates.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// The value of [`MANAGED_BY`].
    pub const MANAGED_BY_VALUE: &str = "kuvryn-sync";
    /// On an Application discovered from a Repository's `.ksync.yaml`: the Repository's name.
    /// Kuvryn Sync creates, updates and removes exactly the Applications carrying it.
    pub const REPOSITORY: &str = "sync.kuvryn.io/repository";
    /// On Applications and on every object they manage: the shard the Application hashes to.
    pub const SHARD: &str = "sync.kuvryn.io/shard";
    /// The [`SHARD`] label's value until sharding assigns one.
    pub const DEFAULT_SHARD: &str = "0";
    /// On Revisions: the name of their Application (Application names are at most 63 characters).
    pub const APPLICATION: &str = "sync.kuvryn.io/application";
    /// On managed objects: a hash of the owning Application's `namespace/name`, short enough for a
    /// label value; the readable identity is in [`super::annotations::APPLICATION`].
    pub const APPLICATION_ID: &str = "sync.kuvryn.io/application-id";
    /// On a sync hook object Kuvryn Sync created: the Application id, as in
    /// [`APPLICATION_ID`]. Hooks carry this instead of the id label, so they are never in the
    /// managed inventory (never pruned, never checked for drift).
    pub const HOOK_OF: &str = "sync.kuvryn.io/hook-of";
    /// Written by earlier versions into the Pod templates of managed Deployments, StatefulSets
    /// and DaemonSets (so on their Pods): the Application id. No longer written (a stamped
    /// template restarts every Pod of a workload taken over) nor read: Pods are linked to their
    /// Application through their owners ([`crate::watch::pods`]). Kept where a live template
    /// still carries it, so upgrading rolls nothing
    /// ([`crate::plan::inventory::with_kept_pod_stamp`]).
    pub const POD_OF: &str = "sync.kuvryn.io/pod-of";
}

/// Annotations read or written by Kuvryn Sync.
pub mod annotations {
    /// On a discovered Application: the repository-relative `.ksync.yaml` that declares it.
    pub const DISCOVERED_FROM: &str = "sync.kuvryn.io/discovered-from";
    /// On every coordination Lease a replica writes: its shard count (`--shards`). A replica
    /// whose count differs from the one live Leases carry takes no part (`docs/sharding.md`).
    pub const LEASE_SHARDS: &str = sharding::lease::SHARDS_ANNOTATION;
    /// On a managed object: `namespace/name` of the Application that manages it.
    pub const APPLICATION: &str = "sync.kuvryn.io/application";
    /// On an object of a Helm chart's `crds/` folder (value `"true"`): applied in the first wave,
    /// before every other object of the chart, listed as such in the plan, never pruned.
    pub const CHART_CRD: &str = "sync.kuvryn.io/chart-crd";
    /// Per-resource prune opt-out; the only value with meaning is [`PRUNE_DISABLED`].
    pub const PRUNE: &str = "sync.kuvryn.io/prune";
    /// Value of [`PRUNE`] that keeps a resource from ever being pruned.
    pub const PRUNE_DISABLED: &str = "disabled";
    /// Rollout ordering: the wave (an integer, default 0, negative allowed) of a desired object;
    /// each wave is applied, and must be Healthy, before the next higher one.
    pub const SYNC_WAVE: &str = "sync.kuvryn.io/sync-wave";
    /// Marks a desired object as a sync hook: `PreSync`, `Sync`, `PostSync` or `SyncFail`
    /// ([`crate::plan::hooks`]).
    pub const HOOK: &str = "sync.kuvryn.io/hook";
    /// When a hook object is deleted: `BeforeHookCreation` (default), `HookSucceeded`,
    /// `HookFailed`, or a comma-separated list of them.
    pub const HOOK_DELETE_POLICY: &str = "sync.kuvryn.io/hook-delete-policy";
    /// On a hook object Kuvryn Sync created: `<revision>/<attempt>/<phase>`, the run it belongs
    /// to (an object of an earlier run is never taken for this run's).
    pub const HOOK_RUN: &str = "sync.kuvryn.io/hook-run";
    /// Helm's hook annotation (`pre-install`, `post-upgrade`, ...), mapped to a hook phase.
    pub const HELM_HOOK: &str = "helm.sh/hook";
    /// Helm's hook weight, the wave of a Helm hook without `sync.kuvryn.io/sync-wave`.
    pub const HELM_HOOK_WEIGHT: &str = "helm.sh/hook-weight";
    /// Helm's hook delete policy (`before-hook-creation`, `hook-succeeded`, `hook-failed`).
    pub const HELM_HOOK_DELETE_POLICY: &str = "helm.sh/hook-delete-policy";
    /// Ask for an immediate reconcile: any new value (conventionally a timestamp) triggers one;
    /// the value handled last is echoed in `status.lastHandledReconcileAt`.
    pub const RECONCILE_REQUESTED_AT: &str = "sync.kuvryn.io/reconcile-requested-at";
    /// On Revisions: when the controller created it, to the nanosecond (history order).
    pub const CREATED_AT: &str = "sync.kuvryn.io/created-at";
    /// Ask for a forced redeploy (`ksync redeploy`): an RFC 3339 time (at most
    /// [`crate::plan::redeploy::MAX_VALUE_BYTES`] bytes). While it is set, the controller puts
    /// its value, normalized to UTC, under [`RESTARTED_AT`] in the pod template of every desired
    /// Deployment, StatefulSet and DaemonSet of the Application (not its hooks), so a new value
    /// is a new desired state: a new attempt on the same Revision restarts their Pods the way
    /// `kubectl rollout restart` does. Removing it removes the value, which restarts them once
    /// more. Any other value fails the Application with `ValidationFailure` and applies nothing.
    /// The value handled last is echoed in `status.lastHandledRedeployAt`.
    pub const REDEPLOY_REQUESTED_AT: &str = "sync.kuvryn.io/redeploy-requested-at";
    /// kubectl's pod-template annotation that `kubectl rollout restart` sets; the controller
    /// sets it from [`REDEPLOY_REQUESTED_AT`].
    pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

    /// On a Secret: the Git URLs (prefixes, comma- or space-separated) its credentials may be
    /// sent to. A Repository's `spec.secretRef` is used only when it lists the Repository's URL
    /// ([`crate::source::url::allowed_by`]): whoever may edit a Repository must not be able to
    /// send any Secret of the namespace to a server of their choosing.
    pub const GIT_URLS: &str = "sync.kuvryn.io/git-urls";
    /// On a chart Repository's credentials Secret: the chart repository and registry URL
    /// prefixes (`https://`, `http://`, `oci://`; comma- or space-separated) it may be sent to.
    /// The manager reads the Secret with its own rights, so without it nothing of the Secret is
    /// used ([`crate::source::secret::chart_url_allowed`]).
    pub const CHART_URLS: &str = "sync.kuvryn.io/chart-urls";
    /// Prefix shared by every approval annotation.
    pub const APPROVAL_PREFIX: &str = "sync.kuvryn.io/approved-";
    /// Manual approval (`ksync sync`): the plan digest approved
    /// ([`crate::decisions::approval`]).
    pub const APPROVED_PLAN: &str = "sync.kuvryn.io/approved-plan";
    /// Manual approval: who approved, recorded by the admission webhook from the request.
    pub const APPROVED_BY: &str = "sync.kuvryn.io/approved-by";
    /// Manual approval: when, RFC 3339, recorded by the admission webhook.
    pub const APPROVED_AT: &str = "sync.kuvryn.io/approved-at";

    /// Prefix shared by every rollback request annotation; removing all of them abandons a rollback.
    /// The controller acts on them ([`crate::decisions::rollback`]); the admission
    /// webhook checks and records them.
    pub const ROLLBACK_PREFIX: &str = "sync.kuvryn.io/rollback-";
    /// Rollback intent: the source revision (commit) to roll back to.
    pub const ROLLBACK_TO: &str = "sync.kuvryn.io/rollback-to";
    /// Rollback intent: the source revision (commit) rolled back from.
    pub const ROLLBACK_FROM: &str = "sync.kuvryn.io/rollback-from";
    /// Rollback intent: [`ROLLBACK_KIND_MANUAL`] or [`ROLLBACK_KIND_AUTOMATIC`].
    pub const ROLLBACK_KIND: &str = "sync.kuvryn.io/rollback-kind";
    /// Value of [`ROLLBACK_KIND`] for `ksync rollback`.
    pub const ROLLBACK_KIND_MANUAL: &str = "manual";
    /// Value of [`ROLLBACK_KIND`] for a rollback started by a rollback failure policy.
    pub const ROLLBACK_KIND_AUTOMATIC: &str = "automatic";
    /// The Revision object a manual rollback chose (written by `ksync rollback`).
    pub const ROLLBACK_TARGET_REVISION: &str = "sync.kuvryn.io/rollback-target-revision";
    /// Who asked for the rollback, recorded by the admission webhook from the authenticated request.
    pub const ROLLBACK_REQUESTED_BY: &str = "sync.kuvryn.io/rollback-requested-by";
    /// When the rollback was asked for (RFC 3339), recorded by the admission webhook.
    pub const ROLLBACK_REQUESTED_AT: &str = "sync.kuvryn.io/rollback-requested-at";
    /// What the rollback approves: fingerprint of the target Revision's deployed desired state with
    /// `spec.sync` and `spec.strategy` at request time, recorded by the admission webhook.
    pub const ROLLBACK_TARGET_HASH: &str = "sync.kuvryn.io/rollback-target-hash";
}

/// Finalizers.
pub mod finalizers {
    /// Held by an Application with `deletionPolicy: DeleteManagedResources` until its resources
    /// are deleted.
    pub const APPLICATION: &str = "sync.kuvryn.io/delete-managed-resources";
}

/// Condition types.
pub mod conditions {
    /// kstatus: reconciled and healthy. The one condition to gate on.
    pub const READY: &str = "Ready";
    /// kstatus: actively working toward the desired state (transient).
    pub const RECONCILING: &str = "Reconciling";
    /// kstatus: blocked on something retrying will not fix.
    pub const STALLED: &str = "Stalled";
    /// Repository: the source was fetched and the ref resolved.
    pub const SOURCE_READY: &str = "SourceReady";
    /// On a Repository with `spec.receiver`: whether its receiver Secret gave it a path.
    pub const RECEIVER_READY: &str = "ReceiverReady";
    /// Application: every `spec.dependsOn` Application is Healthy at the revision it wants.
    pub const DEPENDENCIES_READY: &str = "DependenciesReady";
    /// Revision: this Revision was rolled back from and is held (never deployed again).
    pub const ROLLED_BACK: &str = "RolledBack";
}

/// Condition reasons and failure classifications.
pub mod reasons {
    /// Ready=True: everything reconciled and healthy.
    pub const SUCCEEDED: &str = "Succeeded";
    /// Work in progress (Reconciling=True).
    pub const PROGRESSING: &str = "Progressing";
    /// `spec.suspend` is true: nothing is reconciled.
    pub const SUSPENDED: &str = "Suspended";
    /// The Git source could not be fetched or the ref not resolved.
    pub const SOURCE_FAILURE: &str = "SourceFailure";
    /// A `.ksync.yaml` could not be read or is invalid.
    pub const CONFIG_FAILURE: &str = "ConfigFailure";
    /// The receiver Secret is missing, has no `token`, or a token shorter than 16 bytes.
    pub const RECEIVER_FAILURE: &str = "ReceiverFailure";
    /// Rendering (YAML, Kustomize, Helm) failed.
    pub const RENDER_FAILURE: &str = "RenderFailure";
    /// The rendered desired state failed validation; nothing was applied.
    pub const VALIDATION_FAILURE: &str = "ValidationFailure";
    /// Server-Side Apply hit an ownership conflict under conflict policy `fail`.
    pub const APPLY_CONFLICT: &str = "ApplyConflict";
    /// The API server refused an apply for another reason (RBAC, admission, schema).
    pub const APPLY_FAILURE: &str = "ApplyFailure";
    /// A prune delete failed.
    pub const PRUNE_FAILURE: &str = "PruneFailure";
    /// Resources were still Progressing when `spec.health.timeout` ran out.
    pub const HEALTH_TIMEOUT: &str = "HealthTimeout";
    /// A resource turned Degraded.
    pub const DEGRADED: &str = "Degraded";
    /// A HealthCheck's CEL expression does not compile, evidently does not return a bool, or
    /// exceeds the cost limit.
    pub const INVALID_EXPRESSION: &str = "InvalidExpression";
    /// An older HealthCheck (then one lower in name) targets the same kind in the namespace.
    pub const DUPLICATE_TARGET: &str = "DuplicateTarget";
    /// Waiting for `spec.dependsOn` Applications (or on a dependency cycle).
    pub const DEPENDENCY_NOT_READY: &str = "DependencyNotReady";
    /// A dependency does not exist.
    pub const DEPENDENCY_NOT_FOUND: &str = "DependencyNotFound";
    /// All dependencies are Healthy at the revision they want.
    pub const DEPENDENCIES_HEALTHY: &str = "DependenciesHealthy";
    /// Manual sync: the plan waits for `ksync sync`.
    pub const AWAITING_APPROVAL: &str = "AwaitingApproval";
    /// The Application runs a rollback target and holds the commit it rolled back from.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// RolledBack condition reason: held by a `ksync rollback`.
    pub const MANUAL_ROLLBACK: &str = "ManualRollback";
    /// RolledBack condition reason: held by an automatic rollback that completed.
    pub const ROLLBACK_COMPLETED: &str = "RollbackCompleted";
    /// The Application's shard has no live owner replica.
    pub const SHARD_ORPHANED: &str = "ShardOrphaned";
    /// On a Revision: a newer Revision became desired while its rollout was running.
    pub const SUPERSEDED: &str = "Superseded";
}

/// Event reasons.
pub mod events {
    /// A Healthy Application turned Degraded while nothing changed in Git.
    pub const HEALTH_DEGRADED: &str = "HealthDegraded";
    /// A drift check found live state that differs from the deployed Revision (without
    /// self-heal, or while self-heal waits for `spec.dependsOn`), naming what drifted; Warning,
    /// sent when the set of drifted resources changes.
    pub const DRIFTED: &str = "Drifted";
    /// Prune skipped resources (opted out or high-risk kinds), or deleting an Application kept
    /// some (opted out, Namespaces and CustomResourceDefinitions holding what it does not
    /// delete); Warning.
    pub const PRUNE_SKIPPED: &str = "PruneSkipped";
    /// A manual rollback approved the plan it applies.
    pub const ROLLBACK_APPROVED: &str = "RollbackApproved";
    /// An approval (`ksync sync`) names another plan than the current one, or a manual
    /// rollback's request no longer approves its target, so it starts nothing.
    pub const APPROVAL_STALE: &str = "ApprovalStale";
    /// The rollback target changed after it was requested; Warning.
    pub const ROLLBACK_TARGET_CHANGED: &str = "RollbackTargetChanged";
    /// A rollback that cannot reach its target was given up; Warning.
    pub const ROLLBACK_ABANDONED: &str = "RollbackAbandoned";
    /// A Repository's reference moved to a new commit (the commit and its subject).
    pub const NEW_REVISION: &str = "NewRevision";
    /// A Repository created, updated or deleted discovered Applications.
    pub const DISCOVERY_CHANGED: &str = "DiscoveryChanged";
    /// A sync hook failed (or was not done within `spec.health.timeout`); Warning.
    pub const HOOK_FAILED: &str = "HookFailed";
}
