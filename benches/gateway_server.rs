//! Not a criterion bench: the server `benches/wrk.sh` drives with `wrk` to measure what the
//! gateway layer costs. One axum server, a trivial handler (`ok`), on one tokio
//! worker thread, in one of three modes:
//!
//! * `bare`: no layer;
//! * `noop`: a tower layer that does nothing (`MapRequestLayer` with the identity): what any
//!   layer costs in axum (`Router::layer` boxes and clones the layered route per request);
//! * `keyed`: `RateLimitLayer` keyed by `x-api-key` over a `KeyedRateLimiter<String>`;
//! * `keyed-off`: the same with `HeaderMode::Off` (no fields on allowed responses), to tell
//!   the limiting from the fields;
//! * `limits`: the same keyed by a `LimitsHandle` (tier header, category, route resolved per
//!   request), as `examples/gateway.rs` does;
//! * `own`, `own-off`: `keyed` and `keyed-off` with `own_body()` (the README's setup);
//! * `governor`, `governor-headers`: tower_governor 0.8 keyed by `x-api-key`, its default
//!   configuration and with `use_headers()` (`benches/wrk_layer.sh` pairs them with `own`).
//!
//! The quota (10^8/s) admits every request: this measures the allowed path, headers
//! included. Run as `gateway_server --listen 127.0.0.1:PORT --mode MODE` (one of the above);
//! without arguments (as `cargo bench` runs it) it prints this usage and exits.

#[path = "common/governor_key.rs"]
mod governor_key;

use std::sync::Arc;

use axum::http::HeaderName;
use tollgate::http::{HeaderKey, HeaderMode, RateLimitLayer};
use tollgate::limits::{Limits, LimitsHandle};
use tollgate::KeyedRateLimiter;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

use governor_key::ApiKey;

const LIMITS: &str = r#"
schema = 1
revision = 1
tiers = ["paid"]
[[policies]]
name = "bench"
match = { tier = "paid" }
quota = "100000000/s"
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let get = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let (Some(listen), Some(mode)) = (get("--listen"), get("--mode")) else {
        println!("usage: gateway_server --listen ADDR:PORT --mode bare|noop|keyed|keyed-off|limits|own|own-off|governor|governor-headers (see benches/wrk.sh)");
        return Ok(());
    };
    let key = || HeaderKey::new(HeaderName::from_static("x-api-key"));
    let keyed = |mode: HeaderMode| -> Result<RateLimitLayer, Box<dyn std::error::Error>> {
        Ok(RateLimitLayer::builder()
            .key(key())
            .headers(mode)
            .limit(
                "per-key",
                KeyedRateLimiter::<String>::new("100000000/s".parse()?),
            )
            .build()?)
    };
    let governor = || {
        let mut b = GovernorConfigBuilder::default().key_extractor(ApiKey);
        b.per_nanosecond(10).burst_size(1_000_000);
        b
    };
    let router = axum::Router::new().fallback(|| async { "ok" });
    let router = match mode.as_str() {
        "bare" => router,
        "noop" => router.layer(tower::util::MapRequestLayer::new(
            |r: axum::extract::Request| r,
        )),
        "keyed" => router.layer(keyed(HeaderMode::Ietf)?),
        "keyed-off" => router.layer(keyed(HeaderMode::Off)?),
        "limits" => router.layer(
            RateLimitLayer::builder()
                .key(key())
                .tier_header(HeaderName::from_static("x-tier"))
                .limit(
                    "limits",
                    Arc::new(LimitsHandle::new(Limits::from_toml(LIMITS)?)),
                )
                .build()?,
        ),
        "own" => router.layer(keyed(HeaderMode::Ietf)?.own_body()),
        "own-off" => router.layer(keyed(HeaderMode::Off)?.own_body()),
        "governor" => router.layer(GovernorLayer::new(
            governor().finish().ok_or("governor config")?,
        )),
        "governor-headers" => router.layer(GovernorLayer::new(
            governor().use_headers().finish().ok_or("governor config")?,
        )),
        other => return Err(format!("unknown mode {other:?}").into()),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&listen).await?;
        println!("listening on {}", listener.local_addr()?);
        axum::serve(listener, router).await
    })?;
    Ok(())
}
