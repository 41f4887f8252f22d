//! `GET /metrics` in the Prometheus text format (version 0.0.4), encoded by the
//! `prometheus-client` crate: the terminals counted at each scrape from the registry, the
//! core's counters ([`ptyhub_core::stats`], copied at each scrape), and what only the server
//! sees, the latency of every request by its matched route. docs/operations.md#metrics lists
//! every family with its type and labels.
//!
//! This module owns the metric names, their help text and the per-request middleware
//! ([`observe_request`], which also opens the request's `tracing` span). It does not count
//! terminal events itself: the core does, on its own paths. The route is served behind the
//! token (the server's own principal only: the counts are of every owner) and, when
//! `--metrics-listen` asks for it, on a listener of its own that serves `/metrics` alone,
//! without a token ([`metrics_router`]).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use ptyhub_core::stats::{COMMAND_SECONDS_BUCKETS, LiveKind, Snapshot};
use ptyhub_protocol::api::BackendKind;
use tracing::Instrument as _;

use crate::AppState;

/// The route.
pub const METRICS_PATH: &str = "/metrics";

/// Upper bounds, in seconds, of the request latency buckets (a `+Inf` bucket follows).
const REQUEST_SECONDS_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

/// A request's series: never the raw path, so terminal ids do not make series of their own.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    /// The matched route (`/v2/pty/sessions/{id}/exec`), `unmatched` for the fallback.
    route: String,
    /// `2xx`, `4xx`, ….
    status: String,
}

