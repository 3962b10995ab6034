//! Finding a real `redis-server` for the Redis tests.
//!
//! Non-destructive tests use the server in `TOLLGATE_REDIS_URL` (CI starts one), each with its
//! own key prefix; when the variable is unset they start their own `redis-server` on a free
//! loopback port. Destructive tests (kill, pause, flush, maxmemory) always start their own.
//!
//! Without a server (no variable, no `redis-server` on PATH) a Redis test FAILS with a message
//! saying how to provide one — a test that returned early would pass as if it had tested
//! Redis. Set `TOLLGATE_REDIS_SKIP=1` to skip them on purpose: each then prints why.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A `redis-server` this test started; killed when dropped.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    extra: Vec<String>,
}

/// Where a test's Redis is: a URL, and the server if the test owns it.
pub struct Redis {
    pub url: String,
    pub own: Option<Server>,
}

fn skip_or_fail(test: &str, why: &str) -> Option<Redis> {
    if std::env::var_os("TOLLGATE_REDIS_SKIP").is_some_and(|v| v == "1") {
        eprintln!("SKIPPED {test}: {why} (TOLLGATE_REDIS_SKIP=1)");
        return None;
    }
    panic!(
        "{test}: {why}. Set TOLLGATE_REDIS_URL=redis://127.0.0.1:PORT/ to a running server, \
         install redis-server (apt-get install redis-server), or set TOLLGATE_REDIS_SKIP=1 \
         to skip the Redis tests on purpose"
    );
}

/// The shared server, or one of the test's own.
pub fn shared(test: &str) -> Option<Redis> {
    if let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") {
        return Some(Redis { url, own: None });
    }
    own(test)
}

/// A server of the test's own (for destructive tests), started with `extra` arguments.
pub fn own_with(test: &str, extra: &[&str]) -> Option<Redis> {
    match Server::start(extra) {
        Ok(server) => Some(Redis {
            url: server.url(),
            own: Some(server),
        }),
        Err(why) => skip_or_fail(test, &why),
    }
}

pub fn own(test: &str) -> Option<Redis> {
    own_with(test, &[])
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Server {
    pub fn start(extra: &[&str]) -> Result<Server, String> {
        // A port picked free can be picked by a test running beside this one before either
        // server binds it: the loser exits while a PING reaches the winner. So the server is
        // ours when it says its process id is our child's; a lost race is tried again on
        // another port.
        for _ in 0..8 {
            let port = free_port().map_err(|e| format!("no free port: {e}"))?;
            let mut s = Server {
                child: None,
                port,
                extra: extra.iter().map(|s| s.to_string()).collect(),
            };
            s.spawn()?;
            if s.is_ours() {
                return Ok(s);
            }
            s.kill();
        }
        Err("every port tried was taken before redis-server could bind it".to_owned())
    }

    /// `true` if the server answering on the port is the child this `Server` started.
    fn is_ours(&self) -> bool {
        let Some(child) = &self.child else {
            return false;
        };
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut con) = client.get_connection_with_timeout(Duration::from_secs(2)) else {
            return false;
        };
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut con)
            .unwrap_or_default();
        info.lines()
            .find_map(|l| l.trim().strip_prefix("process_id:"))
            .and_then(|p| p.parse::<u32>().ok())
            == Some(child.id())
    }

    fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("redis-server could not be started ({e}); no TOLLGATE_REDIS_URL either")
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.ping() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(format!(
            "redis-server on port {} did not answer within 10 s",
            self.port
        ))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut con).is_ok()
    }

    /// Kills the server (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn().expect("redis-server restarts on its port");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A key prefix no other test (or earlier run) uses.
pub fn prefix(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "t-{test}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A plain connection for the test's own commands (SET, GET, CLIENT PAUSE, …).
pub fn connection(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .expect("a connection to the test's redis")
}

/// One publish of `lim`'s figures, registered as `shared`, in the Prometheus text format.
#[cfg(feature = "metrics")]
pub fn scrape(lim: &std::sync::Arc<tollgate::redis::SharedRateLimiter>) -> String {
    let registry = tollgate::metrics::MetricsRegistry::new();
    registry
        .register_shared("shared", lim)
        .expect("a fresh registry takes the name");
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || registry.publish());
    handle.render()
}

/// The value of the series named exactly `series` (labels included) in a scrape.
#[cfg(feature = "metrics")]
pub fn series(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
}
