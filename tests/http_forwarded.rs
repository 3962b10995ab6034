//! The client behind trusted proxies: the key is the right-most untrusted
//! hop, whatever stands to its left. A proxy that appends to `X-Forwarded-For` (as nginx
//! does) leaves the left part to the client; padding or garbage there must neither fail the
//! request nor move it to the key every keyless client shares. Empty list elements are
//! ignored (RFC 9110 §5.6.1.2), repeated header lines are one list, the walk is bounded
//! (32 trusted hops, 64 KiB in all) and linear in the header's size.
#![cfg(all(feature = "tower", not(loom)))]

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Request};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
#[path = "common/cpu_time.rs"]
mod cpu_time;
use cpu_time::thread_cpu_time;

use tollgate::http::{
    ForwardedHeader, ForwardedIp, KeyError, KeyExtractor, OnMissingKey, PeerIp, RateLimitLayer,
};
use tollgate::{KeyedRateLimiter, ManualClock};

/// Every network step is bounded.
const STEP: Duration = Duration::from_secs(10);

/// A request head from `peer` carrying `lines` as header lines of `name`, in order.
fn head(peer: &str, name: &str, lines: &[&[u8]]) -> Parts {
    let mut b = Request::get("/");
    for line in lines {
        b = b.header(name, HeaderValue::from_bytes(line).unwrap());
    }
    let mut req = b.body(()).unwrap();
    req.extensions_mut()
        .insert(peer.parse::<SocketAddr>().unwrap());
    req.into_parts().0
}

fn xff() -> ForwardedIp {
    ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()])
}

fn fwd() -> ForwardedIp {
    xff().header(ForwardedHeader::Forwarded)
}

/// The key `key` reads from the trusted proxy 10.0.0.1 for these header lines.
fn via_proxy(key: &ForwardedIp, name: &str, lines: &[&[u8]]) -> Result<String, KeyError> {
    key.extract(&head("10.0.0.1:9", name, lines))
}

fn assert_malformed(r: Result<String, KeyError>, case: &str) {
    assert!(
        matches!(r, Err(KeyError::Malformed { .. })),
        "{case}: {r:?}"
    );
}

#[test]
fn whatever_stands_left_of_the_rightmost_untrusted_hop_is_never_read() {
    let padding = format!("{}, 203.0.113.9", "x".repeat(4100));
    let cases: [&[u8]; 7] = [
        padding.as_bytes(),
        b"\xff\xfe, 203.0.113.9",
        b"unknown, 203.0.113.9",
        b"~\x80;;=\"\", 203.0.113.9, 10.1.1.1",
        b"198.51.100.1, 203.0.113.9",
        b"[not an address, 203.0.113.9, 10.1.1.1, 10.2.2.2",
        b"\xc3\xa9t\xc3\xa9, 203.0.113.9:4711",
    ];
    for value in cases {
        let case = String::from_utf8_lossy(value)
            .chars()
            .take(60)
            .collect::<String>();
        assert_eq!(
            via_proxy(&xff(), "x-forwarded-for", &[value]).as_deref(),
            Ok("203.0.113.9"),
            "{case}"
        );
    }
    // A hundred garbage hops to the left are not counted against the 32-hop bound either.
    let many = format!("{}203.0.113.9, 10.1.1.1", "junk, ".repeat(100));
    assert_eq!(
        via_proxy(&xff(), "x-forwarded-for", &[many.as_bytes()]).as_deref(),
        Ok("203.0.113.9")
    );
    let fwd_cases: [&[u8]; 4] = [
        b"for=\xff\xfe, for=203.0.113.9",
        b"for=\"unterminated, for=203.0.113.9",
        b"for=unknown;proto=http, for=_hidden, for=\"203.0.113.9:80\"",
        b"for=198.51.100.1, for=203.0.113.9;proto=https, for=10.1.1.1",
    ];
    for value in fwd_cases {
        let case = String::from_utf8_lossy(value).into_owned();
        assert_eq!(
            via_proxy(&fwd(), "forwarded", &[value]).as_deref(),
            Ok("203.0.113.9"),
            "{case}"
        );
    }
}

