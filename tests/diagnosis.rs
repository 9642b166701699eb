//! `status.diagnosis` end to end: one Application per kind of evidence the workload simulation
//! produces (simcluster's scheduler and kubelet, on simcluster and as clients of a real
//! kube-apiserver), each asserting the whole path from the unhealthy resource to the evidence.

use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use kuvryn_sync::api::Application;
use kuvryn_sync::api::application::Diagnosis;
use kuvryn_sync::api::names;
use kuvryn_sync::gather::{self, Budget};
use serde_json::json;
use testkit::apps::Env;
use testkit::manifests::deployment;
use testkit::{Cluster, eventually};

/// A Deployment `name` (one replica) whose Pod spec is `pod` (YAML, indented for the template).
fn with_pod(name: &str, pod: &str) -> String {
    deployment(name).pod_spec(pod).to_string()
}

/// `(reason, [edge kind])` with the last step's name and whether it is missing.
fn shape(d: &Diagnosis) -> (String, String, Vec<String>, String) {
    let path = d.path.iter().map(|s| format!("{} {}", s.edge, s.resource.kind)).collect();
    let last = d.path.last().map(|s| format!("{}{}", s.resource.name, if s.missing { " (missing)" } else { "" }));
    (format!("{} {}", d.resource.kind, d.resource.name), d.reason.clone(), path, last.unwrap_or_default())
}

