//! The layer warns once, through `tracing`, about a server that passes no peer address: a
//! file of its own, so that no other test in the process registers the callsite first under no
//! subscriber (tracing caches a callsite's interest process-wide).
#![cfg(all(feature = "axum", feature = "tracing", not(loom)))]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Empty;
use tollgate::http::{PeerIp, RateLimitLayer};
use tollgate::{KeyedRateLimiter, ManualClock};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// Counts the warnings with target `tollgate::http`.
#[derive(Clone, Default)]
struct Warnings(Arc<AtomicUsize>);

impl Subscriber for Warnings {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::always()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let m = e.metadata();
        if m.target() == "tollgate::http" && *m.level() == Level::WARN {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn a_server_without_peer_addresses_is_warned_about_once() {
    let warnings = Warnings::default();
    // The global default, set before any event: the server's tasks see it on any thread.
    tracing::subscriber::set_global_default(warnings.clone()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let lim = KeyedRateLimiter::<String>::builder("2/min".parse().unwrap())
            .clock(ManualClock::new())
            .build();
        let layer = RateLimitLayer::builder()
            .key(PeerIp::new())
            .limit("per-ip", lim)
            .build()
            .unwrap();
        let app = axum::Router::new()
            .fallback(|| async { "ok" })
            .layer(layer.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Empty<Bytes>>();
        for _ in 0..20 {
            let req = Request::get(format!("http://{addr}/"))
                .body(Empty::new())
                .unwrap();
            let res = tokio::time::timeout(Duration::from_secs(5), client.request(req))
                .await
                .expect("an answer in time")
                .expect("a response");
            assert_eq!(res.status(), 500);
        }
        assert_eq!(layer.stats().no_peer_address, 20);
    });
    assert_eq!(
        warnings.0.load(Ordering::SeqCst),
        1,
        "one warning, not one per request"
    );
}
