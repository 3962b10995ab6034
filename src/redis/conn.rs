//! The connection to Redis, of one of two kinds — one server (`ConnectionManager`, which
//! reconnects) or a cluster (the `redis` crate's async `ClusterConnection`, which routes each
//! call by its first key and follows `MOVED`, `ASK` and `TRYAGAIN` itself) — and the discovery
//! of which.
//!
//! Discovery is lazy, on the replies (the builder never connects): a limiter built on one URL
//! starts on a one-server connection, and the first cluster reply it meets there — `MOVED`,
//! `ASK`, `TRYAGAIN` or `CLUSTERDOWN`, which no standalone server gives — switches it to cluster
//! mode for good, the call that met it sent again through the cluster connection within the
//! same deadline. Chosen over asking `CLUSTER INFO` first: no extra round trip, and a node
//! answers a cluster reply only when it is one. A limiter given [`seed_urls`] starts in cluster
//! mode. A URL that cannot serve a cluster (a database other than 0, a Unix socket) meeting a
//! cluster reply is [`BackendError::Cluster`], never a fallback verdict.
//!
//! [`seed_urls`]: super::builder::SharedRateLimiterBuilder::seed_urls

use core::time::Duration;

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Mutex;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionInfo, IntoConnectionInfo, RedisError, ServerErrorKind};

use super::breaker::BREAKER_RANGES;
use super::error::BackendError;
use super::renew::Renewable;
use super::tls::{self, TlsConfig};

/// How often the cluster client may follow a redirection or retry (`TRYAGAIN`, `CLUSTERDOWN`,
/// a lost node) within one call: each `MOVED` or `ASK` spends one. Four covers a slot that
/// moved while the map was stale and an `ASK` during its migration; the deadline bounds them
/// all.
const CLUSTER_RETRIES: u32 = 4;

/// The clients for a limiter's URLs.
pub(crate) struct Clients {
    /// The builder's URL as one server; `None` when seeds were given (cluster from the start).
    pub(crate) standalone: Option<redis::Client>,
    /// The cluster client over every URL, or why these URLs cannot reach a cluster.
    pub(crate) cluster: Result<ClusterClient, String>,
    /// The cluster connection's timeouts.
    pub(crate) cluster_config: ClusterConfig,
}

/// Builds the clients from the URLs (the builder's first, then the seeds) with the builder's
/// TLS settings: the one place URLs become clients. The cluster client's retries wait 1 ms, doubling, at most a quarter of the
/// deadline each, so that its own retries fit in the call's deadline (which cuts them anyway).
pub(crate) fn clients(
    urls: &[String],
    tls: &TlsConfig,
    deadline: Duration,
) -> Result<Clients, BackendError> {
    let infos = urls
        .iter()
        .map(|u| u.as_str().into_connection_info())
        .collect::<Result<Vec<ConnectionInfo>, RedisError>>()
        .map_err(BackendError::Client)?;
    let standalone = match urls {
        [one] => Some(tls::client(one, tls)?),
        _ => None,
    };
    let quarter = u64::try_from(deadline.as_millis() / 4)
        .unwrap_or(u64::MAX)
        .max(2);
    let cluster = match infos.iter().find(|i| i.redis_settings().db() != 0) {
        Some(i) => Err(format!(
            "the url selects database {}, and a cluster has database 0 only",
            i.redis_settings().db()
        )),
        None => cluster_builder(infos, tls)?
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(1)
            .max_retry_wait(quarter)
            .retry_wait_formula(1, 2)
            .connection_timeout(Duration::from_secs(1))
            .overall_response_timeout(Some(deadline))
            .build()
            .map_err(|e| e.to_string()),
    };
    if standalone.is_none() {
        if let Err(why) = &cluster {
            return Err(BackendError::Cluster(why.clone()));
        }
    }
    // A node that stops answering (killed without a reset, partitioned away) must not hold
    // a request past the deadline: the cluster client's slot refresh waits on every node it
    // asks, and every call queues behind a refresh.
    let cluster_config = ClusterConfig::new()
        .set_connection_timeout(Duration::from_secs(1))
        .set_response_timeout(deadline);
    Ok(Clients {
        standalone,
        cluster,
        cluster_config,
    })
}

/// The cluster client's builder with the TLS settings: `rediss://` seeds (all of them, or
/// none: the `redis` crate takes TLS from the first and refuses a mix) get the process's
/// crypto provider and the private CA or client certificate; TLS settings with `redis://`
/// seeds are refused, as for one server.
fn cluster_builder(
    infos: Vec<ConnectionInfo>,
    tls: &TlsConfig,
) -> Result<ClusterClientBuilder, BackendError> {
    let is_tls = infos
        .iter()
        .any(|i| matches!(i.addr(), redis::ConnectionAddr::TcpTls { .. }));
    if !is_tls {
        if tls.is_set() {
            return Err(BackendError::InvalidSetting(
                "tls_root_ca and tls_client_cert need a rediss:// url",
            ));
        }
        return Ok(ClusterClientBuilder::new(infos));
    }
    tls::ensure_provider();
    let builder = ClusterClientBuilder::new(infos);
    Ok(match tls.certificates()? {
        Some(certs) => builder.certs(certs),
        None => builder,
    })
}

