//! OpenTelemetry traces over OTLP/HTTP, configured as the OpenTelemetry environment conventions
//! say: on when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set
//! (and neither `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none`). The exporter reads
//! the rest itself: `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or
//! `http/json`), `_HEADERS`, `_TIMEOUT`, `OTEL_SERVICE_NAME` (default `kuvryn-sync`),
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`.
//!
//! Spans come from `tracing` spans (the `reconcile` span and its children, see
//! docs/install.md#traces) through `tracing-opentelemetry`; a batch processor exports them on
//! its own thread, so a slow collector never holds a reconcile up.

use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;

/// The service name when `OTEL_SERVICE_NAME` does not say.
pub const SERVICE_NAME: &str = "kuvryn-sync";

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Whether the environment `env` asks for traces.
pub fn wanted(env: impl Fn(&str) -> Option<String>) -> bool {
    let set = |k: &str| env(k).is_some_and(|v| !v.trim().is_empty());
    let is = |k: &str, v: &str| env(k).is_some_and(|x| x.trim().eq_ignore_ascii_case(v));
    (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        && !is("OTEL_SDK_DISABLED", "true")
        && !is("OTEL_TRACES_EXPORTER", "none")
}

/// Refuse a protocol this build cannot speak, instead of exporting nothing.
pub fn check_protocol(env: impl Fn(&str) -> Option<String>) -> Result<(), String> {
    for k in ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
        if let Some(v) = env(k).map(|v| v.trim().to_ascii_lowercase()).filter(|v| !v.is_empty()) {
            return match v.as_str() {
                "http/protobuf" | "http/json" => Ok(()),
                other => Err(format!("{k}={other}: traces are exported over http/protobuf or http/json")),
            };
        }
    }
    Ok(())
}

/// The `tracing` layer exporting spans, when the environment asks for traces.
pub fn layer<S>()
-> Result<Option<tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>>, String>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let env = |k: &str| std::env::var(k).ok();
    if !wanted(env) {
        return Ok(None);
    }
    check_protocol(env)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("the OTLP trace exporter: {e}"))?;
    let mut resource = Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none_or(|v| v.trim().is_empty()) {
        resource = resource.with_service_name(SERVICE_NAME);
    }
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
    let tracer = provider.tracer("kuvryn-sync");
    let _ = PROVIDER.set(provider);
    Ok(Some(tracing_opentelemetry::layer().with_tracer(tracer)))
}

/// Export the spans still buffered (before the process exits).
pub fn shutdown() {
    if let Some(p) = PROVIDER.get()
        && let Err(e) = p.shutdown()
    {
        tracing::warn!(error = %e, "flushing traces");
    }
}

/// The trace id of `span`, when it is exported (for the logs: `trace_id`).
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    PROVIDER.get()?;
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn traces_follow_the_opentelemetry_environment() {
        let e = "OTEL_EXPORTER_OTLP_ENDPOINT";
        let table: &[(&[(&str, &str)], bool)] = &[
            (&[], false),
            (&[(e, "")], false),
            (&[(e, "http://collector:4318")], true),
            (&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces")], true),
            (&[(e, "http://collector:4318"), ("OTEL_SDK_DISABLED", "true")], false),
            (&[(e, "http://collector:4318"), ("OTEL_TRACES_EXPORTER", "none")], false),
            (&[(e, "http://collector:4318"), ("OTEL_TRACES_EXPORTER", "otlp")], true),
        ];
        for (vars, want) in table {
            assert_eq!(wanted(env(vars)), *want, "{vars:?}");
        }
        let p = "OTEL_EXPORTER_OTLP_PROTOCOL";
        assert!(check_protocol(env(&[])).is_ok());
        assert!(check_protocol(env(&[(p, "http/json")])).is_ok());
        assert!(check_protocol(env(&[(p, "HTTP/Protobuf")])).is_ok());
        let err = check_protocol(env(&[(p, "grpc")])).unwrap_err();
        assert!(err.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc"), "{err}");
        // The signal's own variable wins.
        assert!(check_protocol(env(&[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"), (p, "grpc")])).is_ok());
    }
}