#[test]
fn empty_list_elements_are_ignored_and_an_empty_chain_means_the_peer() {
    let cases: [(&[u8], &str); 8] = [
        (b"198.51.100.7, , 10.1.1.1", "198.51.100.7"),
        (b"198.51.100.7,", "198.51.100.7"),
        (b"198.51.100.7, \t,,", "198.51.100.7"),
        (b",198.51.100.7", "198.51.100.7"),
        // Every hop trusted: the left-most one is the client.
        (b"10.3.3.3, ,10.1.1.1", "10.3.3.3"),
        (b"", "10.0.0.1"),
        (b" ", "10.0.0.1"),
        (b" , ,, ", "10.0.0.1"),
    ];
    for (value, client) in cases {
        let case = String::from_utf8_lossy(value).into_owned();
        assert_eq!(
            via_proxy(&xff(), "x-forwarded-for", &[value]).as_deref(),
            Ok(client),
            "{case:?}"
        );
    }
    for (value, client) in [
        (&b"for=198.51.100.7,, for=10.1.1.1"[..], "198.51.100.7"),
        (b"for=198.51.100.7, ", "198.51.100.7"),
        (b"", "10.0.0.1"),
    ] {
        let case = String::from_utf8_lossy(value).into_owned();
        assert_eq!(
            via_proxy(&fwd(), "forwarded", &[value]).as_deref(),
            Ok(client),
            "{case:?}"
        );
    }
}

#[test]
fn repeated_header_lines_are_one_list_whose_rightmost_hop_is_in_the_last_line() {
    let k = |lines: &[&[u8]]| via_proxy(&xff(), "x-forwarded-for", lines);
    assert_eq!(
        k(&[b"198.51.100.1", b"10.2.2.2"]).as_deref(),
        Ok("198.51.100.1")
    );
    assert_eq!(
        k(&[b"198.51.100.1", b"203.0.113.9"]).as_deref(),
        Ok("203.0.113.9")
    );
    assert_eq!(
        k(&[b"\xff garbage", b"203.0.113.9, 10.1.1.1"]).as_deref(),
        Ok("203.0.113.9")
    );
    assert_eq!(k(&[b"198.51.100.1", b""]).as_deref(), Ok("198.51.100.1"));
    assert_eq!(k(&[b"", b""]).as_deref(), Ok("10.0.0.1"));
    assert_malformed(
        k(&[b"198.51.100.1", b"unknown"]),
        "garbage in the last line",
    );
    // The cap counts every line: two lines of 40 KiB are 80 KiB.
    let big = format!("{}198.51.100.1", " ".repeat(40 << 10));
    assert_malformed(
        k(&[big.as_bytes(), big.as_bytes()]),
        "80 KiB over two lines",
    );
}

#[test]
fn the_rightmost_untrusted_hop_must_be_an_address() {
    for value in [
        &b"unknown"[..],
        b"198.51.100.1, not-an-ip",
        b"_hidden",
        b"203.0.113.9, \xff\xfe",
        b"198.51.100.1, 10.1.1.1, unknown",
    ] {
        let case = String::from_utf8_lossy(value).into_owned();
        assert_malformed(via_proxy(&xff(), "x-forwarded-for", &[value]), &case);
    }
    for value in [
        &b"for=198.51.100.1, for=unknown"[..],
        b"for=_hidden",
        b"proto=https",
    ] {
        let case = String::from_utf8_lossy(value).into_owned();
        assert_malformed(via_proxy(&fwd(), "forwarded", &[value]), &case);
    }
}

#[test]
fn the_walk_passes_at_most_32_trusted_hops_and_reads_at_most_64_kib() {
    let k = |v: &str| via_proxy(&xff(), "x-forwarded-for", &[v.as_bytes()]);
    let trusted = |n: usize| vec!["10.1.1.1"; n].join(", ");
    assert_eq!(
        k(&format!("203.0.113.9, {}", trusted(32))).as_deref(),
        Ok("203.0.113.9")
    );
    assert_eq!(k(&trusted(32)).as_deref(), Ok("10.1.1.1"));
    assert_malformed(k(&trusted(33)), "33 trusted hops");
    assert_malformed(
        k(&format!("203.0.113.9, {}", trusted(33))),
        "the client behind 33 trusted hops",
    );
    // Exactly 64 KiB with the client on the right: read; one byte more: refused.
    let tail = ", 203.0.113.9";
    let at_cap = format!("{}{tail}", "x".repeat((64 << 10) - tail.len()));
    assert_eq!(at_cap.len(), 64 << 10);
    assert_eq!(k(&at_cap).as_deref(), Ok("203.0.113.9"));
    assert_malformed(k(&format!("x{at_cap}")), "64 KiB + 1");
    // A 10,000-hop chain of 130 KB is refused, whatever its right end says.
    let chain = format!("{}, 203.0.113.9", vec!["198.51.100.1"; 10_000].join(", "));
    assert!(chain.len() > 130_000);
    assert_malformed(k(&chain), "10,000 hops");
}