/// A connection to use for one call.
pub(crate) enum Con {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

/// The limiter's connections: the one-server connection until a cluster reply, then the
/// cluster's.
///
/// The cluster connection is renewed when it stalls: a call that times out when no call in
/// its slot range has succeeded for [`STALL`] (and no renewal happened in that time) replaces
/// it with a fresh one that starts from the URLs. The `redis` crate's cluster client (1.2.2)
/// can hang when a node dies under load — calls timing out long after the failover, on every
/// node or only on the dead master's slots while the live masters answer — as its slot
/// refresh waits on a lock that a queued call holds; a fresh client learns the new topology at
/// once (measured in `tests/redis_cluster_faults.rs`).
pub(crate) struct Backend {
    /// Renewed after a refused `AUTH` (see `renew.rs`).
    standalone: Option<Renewable>,
    cluster_client: Result<ClusterClient, String>,
    cluster_config: ClusterConfig,
    /// Set on the first cluster reply (or the first call, with seeds); renewed on a stall.
    cluster: Mutex<Option<ClusterConnection>>,
    /// Set once the limiter is in cluster mode.
    is_cluster: AtomicU64,
    /// Per slot range (as the breakers'), when a call through the cluster connection last
    /// succeeded there, or the connection was last created (ns, OS clock): one shard's calls
    /// stalling is seen while the others' succeed.
    last_ok: Box<[AtomicU64]>,
    /// When the cluster connection was last created (ns, OS clock).
    created: AtomicU64,
    /// How often the cluster connection was renewed after a stall.
    renewals: AtomicU64,
}

/// How long every call through the cluster connection may fail by timing out before it is
/// renewed: past a failover's usual length (`cluster-node-timeout` plus an election), so a
/// renewal answers a stuck client, not a slow cluster.
pub(crate) const STALL: Duration = Duration::from_secs(1);

impl Backend {
    /// The backend for `clients`; connects nothing (must run inside a tokio runtime).
    pub(crate) fn new(clients: Clients) -> Result<Self, BackendError> {
        // Reconnects are paced by the breaker (only probes call while it is open), so each
        // reconnect is one attempt with no backoff of its own: no storm when the server comes
        // back, and with no server the call that waits on the reconnect (see `decide`) is
        // refused at once. A backoff here (50 ms and more) outlasted the deadline, and every
        // call of an outage counted as a timeout.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_number_of_retries(0);
        let standalone_none = clients.standalone.is_none();
        let standalone = match clients.standalone {
            Some(client) => Some(Renewable::new(client, config).map_err(BackendError::Client)?),
            None => None,
        };
        Ok(Self {
            standalone,
            cluster_client: clients.cluster,
            cluster_config: clients.cluster_config,
            cluster: Mutex::new(None),
            is_cluster: AtomicU64::new(u64::from(standalone_none)),
            last_ok: (0..BREAKER_RANGES).map(|_| AtomicU64::new(0)).collect(),
            created: AtomicU64::new(0),
            renewals: AtomicU64::new(0),
        })
    }

    /// `true` once the limiter talks to a cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        // Relaxed: a flag read on its own; the connection itself is behind the mutex.
        self.is_cluster.load(Ordering::Relaxed) != 0
    }

    /// A fresh one-server connection after a refused `AUTH`: the `ConnectionManager` reconnects
    /// only after I/O errors, so it would keep the refused one for good. (The cluster client
    /// authenticates each node's connection as it makes it.)
    pub(crate) fn renew(&self) {
        if let (Some(s), false) = (&self.standalone, self.is_cluster()) {
            s.renew();
        }
    }

    /// How often the cluster connection was renewed after a stall.
    pub(crate) fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// The connection to use now.
    pub(crate) fn con(&self) -> Result<Con, BackendError> {
        match (&self.standalone, self.is_cluster()) {
            (Some(s), false) => Ok(Con::Standalone(s.get())),
            _ => self.to_cluster().map(Con::Cluster),
        }
    }

    /// Cluster mode from now on: the cluster connection, created (without waiting for it to
    /// connect: its task connects in the background, and calls queue for it) on first use.
    pub(crate) fn to_cluster(&self) -> Result<ClusterConnection, BackendError> {
        let mut slot = self.cluster.lock();
        if let Some(c) = &*slot {
            return Ok(c.clone());
        }
        let client = self
            .cluster_client
            .as_ref()
            .map_err(|_| self.no_cluster(None))?;
        #[cfg(feature = "tracing")]
        tracing::info!(
            target: "tollgate::redis",
            event = "cluster_mode",
            "Redis answered as a cluster node (or seeds were given): checks go through the cluster client"
        );
        let con = client.get_pending_async_connection_with_config(self.cluster_config.clone());
        self.created_now(now_ns());
        self.is_cluster.store(1, Ordering::Relaxed);
        *slot = Some(con.clone());
        Ok(con)
    }

