//! A measuring tool, not an example to copy: calls an axum 0.8 router in process as a tower
//! `Service` `n` times, bare or behind a rate-limit layer, for counting instructions per
//! request with callgrind (see `benches/callgrind_layer.sh`). No sockets, no runtime: each
//! future is polled with a no-op waker until ready (none ever returns `Pending`; the count of
//! `Pending` polls is printed), so the count repeats from run to run.
//!
//! ```text
//! cargo bench --no-run --features tower --bench layer_ir   # prints the executable's path
//! valgrind --tool=callgrind --toggle-collect='*layer_ir::measured*' \
//!     target/release/deps/layer_ir-HASH tollgate-off 5000
//! ```
//!
//! Variants (one `GET /v1/search` route returning `ok`; each layer added with
//! `Router::layer`, as both crates' READMEs do):
//!
//! * `bare`: the router alone;
//! * `noop`: a layer that does nothing (`MapRequestLayer` with the identity): what axum
//!   charges for any layer (`Router::layer` boxes the layered route), which every layer
//!   below pays too;
//! * `tollgate-fields`: `RateLimitLayer` keyed by `x-api-key` over a
//!   `KeyedRateLimiter<String>`, as the README's gateway section builds it (IETF
//!   `RateLimit-Policy` and `RateLimit` fields on allowed responses: the default);
//! * `tollgate-off`: the same with `HeaderMode::Off`;
//! * `tollgate-settle`: `tollgate-fields` with `settle(Settle::refund_on_success())`: every
//!   response is asked about and every charge given back (the settle path taken in full;
//!   a layer that settles never takes the lean path);
//! * `tollgate-own-fields`, `tollgate-own-off`: the same two with `own_body()` (responses keep
//!   axum's own `Body`);
//! * `governor-keyed`: tower_governor 0.8's `GovernorLayer` keyed by `x-api-key` (a
//!   `KeyExtractor` reading the header into a `String`), its default configuration (no
//!   headers on allowed responses);
//! * `governor-headers`: the same with `use_headers()` (`x-ratelimit-limit` and
//!   `x-ratelimit-remaining` on allowed responses).
//!
//! Every request carries `x-api-key: key-<i % 64>` (64 keys rotating); the quota, 10^6/s
//! with a burst of 10^6 per key, admits every one (checked: the run fails unless every
//! response is 200). The requests are built before the loop and each key is warmed (one
//! pass over the 64 keys, outside `measured`), so only the service calls and the dropping of
//! their responses are collected; `benches/callgrind_layer.sh` runs two loop lengths and
//! divides the difference, which also drops the loop's constant entry cost.

#[path = "common/governor_key.rs"]
mod governor_key;

use std::future::Future;
use std::pin::pin;
use std::process::ExitCode;
use std::task::{Context, Poll, Waker};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use axum::Router;
use tollgate::http::{HeaderKey, HeaderMode, RateLimitLayer, RateLimitLayerBuilder, Settle};
use tollgate::KeyedRateLimiter;
use tower::{Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

use governor_key::{ApiKey, X_API_KEY};

const VARIANTS: &[&str] = &[
    "bare",
    "noop",
    "tollgate-fields",
    "tollgate-off",
    "tollgate-settle",
    "tollgate-own-fields",
    "tollgate-own-off",
    "governor-keyed",
    "governor-headers",
];

const KEYS: usize = 64;
/// 10^6/s, burst 10^6, per key: nothing is ever denied.
const TOLLGATE_QUOTA: &str = "1000000/s;burst=1000000";
const GOVERNOR_PERIOD_NS: u64 = 1_000; // one per µs: 10^6/s
const GOVERNOR_BURST: u32 = 1_000_000;

fn app(variant: &str) -> Option<Router> {
    let router = Router::new().route("/v1/search", get(|| async { "ok" }));
    let builder = |mode: HeaderMode| -> RateLimitLayerBuilder {
        RateLimitLayer::builder()
            .key(HeaderKey::new(X_API_KEY))
            .headers(mode)
            .limit(
                "per-key",
                KeyedRateLimiter::<String>::new(TOLLGATE_QUOTA.parse().expect("quota")),
            )
    };
    let tollgate = |mode: HeaderMode| builder(mode).build().expect("layer");
    let governor = || {
        let mut builder = GovernorConfigBuilder::default().key_extractor(ApiKey);
        builder
            .per_nanosecond(GOVERNOR_PERIOD_NS)
            .burst_size(GOVERNOR_BURST);
        builder
    };
    Some(match variant {
        "bare" => router,
        "noop" => router.layer(tower::util::MapRequestLayer::new(|r: Request<Body>| r)),
        "tollgate-fields" => router.layer(tollgate(HeaderMode::Ietf)),
        "tollgate-off" => router.layer(tollgate(HeaderMode::Off)),
        "tollgate-settle" => router.layer(
            builder(HeaderMode::Ietf)
                .settle(Settle::refund_on_success())
                .build()
                .expect("layer"),
        ),
        "tollgate-own-fields" => router.layer(tollgate(HeaderMode::Ietf).own_body()),
        "tollgate-own-off" => router.layer(tollgate(HeaderMode::Off).own_body()),
        "governor-keyed" => router.layer(GovernorLayer::new(governor().finish().expect("config"))),
        "governor-headers" => router.layer(GovernorLayer::new(
            governor().use_headers().finish().expect("config"),
        )),
        _ => return None,
    })
}

fn requests(n: usize) -> Vec<Request<Body>> {
    (0..n)
        .map(|i| {
            Request::get("/v1/search")
                .header(X_API_KEY, format!("key-{}", i % KEYS))
                .body(Body::empty())
                .expect("request")
        })
        .collect()
}

#[derive(Default)]
struct Tally {
    ok: u64,
    other: u64,
    pending: u64,
}

/// Polls `fut` with a no-op waker until it is ready, counting the `Pending` polls.
#[inline(always)]
fn block_on<F: Future>(fut: F, pending: &mut u64) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return out,
            Poll::Pending => *pending += 1,
        }
    }
}

