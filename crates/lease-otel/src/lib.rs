//! OpenTelemetry for `lease`: the `tracing` spans of a process exported over OTLP/HTTP
//! ([`exporter`]), and a job's attempt joined to the trace it was enqueued in ([`join`]): the
//! attempt's span is a child of the enqueuing span on the first attempt and links to it on
//! later ones (a retry starts a trace of its own, as awa does), and [`traceparent`] gives the
//! attempt's own context to hand on (a program's `TRACEPARENT`).
//!
//! Attributes carry ids, queues, fences and attempts, never payloads, results or tokens.

// Library and binary code may not unwrap, expect or panic on what it meets, nor export what is
// unreachable (each exception allowed in place with its reason); tests may.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        unreachable_pub
    )
)]

use std::str::FromStr;

use lease_domain::{Join, TraceContext};
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider,
};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The standard variable naming the collector, when no flag does.
pub const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Why export could not start.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// The endpoint is not an `http://` or `https://` URL.
    #[error("--otlp-endpoint/{ENDPOINT_VAR}: {0}")]
    Endpoint(String),
    /// The exporter could not be built.
    #[error("the OTLP exporter could not start: {0}")]
    Exporter(String),
}

/// The collector to export to: the flag's URL, else [`ENDPOINT_VAR`]'s; `None`: no export.
#[must_use]
pub fn endpoint(flag: Option<String>) -> Option<String> {
    flag.or_else(|| std::env::var(ENDPOINT_VAR).ok())
        .filter(|e| !e.trim().is_empty())
}

/// The URL spans are posted to: the endpoint as a base (as [`ENDPOINT_VAR`] is read), with
/// `/v1/traces` added unless it is there.
fn traces_url(endpoint: &str) -> Result<String, OtelError> {
    let base = endpoint.trim().trim_end_matches('/');
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(OtelError::Endpoint(format!(
            "must be an http:// or https:// URL, got {base:?}"
        )));
    }
    Ok(if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    })
}

/// Export running: spans are sent in batches on the exporter's own thread. [`Exporter::shutdown`]
/// (or dropping it) sends what is left.
#[derive(Debug)]
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Sends every span not sent yet and stops the exporter.
    pub fn shutdown(&self) {
        let _ = self.provider.force_flush();
        let _ = self.provider.shutdown();
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.provider.force_flush();
    }
}

/// Starts exporting to `endpoint` as service `service`: the [`Exporter`] to keep while the
/// process runs, and the `tracing` layer to add to its subscriber.
///
/// # Errors
/// [`OtelError`] naming what is wrong with the endpoint, or why the exporter did not start.
pub fn exporter<S>(
    endpoint: &str,
    service: &'static str,
) -> Result<(Exporter, impl tracing_subscriber::Layer<S>), OtelError>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let url = traces_url(endpoint)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url)
        .with_timeout(std::time::Duration::from_secs(10))
        .with_headers(std::collections::HashMap::new())
        .build()
        .map_err(|e| OtelError::Exporter(e.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service)
                .build(),
        )
        .build();
    let tracer = provider.tracer("lease");
    let layer = tracing_opentelemetry::layer().with_tracer(tracer);
    Ok((Exporter { provider }, layer))
}

/// The remote span a stored trace context names.
fn remote(trace: &TraceContext) -> Option<SpanContext> {
    let trace_id = TraceId::from_hex(trace.trace_id()).ok()?;
    let span_id = SpanId::from_hex(trace.parent_id()).ok()?;
    let flags = if trace.sampled() {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let state = trace
        .tracestate()
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

/// Joins `span` to the trace `trace` names, as `how` says: a child of its span, or a link to
/// it (a job's attempts: [`Join::attempt`]).
pub fn join(span: &tracing::Span, trace: &TraceContext, how: Join) {
    let Some(enqueued) = remote(trace) else {
        return;
    };
    match how {
        Join::Child => {
            let _ =
                span.set_parent(opentelemetry::Context::new().with_remote_span_context(enqueued));
        }
        Join::Link => span.add_link(enqueued),
    }
}

/// The W3C `traceparent` of `span`, to hand on to what it runs; `None` when the span is not
/// exported (no exporter, or not sampled).
#[must_use]
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let own = context.span();
    let own = own.span_context();
    own.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            own.trace_id(),
            own.span_id(),
            own.trace_flags().to_u8()
        )
    })
}

/// The trace context of the current `tracing` span, to enqueue a job with
/// (`EnqueueSpec::trace`) so that its attempts join the producer's trace; `None` outside an
/// exported span.
#[must_use]
pub fn current() -> Option<TraceContext> {
    let span = tracing::Span::current();
    let parent = traceparent(&span)?;
    let context = span.context();
    let state = context.span().span_context().trace_state().header();
    TraceContext::new(
        &parent,
        Some(&state).filter(|s| !s.is_empty()).map(String::as_str),
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_a_base_url_and_traces_go_under_it() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces/").unwrap(),
            "http://c:4318/v1/traces"
        );
        assert!(matches!(
            traces_url("localhost:4318"),
            Err(OtelError::Endpoint(_))
        ));
    }

    #[test]
    fn a_producer_s_current_span_is_the_context_its_job_is_enqueued_with() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            assert_eq!(current(), None, "no span, no context");
            let span = tracing::info_span!("produce");
            let _in = span.enter();
            let context = current().expect("an exported span has a context");
            assert_eq!(Some(context.traceparent().to_owned()), traceparent(&span));
            assert!(context.sampled());
        });
    }

    #[test]
    fn a_stored_context_names_its_remote_span_and_flags() {
        let trace = TraceContext::new(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("k=v"),
        )
        .unwrap();
        let span = remote(&trace).unwrap();
        assert_eq!(
            span.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(span.span_id().to_string(), "00f067aa0ba902b7");
        assert!(span.is_sampled() && span.is_remote());
        assert_eq!(span.trace_state().get("k"), Some("v"));
    }
}
