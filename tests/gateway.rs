//! The gateway example over real HTTP on loopback: the example's own router served on
//! 127.0.0.1:0 in this process (its limiters on a `ManualClock`), driven by hyper's client
//! and by a raw TCP client for headers no well-behaved client sends; and the example's
//! binary started as a process, reloaded with SIGHUP.
#![cfg(all(feature = "tower", feature = "config", not(loom)))]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate::http::RateLimitLayer;
use tollgate::limits::{Limits, LimitsHandle};
use tollgate::ManualClock;

#[allow(dead_code)]
#[path = "../examples/gateway.rs"]
mod gateway;

/// Every network step is bounded.
const STEP: Duration = Duration::from_secs(10);

const LIMITS: &str = r#"
schema = 1
revision = 1
tiers = ["free", "paid"]
categories = ["search", "checkout"]

[[policies]]
name = "free"
match = { tier = "free" }
quota = "5/s"
burst = 10

[[policies]]
name = "free-search"
match = { tier = "free", category = "search" }
quota = "2/s"
"#;

struct Gateway {
    addr: SocketAddr,
    clock: ManualClock,
    handle: Arc<LimitsHandle>,
    layer: RateLimitLayer,
}

async fn start(limits: &str) -> Gateway {
    let clock = ManualClock::new();
    let handle = gateway::handle(Limits::from_toml(limits).unwrap(), clock.clone().into());
    let (router, layer) = gateway::app(Arc::clone(&handle)).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    Gateway {
        addr,
        clock,
        handle,
        layer,
    }
}