/// An Application, its files, the diagnosis it must reach (as [`shape`] gives it: the start,
/// the reasons accepted, the edges and kinds of the path, the last step) and a text its message
/// must contain.
type Scenario = (
    &'static str,
    Vec<(String, String)>,
    (&'static str, &'static [&'static str], Vec<&'static str>, &'static str),
    &'static str,
);

/// The scenarios: (Application, files, the diagnosis it must reach, as [`shape`] gives it, and
/// a text its message must contain).
fn scenarios() -> Vec<Scenario> {
    let owned = |last: &'static str| {
        let mut p = vec!["Owns ReplicaSet", "Owns Pod"];
        if !last.is_empty() {
            p.push(last);
        }
        p
    };
    vec![
        (
            "config",
            vec![(
                "config/deploy.yaml".into(),
                with_pod(
                    "config",
                    "      containers:\n      - name: app\n        image: nginx:1.27\n        volumeMounts: [{name: flags, mountPath: /etc/flags}]\n      volumes:\n      - {name: flags, configMap: {name: flags}}\n",
                ),
            )],
            ("Deployment config", &["MissingConfigMap"], owned("Uses ConfigMap"), "flags (missing)"),
            "ConfigMap",
        ),
        (
            "secret",
            vec![(
                "secret/deploy.yaml".into(),
                with_pod(
                    "secret",
                    "      containers:\n      - name: app\n        image: nginx:1.27\n        envFrom: [{secretRef: {name: creds}}]\n",
                ),
            )],
            ("Deployment secret", &["MissingSecret"], owned("Uses Secret"), "creds (missing)"),
            "CreateContainerConfigError",
        ),
        (
            "pull",
            vec![(
                "pull/deploy.yaml".into(),
                with_pod("pull", "      containers:\n      - {name: app, image: registry.invalid/team/app:1.0}\n"),
            )],
            ("Deployment pull", &["ImagePullBackOff", "ErrImagePull"], owned(""), ""),
            "registry.invalid/team/app:1.0",
        ),
        (
            "crash",
            vec![(
                "crash/deploy.yaml".into(),
                with_pod(
                    "crash",
                    "      containers:\n      - name: app\n        image: nginx:1.27\n        env: [{name: SIMCLUSTER_EXIT_CODE, value: \"3\"}, {name: SIMCLUSTER_RUN_MS, value: \"100\"}]\n",
                ),
            )],
            ("Deployment crash", &["CrashLoopBackOff"], owned(""), ""),
            "last exit code 3",
        ),
        (
            "gpu",
            vec![(
                "gpu/deploy.yaml".into(),
                with_pod("gpu", "      nodeSelector: {pool: gpu}\n      containers:\n      - {name: app, image: nginx:1.27}\n"),
            )],
            ("Deployment gpu", &["Unschedulable"], owned(""), ""),
            "untolerated taint",
        ),
        (
            "claim",
            vec![
                (
                    "claim/deploy.yaml".into(),
                    with_pod(
                        "claim",
                        "      containers:\n      - {name: app, image: nginx:1.27}\n      volumes:\n      - {name: data, persistentVolumeClaim: {claimName: data}}\n",
                    ),
                ),
                (
                    "claim/pvc.yaml".into(),
                    "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\nspec:\n  storageClassName: no-such-class\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests: {storage: 1Gi}\n".into(),
                ),
            ],
            ("Deployment claim", &["PendingClaim"], owned("Mounts PersistentVolumeClaim"), "data"),
            "is Pending (StorageClass no-such-class)",
        ),
        (
            "idle",
            vec![
                (
                    "idle/deploy.yaml".into(),
                    with_pod(
                        "idle",
                        "      containers:\n      - name: app\n        image: nginx:1.27\n        env: [{name: SIMCLUSTER_READY, value: \"false\"}]\n",
                    ),
                ),
                (
                    "idle/service.yaml".into(),
                    "apiVersion: v1\nkind: Service\nmetadata:\n  name: idle\nspec:\n  selector: {app: idle}\n  ports: [{port: 80}]\n".into(),
                ),
            ],
            ("Service idle", &["NoReadyEndpoints"], vec![], ""),
            "it selects 1 Pod, not ready",
        ),
        (
            "front",
            vec![
                (
                    "front/deploy.yaml".into(),
                    with_pod(
                        "front",
                        "      containers:\n      - name: app\n        image: nginx:1.27\n        env: [{name: SIMCLUSTER_READY, value: \"false\"}]\n",
                    ),
                ),
                (
                    "front/ingress.yaml".into(),
                    "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: front\nspec:\n  rules:\n  - http:\n      paths:\n      - {path: /, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}\n".into(),
                ),
            ],
            ("Ingress front", &["MissingService"], vec!["Routes Service"], "api (missing)"),
            "routed to by Ingress.networking.k8s.io diagnosis/front",
        ),
        (
            "scaler",
            vec![(
                "scaler/hpa.yaml".into(),
                "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: scaler\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: ghost}\n  minReplicas: 1\n  maxReplicas: 3\n".into(),
            )],
            ("HorizontalPodAutoscaler scaler", &["MissingDeployment"], vec!["Scales Deployment"], "ghost (missing)"),
            "scaled by HorizontalPodAutoscaler.autoscaling diagnosis/scaler",
        ),
        (
            "late",
            vec![(
                "late/deploy.yaml".into(),
                with_pod(
                    "late",
                    "      containers:\n      - name: app\n        image: nginx:1.27\n        env: [{name: SIMCLUSTER_EXIT_CODE, value: \"2\"}, {name: SIMCLUSTER_RUN_MS, value: \"4000\"}]\n",
                ),
            )],
            ("Deployment late", &["CrashLoopBackOff"], owned(""), ""),
            "last exit code 2",
        ),
        (
            "job",
            vec![(
                "job/job.yaml".into(),
                "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: m\n        image: busybox:1.36\n        env: [{name: SIMCLUSTER_EXIT_CODE, value: \"1\"}, {name: SIMCLUSTER_RUN_MS, value: \"100\"}]\n".into(),
            )],
            ("Job migrate", &["JobFailed"], vec![], ""),
            "failed",
        ),
    ]
}

fn every_kind_of_evidence_is_diagnosed(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "diagnosis").await;
        // A Node only a taint keeps the `gpu` Pods from.
        let nodes = ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&());
        Api::<DynamicObject>::all_with(env.client.clone(), &nodes)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": "gpu-1", "labels": {"pool": "gpu"}},
                    "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}))
                .unwrap(),
            )
            .await
            .unwrap();
        let wt = env.repository("platform").await;
        let scenarios = scenarios();
        for (_, files, _, _) in &scenarios {
            for (path, text) in files {
                wt.write(path, text);
            }
        }
        // For the Application of a service account that may not read Pods, below.
        let limited_deploy = scenarios[0].1[0].1.replace("config", "limited").replace("limitedMap", "configMap");
        wt.write("limited/deploy.yaml", &limited_deploy);
        let commit = wt.commit_and_push("one Application per kind of evidence");
        env.refresh("platform", &commit).await;
        for (app, _, _, _) in &scenarios {
            env.create_app(
                app,
                json!({"source": {"repository": "platform", "path": app}, "serviceAccountName": "deployer",
                       "destination": {"namespace": "diagnosis"}, "health": {"timeout": "10s"}}),
            )
            .await;
        }
        for (app, _, (resource, reasons, path, last), text) in &scenarios {
            let want = |d: &Diagnosis| {
                let (r, reason, p, l) = shape(d);
                r == *resource
                    && reasons.contains(&reason.as_str())
                    && p == *path
                    && (last.is_empty() || l == *last)
                    && d.message.contains(text)
            };
            let deadline = std::time::Instant::now() + testkit::apps::WAIT * 2;
            loop {
                let a: Application = env.apps().get(app).await.unwrap();
                let d = a.status.as_ref().and_then(|s| s.diagnosis.clone());
                if d.as_ref().is_some_and(want) {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "the diagnosis of {app}: {d:#?}\nstatus: {:#?}", a.status);
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        }
        // The objects around are read as the Application's service account: one that may not
        // read ReplicaSets or Pods gets a diagnosis from what it may read (the Deployment's own
        // reference to the missing ConfigMap), never one through the Pods the controller could see.
        let limited = json!([
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "limited", "namespace": "diagnosis"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "limited", "namespace": "diagnosis"},
             "rules": [{"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "daemonsets"], "verbs": ["*"]},
                       {"apiGroups": [""], "resources": ["configmaps", "secrets", "services", "serviceaccounts"], "verbs": ["*"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "limited", "namespace": "diagnosis"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "limited"},
             "subjects": [{"kind": "ServiceAccount", "name": "limited", "namespace": "diagnosis"}]},
        ]);
        for o in limited.as_array().unwrap() {
            testkit::apply_as(&env.client, "test", o).await;
        }
        env.create_app(
            "limited",
            json!({"source": {"repository": "platform", "path": "limited"}, "serviceAccountName": "limited",
                   "destination": {"namespace": "diagnosis"}, "health": {"timeout": "10s"}}),
        )
        .await;
        let deadline = std::time::Instant::now() + testkit::apps::WAIT * 2;
        let d = loop {
            let a: Application = env.apps().get("limited").await.unwrap();
            if let Some(d) = a.status.as_ref().and_then(|s| s.diagnosis.clone()) {
                break d;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the diagnosis of limited: {a:#?}\n{:#?}",
                env.events("limited").await
            );
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        };
        let (resource, reason, path, last) = shape(&d);
        assert_eq!(
            (resource.as_str(), reason.as_str(), path, last.as_str()),
            ("Deployment limited", "MissingConfigMap", vec!["Uses ConfigMap".to_string()], "flags (missing)"),
            "{d:#?}"
        );
        // A Deployment Healthy at first whose Pod then crash-loops: Degraded while deployed, with
        // a HealthDegraded Event naming the root cause.
        let ev = eventually("a HealthDegraded Event with the root cause", testkit::apps::WAIT * 2, || async {
            let ev = env.events("late").await;
            ev.into_iter().find(|e| e.1 == names::events::HEALTH_DEGRADED && e.2.contains("root cause: CrashLoopBackOff"))
        })
        .await;
        assert!(ev.2.contains("last exit code 2"), "{ev:?}");
    });
}