    /// Why these URLs cannot reach a cluster, as the error a check returns (`refused`: how a
    /// server refused the URL's database, if that is how it showed).
    pub(crate) fn no_cluster(&self, refused: Option<SelectRefused>) -> BackendError {
        let why = match &self.cluster_client {
            Err(why) => why.clone(),
            Ok(_) => "a cluster node refused the connection's setup".to_owned(),
        };
        BackendError::Cluster(match refused {
            Some(SelectRefused::OutOfRange) => format!(
                "{why}; the server has no such database (DB index is out of range), as a \
                 valkey cluster node or a server with fewer databases answers"
            ),
            _ => why,
        })
    }

    /// A call through the cluster connection succeeded, for a key in slot range `range`.
    pub(crate) fn cluster_ok(&self, range: usize) {
        if let Some(r) = self.last_ok.get(range) {
            r.store(now_ns(), Ordering::Relaxed);
        }
    }

    /// A call through the cluster connection timed out, for a key in slot range `range`:
    /// renews the connection if no call in that range has succeeded for [`STALL`] and it was
    /// not renewed in that time; `true` if it did. Per range, because a client stuck on a dead master's slots
    /// still answers the live masters': a stall judged over every call would never be seen.
    pub(crate) fn cluster_timed_out(&self, range: usize) -> bool {
        let now = now_ns();
        let stall = u64::try_from(STALL.as_nanos()).unwrap_or(u64::MAX);
        let stalled = |at: &AtomicU64| now.saturating_sub(at.load(Ordering::Relaxed)) >= stall;
        let Some(last) = self.last_ok.get(range) else {
            return false;
        };
        if !stalled(last) || !stalled(&self.created) {
            return false;
        }
        let (Ok(client), mut slot) = (&self.cluster_client, self.cluster.lock()) else {
            return false;
        };
        // Checked again under the lock: one renewal per stall, whatever the callers.
        if !stalled(&self.created) {
            return false;
        }
        #[cfg(feature = "tracing")]
        tracing::warn!(
            target: "tollgate::redis",
            event = "cluster_renewed",
            stalled_ms = now.saturating_sub(last.load(Ordering::Relaxed)) / 1_000_000,
            "calls through the Redis Cluster client kept timing out: a fresh client starts from the URLs"
        );
        *slot = Some(client.get_pending_async_connection_with_config(self.cluster_config.clone()));
        self.created_now(now);
        self.renewals.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// A fresh cluster connection at `now`: every range starts its stall watch again.
    fn created_now(&self, now: u64) {
        self.created.store(now, Ordering::Relaxed);
        for r in self.last_ok.iter() {
            r.store(now, Ordering::Relaxed);
        }
    }
}

/// The OS clock, in ns: the stall watch's time base (real time, whatever the limiter's clock).
fn now_ns() -> u64 {
    crate::engine::clock::Clock::os().now_nanos()
}

/// How a server refused the `SELECT` of a one-server connection whose URL names a database
/// other than 0: no check can ever succeed on it, so it is a configuration error, not a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SelectRefused {
    /// A Redis cluster node: `ERR SELECT is not allowed in cluster mode`.
    Cluster,
    /// `ERR DB index is out of range`: what a Valkey cluster node answers (Valkey 9.1, with
    /// the default `cluster-databases 1`), and any server asked for a database past its
    /// `databases` count. The two say the same words, so the error names both.
    OutOfRange,
}

/// How `e` refused a `SELECT`, if it is such a refusal.
pub(crate) fn select_refused(e: &RedisError) -> Option<SelectRefused> {
    let text = e.to_string();
    if text.contains("SELECT is not allowed in cluster mode") {
        Some(SelectRefused::Cluster)
    } else if text.contains("DB index is out of range") {
        Some(SelectRefused::OutOfRange)
    } else {
        None
    }
}

/// `true` for a reply only a cluster node gives: a redirection, `TRYAGAIN`, or `CLUSTERDOWN`.
pub(crate) fn is_cluster_reply(e: &RedisError) -> bool {
    is_routing(e) || e.kind() == redis::ErrorKind::Server(ServerErrorKind::ClusterDown)
}

/// `true` for the cluster's routing replies (`MOVED`, `ASK`, `TRYAGAIN`): the client follows
/// them; one that outlives its retries is sent again, never counted as a failure.
pub(crate) fn is_routing(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(
            ServerErrorKind::Moved | ServerErrorKind::Ask | ServerErrorKind::TryAgain
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_select_is_told_in_redis_and_valkey_words() {
        let err = |detail: &str| redis::make_extension_error("ERR".into(), Some(detail.into()));
        assert_eq!(
            select_refused(&err("SELECT is not allowed in cluster mode")),
            Some(SelectRefused::Cluster)
        );
        assert_eq!(
            select_refused(&err("DB index is out of range")),
            Some(SelectRefused::OutOfRange)
        );
        assert_eq!(select_refused(&err("unknown command 'SELECT'")), None);
    }
}