struct Reply {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn problem(&self) -> serde_json::Value {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A GET through hyper's client.
async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
    let mut req = http::Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = tokio::time::timeout(STEP, client.request(req.body(Empty::new()).unwrap()))
        .await
        .expect("bounded")
        .unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    Reply {
        status,
        headers,
        body,
    }
}

/// A request written byte by byte over TCP, for headers a client library refuses to send.
async fn raw(addr: SocketAddr, head: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = b"GET /search/q HTTP/1.1\r\nhost: x\r\nconnection: close\r\n".to_vec();
    req.extend_from_slice(head);
    req.extend_from_slice(b"\r\n");
    s.write_all(&req).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(STEP, s.read_to_end(&mut out))
        .await
        .expect("bounded")
        .unwrap();
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut res = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(at) = res.parse(&out).unwrap() else {
        panic!("incomplete response: {:?}", String::from_utf8_lossy(&out));
    };
    let mut map = http::HeaderMap::new();
    for h in res.headers.iter() {
        map.append(
            http::HeaderName::from_bytes(h.name.as_bytes()).unwrap(),
            http::HeaderValue::from_bytes(h.value).unwrap(),
        );
    }
    Reply {
        status: res.code.unwrap(),
        headers: map,
        body: out[at..].to_vec(),
    }
}

const FREE: &[(&str, &str)] = &[("x-api-key", "customer-1"), ("x-tier", "free")];

#[tokio::test]
async fn a_burst_passes_the_next_gets_429_and_after_retry_after_it_passes() {
    let gw = start(LIMITS).await;
    for left in [1, 0] {
        let r = get(gw.addr, "/search/q", FREE).await;
        assert_eq!((r.status, &r.body[..]), (200, &b"ok"[..]));
        assert_eq!(
            r.header("ratelimit-policy"),
            Some(r#""free-search";q=2;w=1"#)
        );
        let expected = format!(r#""free-search";r={left};t=1"#);
        assert_eq!(r.header("ratelimit"), Some(&*expected));
    }
    gw.clock.advance(Duration::from_millis(200)); // the retry-after is 300 ms: one second
    let r = get(gw.addr, "/search/q", FREE).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.header("ratelimit-policy"),
        Some(r#""free-search";q=2;w=1"#)
    );
    assert_eq!(r.header("ratelimit"), Some(r#""free-search";r=0;t=1"#));
    let p = r.problem();
    assert_eq!(p["status"], 429);
    assert_eq!(p["policy"], "free-search");
    assert_eq!(p["reason"], "quota");
    assert_eq!(p["retry_after"], 1);
    // Another customer is not affected; the other tier's policy is its own.
    let other = get(
        gw.addr,
        "/search/q",
        &[("x-api-key", "customer-2"), ("x-tier", "free")],
    )
    .await;
    assert_eq!(other.status, 200);
    // 299 ms later still denied (the exact wait is 300 ms), at 300 ms allowed.
    gw.clock.advance(Duration::from_millis(299));
    assert_eq!(get(gw.addr, "/search/q", FREE).await.status, 429);
    gw.clock.advance(Duration::from_millis(1));
    assert_eq!(get(gw.addr, "/search/q", FREE).await.status, 200);
    let s = gw.layer.stats();
    assert_eq!((s.allowed, s.denied), (4, 2));
}

#[tokio::test]
async fn a_missing_key_is_401_and_an_unmatched_request_has_no_ratelimit_field() {
    let gw = start(LIMITS).await;
    let r = get(gw.addr, "/search/q", &[("x-tier", "free")]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.problem()["reason"], "missing_key");
    // No tier: no policy of this document matches.
    let r = get(gw.addr, "/search/q", &[("x-api-key", "k")]).await;
    assert_eq!((r.status, &r.body[..]), (200, &b"ok"[..]));
    assert!(r.header("ratelimit").is_none() && r.header("ratelimit-policy").is_none());
    assert_eq!(gw.layer.stats().unmatched, 1);
    assert_eq!(gw.layer.stats().bad_requests, 1);
}

#[tokio::test]
async fn a_reload_applies_to_the_next_request() {
    let gw = start(LIMITS).await;
    for _ in 0..2 {
        assert_eq!(get(gw.addr, "/search/q", FREE).await.status, 200);
    }
    assert_eq!(get(gw.addr, "/search/q", FREE).await.status, 429);
    let looser = LIMITS
        .replace("revision = 1", "revision = 2")
        .replace("quota = \"2/s\"", "quota = \"2/s\"\nburst = 4");
    gw.handle
        .reload(Limits::from_toml(&looser).unwrap())
        .unwrap();
    // The key had used its whole burst of 2, so it has used the whole burst of 4: still
    // denied now (no free burst), and after 1 s it has two requests, not one.
    assert_eq!(get(gw.addr, "/search/q", FREE).await.status, 429);
    gw.clock.advance(Duration::from_secs(1));
    for _ in 0..2 {
        let r = get(gw.addr, "/search/q", FREE).await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("ratelimit-policy"),
            Some(r#""free-search";q=2;w=1;tollgate-burst=4"#)
        );
    }
    assert_eq!(get(gw.addr, "/search/q", FREE).await.status, 429);
}

#[tokio::test]
async fn grpc_requests_are_denied_with_resource_exhausted_and_a_pushback() {
    let gw = start(LIMITS).await;
    let grpc = [FREE[0], FREE[1], ("content-type", "application/grpc+proto")];
    for _ in 0..2 {
        assert_eq!(get(gw.addr, "/search/q", &grpc).await.status, 200);
    }
    gw.clock.advance(Duration::from_millis(250));
    let r = get(gw.addr, "/search/q", &grpc).await;
    assert_eq!(r.status, 200, "gRPC errors travel as HTTP 200");
    assert_eq!(r.header("grpc-status"), Some("8"));
    assert_eq!(r.header("grpc-retry-pushback-ms"), Some("250"));
    assert_eq!(r.header("content-type"), Some("application/grpc"));
    assert!(r.header("retry-after").is_none());
    assert!(r.body.is_empty());
}

#[tokio::test]
async fn hostile_headers_get_a_documented_answer_and_the_server_keeps_serving() {
    let gw = start(LIMITS).await;
    let huge = format!("x-api-key: {}\r\nx-tier: free\r\n", "k".repeat(16 * 1024));
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (huge.into_bytes(), 400, "malformed_key"),
        (
            b"x-api-key: caf\xc3\xa9\r\nx-tier: free\r\n".to_vec(),
            400,
            "malformed_key",
        ),
        (
            b"x-api-key: \xff\xfe\r\nx-tier: free\r\n".to_vec(),
            400,
            "malformed_key",
        ),
        (
            b"x-api-key: a\r\nx-api-key: b\r\nx-tier: free\r\n".to_vec(),
            400,
            "malformed_key",
        ),
        (
            b"x-api-key: a b\r\nx-tier: free\r\n".to_vec(),
            400,
            "malformed_key",
        ),
        (
            b"x-api-key:\r\nx-tier: free\r\n".to_vec(),
            401,
            "missing_key",
        ),
        (
            b"x-api-key: k\r\nx-tier: fr\xffee\r\n".to_vec(),
            400,
            "malformed_header",
        ),
        (
            b"x-api-key: k\r\nx-tier: free\r\nx-tier: paid\r\n".to_vec(),
            400,
            "malformed_header",
        ),
        (
            b"x-api-key: k\r\nx-tier: free\r\nx-envoy-attempt-count: -1\r\n".to_vec(),
            400,
            "malformed_header",
        ),
        (
            b"x-api-key: k\r\nx-tier: free\r\ntollgate-attempt: 99999999999999999999999\r\n"
                .to_vec(),
            400,
            "malformed_header",
        ),
        (
            b"x-api-key: k\r\nx-tier: free\r\ngrpc-previous-rpc-attempts: 0x1\r\n".to_vec(),
            400,
            "malformed_header",
        ),
    ];
    for (head, status, reason) in cases {
        let r = raw(gw.addr, &head).await;
        let shown = String::from_utf8_lossy(&head[..head.len().min(60)]).into_owned();
        assert_eq!(r.status, status, "{shown}");
        assert_eq!(r.problem()["reason"], reason, "{shown}");
    }
    // None of them was counted against anyone; the server still serves.
    let r = raw(
        gw.addr,
        b"x-api-key: k\r\nx-tier: free\r\ntollgate-attempt: 0\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("ratelimit"), Some(r#""free-search";r=1;t=1"#));
}

/// The example's binary: built by `cargo test` (which builds examples) next to this test's
/// executable.
fn example_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let bin = dir.join("examples").join("gateway");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --all-features` (which builds the examples)",
        bin.display()
    );
    bin
}

#[tokio::test]
async fn the_example_binary_serves_and_reloads_on_sighup() {
    use tokio::io::AsyncBufReadExt;
    let dir = std::env::temp_dir().join(format!("tollgate-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("limits.toml");
    std::fs::write(&file, LIMITS.replace("\"2/s\"", "\"1/min\"")).unwrap();
    let mut child = tokio::process::Command::new(example_binary())
        .args(["--listen", "127.0.0.1:0", "--limits"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next_line = async || {
        tokio::time::timeout(STEP, lines.next_line())
            .await
            .expect("bounded")
            .unwrap()
            .unwrap()
    };
    let first = next_line().await;
    let addr: SocketAddr = first
        .strip_prefix("listening on ")
        .and_then(|r| r.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(get(addr, "/search/q", FREE).await.status, 200);
    let r = get(addr, "/search/q", FREE).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("60"));
    // Built with `metrics`, the binary serves `GET /metrics` outside the limit (no key, 200),
    // with the verdicts it gave.
    #[cfg(feature = "metrics")]
    for _ in 0..3 {
        let m = get(addr, "/metrics", &[]).await;
        assert_eq!(m.status, 200);
        let text = String::from_utf8(m.body).unwrap();
        for (outcome, reason) in [("allow", "none"), ("deny", "quota")] {
            let series = format!(
                "tollgate_checks_total{{limiter=\"gateway\",policy=\"free-search\",outcome=\"{outcome}\",reason=\"{reason}\"}} 1\n"
            );
            assert!(text.contains(&series), "{series} not in\n{text}");
        }
    }

    // A looser document: 1/min → 1/s with a burst of 100 (revision 2), then SIGHUP.
    let looser = LIMITS
        .replace("revision = 1", "revision = 2")
        .replace("\"2/s\"", "\"1/s\"\nburst = 100");
    std::fs::write(&file, looser).unwrap();
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let line = next_line().await;
    assert!(line.starts_with("reload ("), "{line}");
    assert!(
        line.contains("revision 1 -> 2, 1 policies changed"),
        "{line}"
    );
    // The customer kept its fill level (all of the burst used), and gets the new rate.
    let r = get(addr, "/search/q", FREE).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    child.kill().await.unwrap();
    std::fs::remove_dir_all(&dir).ok();
}