/// What the server measures itself, for the life of the process.
pub struct Metrics {
    requests: Family<RequestLabels, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        fn histogram() -> Histogram {
            Histogram::new(REQUEST_SECONDS_BUCKETS)
        }
        Self {
            requests: Family::new_with_constructor(histogram),
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Middleware on every route of both listeners: one `request` span per request (its method,
/// matched route, status and latency; never its path, query or headers, which can hold a
/// terminal's id, a token or a cookie) and its latency in `ptyhub_http_request_duration_seconds`.
pub async fn observe_request(
    State(metrics): State<Arc<Metrics>>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let method = request.method().as_str().to_owned();
    let span = tracing::info_span!(
        "request",
        %method,
        %route,
        status = tracing::field::Empty,
        latency_ms = tracing::field::Empty,
    );
    let started = Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let status = response.status();
    // Only the `answered` event shows them: a span's record is formatted at once, whether
    // anything prints it or not.
    if tracing::enabled!(tracing::Level::DEBUG) {
        span.record("status", status.as_u16());
        span.record("latency_ms", elapsed.as_secs_f64() * 1000.0);
        span.in_scope(|| tracing::debug!("answered"));
    }
    metrics
        .requests
        .get_or_create(&RequestLabels {
            method,
            route,
            status: format!("{}xx", status.as_u16() / 100),
        })
        .observe(elapsed.as_secs_f64());
    response
}

/// `GET /metrics` behind authentication: for the server's own principal (its token, a login
/// made with it, the local socket's peer), since the counts are of every owner's terminals.
pub async fn scrape_authenticated(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<crate::auth::Principal>,
) -> Response {
    if principal.owner != rustix::process::getuid().as_raw().to_string() {
        return crate::http_error::HttpError::from(ptyhub_protocol::error::ApiError::new(
            ptyhub_protocol::error::ErrorCode::PermissionDenied,
            "the metrics are the server's: they need its own token",
        ))
        .into_response();
    }
    scrape(State(state)).await
}

/// `GET /metrics`: every family, encoded now.
pub async fn scrape(State(state): State<AppState>) -> Response {
    let census = state.registry.census().await;
    let scraped = Scraped {
        census,
        stats: ptyhub_core::stats::global().snapshot(),
    };
    let mut registry = prometheus_client::registry::Registry::with_prefix("ptyhub");
    registry.register(
        "http_request_duration_seconds",
        "Time to answer an HTTP request (its headers; a stream or an upgraded WebSocket counts \
         until its answer starts), by method, matched route and status class",
        state.metrics.requests.clone(),
    );
    registry.register_collector(Box::new(scraped));
    let mut text = String::new();
    match prometheus_client::encoding::prometheus_text::encode(&mut text, &registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// The router of `--metrics-listen`: `/metrics` only, without a token.
pub fn metrics_router(state: AppState) -> axum::Router {
    axum::Router::new()
        .route(METRICS_PATH, axum::routing::get(scrape))
        .fallback(crate::http_error::no_route)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.metrics),
            observe_request,
        ))
        .with_state(state)
}

/// What one scrape read before encoding (encoding cannot wait for the registry).
#[derive(Debug)]
struct Scraped {
    census: Vec<(BackendKind, &'static str)>,
    stats: Snapshot,
}

/// The wire name of a live connection's kind.
fn live_mode(kind: LiveKind) -> &'static str {
    match kind {
        LiveKind::Relay => "relay",
        LiveKind::Attach => "attach",
        LiveKind::Watch => "watch",
        LiveKind::CommandStream => "sse",
    }
}

/// The states a terminal is counted in (a gauge at 0 is shown rather than missing).
const TERMINAL_STATES: [&str; 6] = ["created", "running", "exited", "error", "closed", "unknown"];

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = &self.stats;
        {
            let mut family = encoder.encode_descriptor(
                "terminals",
                "Terminals the server knows, by what hosts them and their state (closed: \
                 history only)",
                None,
                MetricType::Gauge,
            )?;
            for backend in BackendKind::ALL {
                for state in TERMINAL_STATES {
                    let count = self
                        .census
                        .iter()
                        .filter(|(b, s)| *b == backend && *s == state)
                        .count();
                    let labels = [("backend", backend.as_str()), ("state", state)];
                    ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX))
                        .encode(family.encode_family(&labels)?)?;
                }
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "commands",
                "Commands that finished while this server followed their terminal, by origin \
                 (exec or typed) and outcome (ok: exit 0, failed: another code, timeout: \
                 ptyhub interrupted it, terminated: cancelled, ended with its shell or unknown)",
                None,
                MetricType::Counter,
            )?;
            for (origin, outcome, durations) in &stats.commands {
                let labels = [("origin", origin.as_str()), ("outcome", outcome.as_str())];
                ConstCounter::new(durations.count()).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "command_duration_seconds",
                "How long finished commands ran, from submission or their start mark to their end",
                None,
                MetricType::Histogram,
            )?;
            for (origin, outcome, durations) in &stats.commands {
                let labels = [("origin", origin.as_str()), ("outcome", outcome.as_str())];
                let mut buckets: Vec<(f64, u64)> = COMMAND_SECONDS_BUCKETS
                    .iter()
                    .copied()
                    .zip(durations.buckets.iter().copied())
                    .collect();
                buckets.push((
                    f64::INFINITY,
                    durations.buckets[COMMAND_SECONDS_BUCKETS.len()],
                ));
                family
                    .encode_family(&labels)?
                    .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                        durations.sum_seconds,
                        durations.count(),
                        &buckets,
                        None,
                    )?;
            }
        }
        counter(
            &mut encoder,
            "output_bytes",
            "Bytes of program output logged while this server followed the terminal \
             (pty.output events; history replayed at start is not counted again)",
            stats.bytes_logged,
        )?;
        counter(
            &mut encoder,
            "log_rotations",
            "Rotations of a terminal's active event log segment that the server followed \
             (its screen's reader; one that fell further behind than the log keeps misses some)",
            stats.log_rotations,
        )?;
        counter(
            &mut encoder,
            "lagged",
            "Times a live connection was told it lagged (it resumes from the log)",
            stats.lagged,
        )?;
        counter(
            &mut encoder,
            "cursors_expired",
            "Requests and connections answered CURSOR_EXPIRED (the log no longer keeps their \
             position)",
            stats.cursors_expired,
        )?;
        {
            let mut family = encoder.encode_descriptor(
                "input_refused",
                "Inputs refused, by reason (leased: another writer holds the lease, read_only: \
                 a watch connection, busy: the terminal's input queue is full, not_running: \
                 the program ended or the terminal is closed)",
                None,
                MetricType::Counter,
            )?;
            for (reason, count, _) in &stats.input_refused {
                let labels = [("reason", reason.as_str())];
                ConstCounter::new(*count).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "input_refused_bytes",
                "Bytes of the refused inputs, by reason",
                None,
                MetricType::Counter,
            )?;
            for (reason, _, bytes) in &stats.input_refused {
                let labels = [("reason", reason.as_str())];
                ConstCounter::new(*bytes).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "holders",
                "Holder processes by backend and what happened to them (started: launched \
                 and answered, stopped: ended after its program, failed: could not start or \
                 vanished while its program ran)",
                None,
                MetricType::Counter,
            )?;
            for (backend, event, count) in &stats.holders {
                let labels = [("backend", backend.as_str()), ("event", event.as_str())];
                ConstCounter::new(*count).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "live_connections",
                "Open live connections by mode (relay and attach type, watch only reads, sse \
                 is an exec or view event stream)",
                None,
                MetricType::Gauge,
            )?;
            for (kind, open) in &stats.live {
                let labels = [("mode", live_mode(*kind))];
                ConstGauge::new(i64::try_from(*open).unwrap_or(i64::MAX))
                    .encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let gauge = ConstGauge::new(i64::try_from(stats.screens_asleep).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(
                "screens_asleep",
                "Terminals whose VT screen is asleep: idle, it is kept as the escape sequences \
                 that repaint it and woken by the next output or read",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// One counter without labels.
fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}
