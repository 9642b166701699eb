//! The replica's Kubernetes client against an API server (simcluster and realkube): its default
//! budget yields to API Priority and Fairness, and `429 Too Many Requests` is retried.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kuvryn_sync::client::{Budget, FLOW_SCHEMA_HEADER, Limiter};
use simcluster::faults::{FaultAction, FaultRule};
use testkit::{Cluster, temp_dir};

/// The configuration of `kubeconfig`.
async fn config_of(kubeconfig: &std::path::Path) -> kube::Config {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("config")
}

/// `GET path` with `client`: status, and whether the answer names a flow schema.
async fn probe(client: &kube::Client, path: &str) -> (u16, bool) {
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    let response = client.send(request.map(kube::client::Body::from)).await.expect("an answer");
    (response.status().as_u16(), response.headers().contains_key(FLOW_SCHEMA_HEADER))
}

/// As the replica runs: a service account's client with the default budget is lifted after its
/// first answer; an explicit budget is kept. The server classifies every authenticated request,
/// and a request it does not authenticate is answered before Priority and Fairness.
fn the_default_budget_yields_to_priority_and_fairness(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let admin = cluster.client().await;
        let dir = temp_dir("client");
        let kubeconfig =
            testkit::service_account_kubeconfig(&cluster, &admin, dir.path(), "default", "ksync-client").await;
        let config = config_of(&kubeconfig).await;
        let default = Limiter::new(Budget { until_priority_and_fairness: true, ..Budget::default() });
        let explicit = Limiter::new(Budget::default());
        for limiter in [&default, &explicit] {
            assert!(limiter.limits(), "no answer yet: the budget applies");
            let cms: Api<ConfigMap> = Api::namespaced(limiter.client(config.clone()).unwrap(), "default");
            cms.list(&ListParams::default()).await.expect("list as the service account");
        }
        assert!(!default.limits(), "the default budget yields once the server shows Priority and Fairness");
        assert!(explicit.limits(), "--kube-api-qps keeps its budget");

        let account = kube::Client::try_from(config.clone()).unwrap();
        assert_eq!(probe(&account, "/api/v1/namespaces/default/configmaps").await, (200, true));
        assert_eq!(probe(&account, "/version").await, (200, true));
        let mut stranger = config.clone();
        stranger.auth_info.token = Some("not-a-token".to_string().into());
        let stranger = kube::Client::try_from(stranger).unwrap();
        assert_eq!(probe(&stranger, "/api/v1/namespaces/default/configmaps").await, (401, false));
    });
}

testkit::both!(the_default_budget_yields_to_priority_and_fairness);

/// A request the server answers 429 (as Priority and Fairness does when a priority level's
/// queues are full) is sent again after `Retry-After`, a few times, then reported.
#[test]
fn too_many_requests_are_retried_a_few_times() {
    let cluster = Cluster::start();
    let sim = cluster.sim().expect("simcluster");
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = Limiter::unlimited().client(cluster.config().await).unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(client, "default");
        let throttled = |times: u32| FaultRule {
            verb: Some("list".into()),
            resource: Some("configmaps".into()),
            action: Some(FaultAction::Status { code: 429 }),
            times: Some(times),
            ..Default::default()
        };
        sim.add_fault(throttled(2));
        cms.list(&ListParams::default()).await.expect("answered on the third try");
        // As many 429s as one request and its retries: it fails with the server's answer, and a
        // client that never retries then finds the rule used up (so exactly that many were sent).
        let retries = kuvryn_sync::client::TooManyRequests::RETRIES;
        sim.add_fault(throttled(retries + 1));
        match cms.list(&ListParams::default()).await {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 429),
            other => panic!("expected the server's 429, got {other:?}"),
        }
        let once = kube::Client::try_from(kuvryn_sync::client::without_retries(cluster.config().await)).unwrap();
        Api::<ConfigMap>::namespaced(once, "default").list(&ListParams::default()).await.expect("no 429 left");
    });
}
