//! A runnable axum gateway limited by a limits document, reloaded on SIGHUP.
//!
//! ```text
//! cargo run --release --features tower,config --example gateway -- --listen 127.0.0.1:8080 --limits examples/limits/gateway.toml
//! cargo run --release --features tower,config,metrics --example gateway -- --listen 127.0.0.1:8080 --limits examples/limits/gateway.toml
//! ```
//!
//! It serves any path: the key is the `x-api-key` header (missing → `401` problem+json), the
//! tier the `x-tier` header, the category the first path segment, the route the path.
//! Allowed requests get `200` with the body `ok`; denied ones `429` with `Retry-After`,
//! `RateLimit-Policy`, `RateLimit` and a problem body. A request a limit passed through rather
//! than judged (a shadow policy, a tripped fault detector) carries `x-tollgate-pass-through:
//! POLICY; reason=REASON`. The fault detector watches the limiters. With the `metrics` feature,
//! `GET /metrics` serves the Prometheus exposition text (every policy's verdict counts, the
//! detector's mode, reloads) on the same address, outside the rate limit: scrapes are never
//! limited and never counted. `kill -HUP <pid>` (or saving the file: it is polled every second) reloads the
//! document; each reload prints one line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Router;
use tollgate::http::{HeaderKey, LayerError, OnMissingKey, PassedThrough, RateLimitLayer};
use tollgate::limits::{Limits, LimitsHandle};
use tollgate::safety::FaultDetector;
use tollgate::Clock;

/// The limits handle: the document, the clock, a fault detector on the same clock.
pub fn handle(limits: Limits, clock: Clock) -> Arc<LimitsHandle> {
    let detector = FaultDetector::builder().clock(clock.clone()).build();
    Arc::new(
        LimitsHandle::builder(limits)
            .clock(clock)
            .detector(detector)
            .build(),
    )
}

/// The header a passed-through response carries: `POLICY; reason=REASON`.
pub const PASS_THROUGH: &str = "x-tollgate-pass-through";

/// Shows the layer's pass-through marker (a response extension) to the client as a header.
async fn mark_pass_through(mut res: Response) -> Response {
    if let Some(p) = res.extensions().get::<PassedThrough>() {
        let reason = match p.reason() {
            Some(r) => format!("{r:?}"),
            None => "source_failed".to_owned(),
        };
        // Policy names come from the limits document, which validation keeps to header-safe text.
        if let Ok(v) = HeaderValue::from_str(&format!("{}; reason={reason}", p.policy())) {
            res.headers_mut()
                .insert(HeaderName::from_static(PASS_THROUGH), v);
        }
    }
    res
}

/// The gateway's rate-limited router and its layer (for its counters).
pub fn app(handle: Arc<LimitsHandle>) -> Result<(Router, RateLimitLayer), LayerError> {
    let layer = RateLimitLayer::builder()
        .key(HeaderKey::new(HeaderName::from_static("x-api-key")))
        .on_missing_key(OnMissingKey::Reject(StatusCode::UNAUTHORIZED))
        .tier_header(HeaderName::from_static("x-tier"))
        .limit("limits", handle)
        .build()?;
    let router = Router::new()
        .fallback(|| async { "ok" })
        .layer(layer.clone().own_body())
        .layer(axum::middleware::map_response(mark_pass_through));
    Ok((router, layer))
}

/// `GET /metrics` in front of `limited`, outside its rate limit: each scrape publishes the
/// registry's counts to the installed recorder, then renders them.
#[cfg(feature = "metrics")]
pub fn with_metrics(
    limited: Router,
    registry: tollgate::metrics::MetricsRegistry,
    prometheus: metrics_exporter_prometheus::PrometheusHandle,
) -> Router {
    let scrape = move || async move {
        registry.publish();
        (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4",
            )],
            prometheus.render(),
        )
    };
    Router::new()
        .route("/metrics", axum::routing::get(scrape))
        .fallback_service(limited)
}

/// Installs the Prometheus recorder as the process's global one (once per process), registers
/// `handle` as `gateway` and puts `GET /metrics` in front of `limited`.
#[cfg(feature = "metrics")]
pub fn serve_metrics(
    limited: Router,
    handle: &Arc<LimitsHandle>,
) -> Result<Router, Box<dyn std::error::Error>> {
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    let registry = tollgate::metrics::MetricsRegistry::new();
    registry.register_limits("gateway", handle)?;
    Ok(with_metrics(limited, registry, prometheus))
}

/// Reloads `path` into `handle` and says how it went, in one line.
pub fn reload(handle: &LimitsHandle, path: &Path, why: &str) -> String {
    let before = handle.revision();
    let outcome = Limits::from_path(path)
        .map_err(|e| e.to_string())
        .and_then(|new| handle.reload(new).map_err(|e| e.to_string()));
    match outcome {
        Ok(diff) => format!(
            "reload ({why}): revision {before} -> {}, {} policies changed, {} added, {} removed",
            handle.revision(),
            diff.changed().len(),
            diff.added().len(),
            diff.removed().len()
        ),
        Err(e) => format!(
            "reload ({why}) refused, revision {before} keeps serving: {}",
            e.replace('\n', "; ")
        ),
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Reloads on SIGHUP, and when the file's modification time changes (polled every second).
async fn watch(handle: Arc<LimitsHandle>, path: PathBuf) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup())?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut seen = modified(&path);
    loop {
        let why = tokio::select! {
            _ = hup.recv() => "SIGHUP",
            _ = tick.tick() => {
                let now = modified(&path);
                if now == seen { continue }
                "file changed"
            }
        };
        seen = modified(&path);
        println!("{}", reload(&handle, &path, why));
    }
}

fn args() -> Result<(SocketAddr, PathBuf), String> {
    let usage = "usage: gateway --listen ADDR:PORT --limits FILE";
    let mut listen = None;
    let mut limits = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value; {usage}"))?;
        match flag.as_str() {
            "--listen" => {
                listen = Some(
                    value
                        .parse()
                        .map_err(|e| format!("--listen {value:?}: {e}"))?,
                )
            }
            "--limits" => limits = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown argument {flag:?}; {usage}")),
        }
    }
    Ok((
        listen.ok_or_else(|| format!("--listen is required; {usage}"))?,
        limits.ok_or_else(|| format!("--limits is required; {usage}"))?,
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (listen, path) = args()?;
    let handle = handle(Limits::from_path(&path)?, Clock::monotonic());
    let (router, _layer) = app(Arc::clone(&handle))?;
    #[cfg(feature = "metrics")]
    let router = serve_metrics(router, &handle)?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!(
        "listening on {} with {} (revision {})",
        listener.local_addr()?,
        path.display(),
        handle.revision()
    );
    tokio::spawn(async move {
        if let Err(e) = watch(handle, path).await {
            eprintln!("reloading disabled: {e}");
        }
    });
    axum::serve(listener, router).await?;
    Ok(())
}