/// The walk's worst case is a value it reads to its left end: every element empty (skipped,
/// not counted) but for trusted hops at the right. 16 KiB and 64 KiB of it, each timed as
/// the fastest of several rounds; four times the input may cost at most six times the time
/// (quadratic would be sixteen). A failed measurement is taken again, up to five times.
#[test]
fn the_walk_is_linear_in_the_header_size() {
    static ALONE: Mutex<()> = Mutex::new(());
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    let key = xff();
    let value = |bytes: usize| {
        let right = ", 10.1.1.1, 10.2.2.2";
        format!("{}{right}", ",".repeat(bytes - right.len()))
    };
    let heads =
        [16 << 10, 64 << 10].map(|n| head("10.0.0.1:9", "x-forwarded-for", &[value(n).as_bytes()]));
    for h in &heads {
        assert_eq!(key.extract(h).as_deref(), Ok("10.1.1.1"));
    }
    let mut seen = Vec::new();
    for _ in 0..5 {
        let mut best = [Duration::MAX; 2];
        for _ in 0..9 {
            for (h, best) in heads.iter().zip(&mut best) {
                let start = thread_cpu_time();
                for _ in 0..20 {
                    black_box(key.extract(black_box(h)).ok());
                }
                *best = (*best).min(thread_cpu_time().saturating_sub(start));
            }
        }
        let ratio = best[1].as_secs_f64() / best[0].as_secs_f64().max(1e-9);
        eprintln!(
            "16 KiB: {:?}, 64 KiB: {:?}, ratio {ratio:.2}",
            best[0], best[1]
        );
        if ratio < 6.0 {
            return;
        }
        seen.push(format!("{ratio:.1}×"));
    }
    panic!("64 KiB took {} the time of 16 KiB", seen.join(", then "));
}

/// The observed scenario over real HTTP: the loopback peer is our proxy (trusted), appending
/// the client's address to the chain the client sent; a per-IP burst of 1; keyless requests
/// fall back to `"anonymous"`.
#[tokio::test]
async fn a_padded_chain_through_an_appending_proxy_is_charged_to_the_client_over_real_http() {
    let lim = KeyedRateLimiter::<String>::builder("1/min".parse().unwrap())
        .clock(ManualClock::new())
        .build();
    let peer = PeerIp::from_extensions(|ext| {
        ext.get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip())
    });
    let layer = RateLimitLayer::builder()
        .key(ForwardedIp::trusting(["127.0.0.0/8".parse().unwrap()]).peer(peer))
        .on_missing_key(OnMissingKey::Fallback("anonymous".into()))
        .limit("per-ip", lim)
        .build()
        .unwrap();
    let router = axum::Router::new()
        .fallback(|| async { "ok" })
        .layer(layer.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let get = |xff: Vec<u8>| {
        let req = Request::get(format!("http://{addr}/"))
            .header("x-forwarded-for", HeaderValue::from_bytes(&xff).unwrap())
            .body(Empty::new())
            .unwrap();
        let fut = client.request(req);
        async move {
            let res = tokio::time::timeout(STEP, fut)
                .await
                .expect("bounded")
                .unwrap();
            let status = res.status().as_u16();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
    };
    let mut statuses = Vec::new();
    for left in [
        "x".repeat(4100).into_bytes(),
        b"\xff\xfe".to_vec(),
        b"198.51.100.1, , 192.0.2.1".to_vec(),
    ] {
        let mut xff = left;
        xff.extend_from_slice(b", 203.0.113.9");
        let (status, body) = get(xff).await;
        assert_ne!(status, 400, "{body}");
        statuses.push(status);
    }
    assert_eq!(statuses, [200, 429, 429], "all three are 203.0.113.9");
    // A genuinely keyless request (its proxy hides the client) still has the shared key's
    // budget: the padded requests were not charged to it.
    assert_eq!(get(b"unknown".to_vec()).await.0, 200);
    assert_eq!(get(b"unknown".to_vec()).await.0, 429);
    // The proxy itself, with an empty chain, is its own client.
    assert_eq!(get(Vec::new()).await.0, 200);
    assert_eq!(layer.stats().bad_requests, 0);
}