/// The cost of one diagnosis of an Application of 50 objects (10 each of Deployments, Services,
/// ConfigMaps, Secrets and ServiceAccounts, the Deployments' Pods running): the requests and the
/// time, printed for `docs/diagnosis.md`; and a budget of requests is never exceeded.
fn the_cost_of_a_diagnosis_is_bounded(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "cost";
        let env = Env::without_controllers(&cluster, ns).await;
        let mut objects = Vec::new();
        for i in 0..10 {
            let name = format!("app-{i}");
            objects.push(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}}));
            objects.push(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "stringData": {"k": "v"}}));
            objects.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}));
            objects.push(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
                "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}}));
            objects.push(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"serviceAccountName": name, "automountServiceAccountToken": false,
                                               "containers": [{"name": "app", "image": "nginx:1.27",
                                                               "envFrom": [{"configMapRef": {"name": name}}, {"secretRef": {"name": name}}]}]}}}}));
        }
        let mut managed = std::collections::BTreeMap::new();
        for o in &objects {
            let live = testkit::apply_as(&env.client, "test", o).await;
            let (group, _) = kuvryn_sync::graph::refs::split_api_version(o["apiVersion"].as_str().unwrap());
            let r = kuvryn_sync::api::application::ResourceRef {
                group: group.into(),
                kind: o["kind"].as_str().unwrap().into(),
                namespace: Some(ns.into()),
                name: o["metadata"]["name"].as_str().unwrap().into(),
            };
            managed.insert(r, live);
        }
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(env.client.clone(), ns);
        eventually("20 Pods", testkit::apps::WAIT, || async {
            let n = pods.list(&Default::default()).await.ok()?.items.len();
            (n == 20).then_some(())
        })
        .await;
        let started = std::time::Instant::now();
        let gathered = gather::gather(&env.client, managed.clone(), Budget::default()).await;
        let graph = kuvryn_sync::graph::build(&gathered.observed);
        let took = started.elapsed();
        println!(
            "diagnosis of 50 objects: {} requests, {} objects, {} edges, {:?}",
            gathered.calls,
            graph.nodes.len(),
            graph.links.len(),
            took
        );
        assert!(!gathered.truncated, "the default budget covers an Application of 50 objects");
        // 10 ReplicaSet lists and 10 Pod lists under the Deployments, 10 Pod lists and 10
        // EndpointSlice lists under the Services; every other object is already known.
        assert_eq!(gathered.calls, 40);
        assert_eq!(graph.nodes.iter().filter(|n| n.resource.kind == "Pod").count(), 20);
        // A smaller budget is kept, and says so.
        let small = gather::gather(&env.client, managed, Budget { calls: 7, objects: 500 }).await;
        assert!(small.truncated && small.calls <= 7, "{} requests", small.calls);
        let few = gather::gather(&env.client, Default::default(), Budget { calls: 0, objects: 0 }).await;
        assert_eq!((few.calls, few.truncated), (0, false));
    });
}

testkit::both!(every_kind_of_evidence_is_diagnosed, the_cost_of_a_diagnosis_is_bounded);
