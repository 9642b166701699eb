//! Manual approval end to end: the controllers in-process (`testkit::apps::Env`), a real Git
//! server, and the real `ksync` binary approving plans with `ksync sync`, on simcluster and on
//! a real kube-apiserver.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::{Revision, RevisionPhase};
use serde_json::json;
use testkit::apps::{Env, WAIT};
use testkit::{Cluster, eventually};

const NS: &str = "approve";

fn config(color: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: {color}\n")
}

/// `ksync ARGS -n approve`; (exit code, stdout, stderr).
fn ksync(cluster: &Cluster, args: &[&str]) -> (i32, String, String) {
    let out = testkit::ksync::run(cluster, NS, args);
    (out.code, out.stdout, out.stderr)
}

fn phase(r: &Revision) -> Option<RevisionPhase> {
    r.status.as_ref().map(|s| s.phase)
}

fn ready_message(a: &Application) -> String {
    a.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == names::conditions::READY))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

fn sync_state(a: &Application) -> String {
    a.status.as_ref().and_then(|s| s.sync.as_ref()).map(|s| format!("{:?}", s.status)).unwrap_or_default()
}

fn a_manual_sync_application_deploys_only_what_ksync_sync_approved(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let wt = env
            .app_from(
                "web",
                &[("web/config.yaml", &config("blue"))],
                json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                       "destination": {"namespace": NS}, "sync": {"automatic": false, "conflictPolicy": "adopt"}}),
            )
            .await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        let rev = env
            .revision_where("web", "the plan waiting for approval", |r| {
                phase(r) == Some(RevisionPhase::AwaitingApproval)
            })
            .await;
        let digest = rev.status.as_ref().unwrap().plan.as_ref().unwrap().digest.clone();
        let app = eventually("the plan digest on the Application", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (a.status.as_ref()?.sync.as_ref()?.plan_digest.as_deref() == Some(digest.as_str())).then_some(a)
        })
        .await;
        assert!(
            ready_message(&app).contains(&format!("approve plan {digest} with ksync sync")),
            "{}",
            ready_message(&app)
        );
        assert!(cms.get_opt("settings").await.unwrap().is_none(), "nothing is applied before an approval");

        // Without a terminal and without --yes, nothing is approved.
        let (code, _, err) = ksync(&cluster, &["sync", "web"]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("pass --yes"), "{err}");
        assert!(env.apps().get("web").await.unwrap().annotations().get(names::annotations::APPROVED_PLAN).is_none());

        // An approval of another plan changes nothing and says so.
        let stale = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
        let patch = json!({"metadata": {"annotations": {names::annotations::APPROVED_PLAN: stale}}});
        env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        eventually("the stale approval reported", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            ready_message(&a)
                .contains(&format!("the approval of plan {stale} is stale: the current plan is {digest}"))
                .then_some(())
        })
        .await;
        let events = eventually("an ApprovalStale Event", WAIT, || async {
            let ev = env.events("web").await;
            ev.iter().any(|e| e.1 == names::events::APPROVAL_STALE).then_some(ev)
        })
        .await;
        assert!(events.iter().any(|e| e.1 == names::events::APPROVAL_STALE && e.2.contains(stale)), "{events:?}");
        let r = env.revisions().get(&rev.name_any()).await.unwrap();
        assert_eq!(phase(&r), Some(RevisionPhase::AwaitingApproval));
        assert!(r.status.as_ref().unwrap().attempts.is_empty());
        assert!(cms.get_opt("settings").await.unwrap().is_none());

        // `ksync sync --yes` shows the plan and approves exactly its digest, under the user the
        // API server says the client is.
        let (code, out, err) = ksync(&cluster, &["sync", "web", "--yes"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains("ConfigMap approve/settings") && out.contains(&format!("Approved plan {digest}")),
            "{out}"
        );
        let me = Api::<SelfSubjectReview>::all(env.client.clone())
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .unwrap()
            .status
            .unwrap()
            .user_info
            .unwrap()
            .username
            .unwrap();
        let r = env
            .revision_where("web", "the approved Revision Healthy", |r| phase(r) == Some(RevisionPhase::Healthy))
            .await;
        let s = r.status.as_ref().unwrap();
        let approval = s.approval.as_ref().expect("status.approval");
        assert_eq!((approval.user.as_str(), approval.plan_digest.as_str()), (me.as_str(), digest.as_str()));
        assert_eq!(approval.source.as_deref(), Some("ManualSync"));
        assert_eq!(s.attempts.len(), 1);
        assert_eq!(s.plan.as_ref().unwrap().digest, digest, "the Revision keeps the plan it applied");
        assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["color"], "blue");
        let (_, history, _) = ksync(&cluster, &["history", "web"]);
        assert!(history.lines().nth(1).is_some_and(|l| l.contains(&me)), "APPROVED BY: {history}");

        // A hand edit without selfHeal is reported, and `ksync sync` repairs it (taking back the
        // field the edit took over: conflict policy adopt).
        let edit = json!({"data": {"color": "red"}});
        let by_hand = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
        cms.patch("settings", &by_hand, &Patch::Merge(&edit)).await.unwrap();
        eventually("Drifted", WAIT, || async {
            (sync_state(&env.apps().get("web").await.ok()?) == "Drifted").then_some(())
        })
        .await;
        let (code, out, err) = ksync(&cluster, &["sync", "web", "--yes"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("Approving repairs:") && out.contains("~ ConfigMap approve/settings"), "{out}");
        eventually("the drift repaired", WAIT, || async {
            let c = cms.get("settings").await.ok()?;
            let a = env.apps().get("web").await.ok()?;
            (c.data?["color"] == "blue" && sync_state(&a) == "Synced").then_some(())
        })
        .await;
        let r = env.revisions().get(&rev.name_any()).await.unwrap();
        assert_eq!(r.status.as_ref().unwrap().attempts.len(), 2, "the repair is an attempt");

        // Synced: nothing to approve, nothing written.
        let (code, out, _) = ksync(&cluster, &["sync", "web", "--yes"]);
        assert_eq!(code, 0);
        assert!(out.contains("nothing to approve"), "{out}");

        // A new commit waits again: the earlier approval (used) deploys nothing of it.
        let commit = wt.write("web/config.yaml", &config("green")).commit_and_push("green");
        env.refresh("platform", &commit).await;
        let next = env
            .revision_where("web", "the new commit waiting", |r| {
                r.spec.source.commit == commit && phase(r) == Some(RevisionPhase::AwaitingApproval)
            })
            .await;
        env.poke("web", "after the new commit").await;
        let app = eventually("the new plan digest on the Application", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            let d = a.status.as_ref()?.sync.as_ref()?.plan_digest.clone()?;
            (Some(d) == next.status.as_ref()?.plan.as_ref().map(|p| p.digest.clone())).then_some(a)
        })
        .await;
        assert_eq!(sync_state(&app), "OutOfSync");
        assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["color"], "blue");
        let (code, out, err) = ksync(&cluster, &["sync", "web", "--yes"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("~ update"), "{out}");
        eventually("the new commit deployed", WAIT, || async {
            (cms.get("settings").await.ok()?.data?["color"] == "green").then_some(())
        })
        .await;
    });
}

testkit::both!(a_manual_sync_application_deploys_only_what_ksync_sync_approved);