#[inline(always)]
fn drive(app: &mut Router, requests: Vec<Request<Body>>, tally: &mut Tally) {
    for req in requests {
        let svc = match block_on(ServiceExt::<Request<Body>>::ready(app), &mut tally.pending) {
            Ok(svc) => svc,
            Err(never) => match never {},
        };
        let res = match block_on(svc.call(req), &mut tally.pending) {
            Ok(res) => res,
            Err(never) => match never {},
        };
        if res.status() == StatusCode::OK {
            tally.ok += 1;
        } else {
            tally.other += 1;
        }
    }
}

/// The loop callgrind collects (`--toggle-collect='*layer_ir::measured*'`). The warm-up
/// calls `drive` from `run` instead: a second function with this body would be merged with
/// this one, and the symbol callgrind looks for would be gone.
#[inline(never)]
fn measured(app: &mut Router, requests: Vec<Request<Body>>, tally: &mut Tally) {
    drive(app, requests, tally);
}

/// Runs `n` measured requests of `variant`; `None` for an unknown variant.
fn run(variant: &str, n: usize) -> Option<bool> {
    let mut app = app(variant)?;
    let mut warm = Tally::default();
    drive(&mut app, requests(KEYS), &mut warm);
    let reqs = requests(n);
    let mut tally = Tally::default();
    measured(&mut app, reqs, &mut tally);
    // One more request, outside `measured`, to show which fields the variant adds.
    let mut pending = 0;
    let mut req = requests(1);
    let svc = block_on(ServiceExt::<Request<Body>>::ready(&mut app), &mut pending)
        .unwrap_or_else(|never| match never {});
    let res =
        block_on(svc.call(req.remove(0)), &mut pending).unwrap_or_else(|never| match never {});
    let fields: Vec<String> = res
        .headers()
        .iter()
        .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap_or("?")))
        .collect();
    println!(
        "{variant}: {n} requests, {} × 200, {} other, {} pending polls (warm-up: {} × 200, {} other); a response's fields: {}",
        tally.ok, tally.other, tally.pending, warm.ok, warm.other, fields.join(", ")
    );
    Some(
        tally.ok == n as u64
            && warm.ok == KEYS as u64
            && res.status() == StatusCode::OK
            && tally.pending + warm.pending + pending == 0,
    )
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.get(1).and_then(|n| n.parse().ok());
    match (args.first(), n) {
        (Some(variant), Some(n)) => match run(variant, n) {
            Some(true) => ExitCode::SUCCESS,
            Some(false) => {
                eprintln!("not every response was 200 on the first poll");
                ExitCode::FAILURE
            }
            None => {
                eprintln!(
                    "unknown variant {variant:?}; variants: {}",
                    VARIANTS.join(" ")
                );
                ExitCode::FAILURE
            }
        },
        // `cargo bench` runs every bench target with `--bench`: this one measures only when
        // `benches/callgrind_layer.sh` names a variant.
        (Some(flag), None) if flag == "--bench" => ExitCode::SUCCESS,
        // Without arguments (`cargo test --benches`): every variant once, tiny, to see it runs.
        (None, _) => {
            eprintln!(
                "usage: layer_ir <variant> <n>\nvariants: {}",
                VARIANTS.join(" ")
            );
            let all = VARIANTS.iter().all(|v| run(v, 2 * KEYS) == Some(true));
            if all {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        _ => {
            eprintln!(
                "usage: layer_ir <variant> <n>\nvariants: {}",
                VARIANTS.join(" ")
            );
            ExitCode::FAILURE
        }
    }
}
