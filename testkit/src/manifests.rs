//! Builders of the manifests the tests commit to Git, as YAML text in the flow style the tests
//! write by hand. [`deployment`] starts a Deployment; its options add what a scenario needs
//! (a sync wave, replicas, the simulated kubelet's readiness delay, the container's port and
//! environment, or a whole Pod spec).

use std::fmt;

/// A Deployment `name` with one replica whose Pods carry the label `app: name` (its selector).
/// Give it a container with [`Deployment::image`] or a whole Pod spec with
/// [`Deployment::pod_spec`]; the YAML is its [`Display`](fmt::Display) (`.to_string()`).
pub fn deployment(name: &str) -> Deployment {
    Deployment {
        name: name.to_string(),
        wave: None,
        replicas: 1,
        progress_deadline_seconds: None,
        ready_ms: None,
        pod: Pod::Unset,
    }
}

/// A Deployment manifest being built (see [`deployment`]).
#[derive(Clone, Debug)]
#[must_use]
pub struct Deployment {
    name: String,
    wave: Option<i32>,
    replicas: u32,
    progress_deadline_seconds: Option<u32>,
    ready_ms: Option<u64>,
    pod: Pod,
}

#[derive(Clone, Debug)]
enum Pod {
    Unset,
    /// One container named after the Deployment.
    Container {
        image: String,
        port: Option<u16>,
        env_from_config_map: Vec<(String, String, String)>,
    },
    /// The Pod spec as YAML, indented for the template.
    Spec(String),
}

impl Deployment {
    /// In sync wave `wave` (the `sync.kuvryn.io/sync-wave` annotation).
    pub fn wave(mut self, wave: i32) -> Self {
        self.wave = Some(wave);
        self
    }

    /// `spec.replicas` (default 1).
    pub fn replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas;
        self
    }

    /// `spec.progressDeadlineSeconds`.
    pub fn progress_deadline_seconds(mut self, seconds: u32) -> Self {
        self.progress_deadline_seconds = Some(seconds);
        self
    }

    /// The simulated kubelet makes each Pod ready `ms` milliseconds after it starts
    /// (the `simcluster.kuvryn.io/ready-ms` annotation of the Pod template).
    pub fn ready_ms(mut self, ms: u64) -> Self {
        self.ready_ms = Some(ms);
        self
    }

    /// One container, named after the Deployment, running `image`.
    pub fn image(mut self, image: &str) -> Self {
        let (port, env_from_config_map) = match self.pod {
            Pod::Container { port, env_from_config_map, .. } => (port, env_from_config_map),
            Pod::Unset | Pod::Spec(_) => (None, Vec::new()),
        };
        self.pod = Pod::Container { image: image.to_string(), port, env_from_config_map };
        self
    }

    /// The container listens on `port` (`ports: [{containerPort: port}]`). After [`Self::image`].
    pub fn container_port(mut self, port: u16) -> Self {
        match &mut self.pod {
            Pod::Container { port: p, .. } => *p = Some(port),
            Pod::Unset | Pod::Spec(_) => panic!("container_port() needs a container: call image() first"),
        }
        self
    }

    /// The container's environment variable `var` is key `key` of ConfigMap `config_map`
    /// (`valueFrom.configMapKeyRef`). After [`Self::image`].
    pub fn env_from_config_map(mut self, var: &str, config_map: &str, key: &str) -> Self {
        match &mut self.pod {
            Pod::Container { env_from_config_map, .. } => {
                env_from_config_map.push((var.to_string(), config_map.to_string(), key.to_string()))
            }
            Pod::Unset | Pod::Spec(_) => panic!("env_from_config_map() needs a container: call image() first"),
        }
        self
    }

    /// The whole Pod spec as YAML, each line indented by six spaces (the template's `spec:`
    /// level), ending in a newline; replaces any container given before.
    pub fn pod_spec(mut self, yaml: &str) -> Self {
        self.pod = Pod::Spec(yaml.to_string());
        self
    }
}

impl fmt::Display for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        write!(f, "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n")?;
        if let Some(wave) = self.wave {
            writeln!(f, "  annotations: {{sync.kuvryn.io/sync-wave: \"{wave}\"}}")?;
        }
        write!(f, "spec:\n  replicas: {}\n", self.replicas)?;
        if let Some(seconds) = self.progress_deadline_seconds {
            writeln!(f, "  progressDeadlineSeconds: {seconds}")?;
        }
        write!(
            f,
            "  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n"
        )?;
        if let Some(ms) = self.ready_ms {
            writeln!(f, "      annotations: {{simcluster.kuvryn.io/ready-ms: \"{ms}\"}}")?;
        }
        f.write_str("    spec:\n")?;
        match &self.pod {
            Pod::Unset => panic!("Deployment {name} has no Pod: call image() or pod_spec()"),
            Pod::Spec(yaml) => f.write_str(yaml),
            Pod::Container { image, port, env_from_config_map } => {
                write!(f, "      containers:\n      - name: {name}\n        image: {image}\n")?;
                if let Some(port) = port {
                    writeln!(f, "        ports: [{{containerPort: {port}}}]")?;
                }
                if !env_from_config_map.is_empty() {
                    f.write_str("        env:\n")?;
                    for (var, config_map, key) in env_from_config_map {
                        write!(
                            f,
                            "        - name: {var}\n          valueFrom: {{configMapKeyRef: {{name: {config_map}, key: {key}}}}}\n"
                        )?;
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::deployment;

    /// The texts the ordering, rollout and diagnosis tests wrote by hand before they used the
    /// builder: it must produce them byte for byte.
    #[test]
    fn the_builder_writes_what_the_tests_wrote_by_hand() {
        let (wave, image, name) = (1, "nginx:1.27", "pull");
        let pod = "      containers:\n      - {name: app, image: registry.invalid/team/app:1.0}\n";
        let cases = [
            (
                deployment("web")
                    .wave(wave)
                    .ready_ms(1000)
                    .image(image)
                    .env_from_config_map("COLOR", "settings", "color"),
                format!(
                    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  annotations: {{sync.kuvryn.io/sync-wave: \"{wave}\"}}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n      annotations: {{simcluster.kuvryn.io/ready-ms: \"1000\"}}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n        env:\n        - name: COLOR\n          valueFrom: {{configMapKeyRef: {{name: settings, key: color}}}}\n"
                ),
            ),
            (
                deployment("web")
                    .replicas(2)
                    .progress_deadline_seconds(600)
                    .ready_ms(2000)
                    .image(image)
                    .container_port(80),
                format!(
                    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  progressDeadlineSeconds: 600\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n      annotations: {{simcluster.kuvryn.io/ready-ms: \"2000\"}}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n        ports: [{{containerPort: 80}}]\n"
                ),
            ),
            (
                deployment(name).pod_spec(pod),
                format!(
                    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n{pod}"
                ),
            ),
        ];
        for (built, by_hand) in cases {
            assert_eq!(built.to_string(), by_hand);
        }
    }

    #[test]
    fn a_slower_readiness_is_the_same_deployment_otherwise() {
        let base = deployment("web").replicas(2).progress_deadline_seconds(600).image("nginx:1.27").container_port(80);
        let slow = base.clone().ready_ms(600000).to_string();
        assert_eq!(slow, base.ready_ms(2000).to_string().replace("\"2000\"", "\"600000\""));
    }
}
