//! HorizontalPodAutoscalers (`autoscaling`): Degraded while the autoscaler cannot read or
//! change its target's scale (`AbleToScale=False`, a missing target included), as in Argo CD;
//! otherwise the kstatus rules. Metrics that cannot be read (`ScalingActive=False`) are not
//! Degraded: the target keeps its replicas, and a cluster without a metrics server is common.

use serde_json::Value;

use super::{Assessment, condition, kstatus};

/// HorizontalPodAutoscaler.
pub(super) fn horizontal_pod_autoscaler(obj: &Value) -> Assessment {
    if let Some(c) = condition(obj, "AbleToScale").filter(|c| c.is_false()) {
        return Assessment::degraded(c.describe("cannot scale its target"));
    }
    kstatus::generic("HorizontalPodAutoscaler", obj)
}
