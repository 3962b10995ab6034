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
use std::sync::OnceLock;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionInfo, IntoConnectionInfo, RedisError, ServerErrorKind};

use super::error::BackendError;

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
}

/// Builds the clients from the URLs (the builder's first, then the seeds): the one place URLs
/// become clients. The cluster client's retries wait 1 ms, doubling, at most a quarter of the
/// deadline each, so that its own retries fit in the call's deadline (which cuts them anyway).
pub(crate) fn clients(urls: &[String], deadline: Duration) -> Result<Clients, BackendError> {
    let infos = urls
        .iter()
        .map(|u| u.as_str().into_connection_info())
        .collect::<Result<Vec<ConnectionInfo>, RedisError>>()
        .map_err(BackendError::Client)?;
    let standalone = match urls {
        [one] => Some(redis::Client::open(one.as_str()).map_err(BackendError::Client)?),
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
        None => ClusterClientBuilder::new(infos)
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
    Ok(Clients {
        standalone,
        cluster,
    })
}

/// A connection to use for one call.
pub(crate) enum Con {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

/// The limiter's connections: the one-server connection until a cluster reply, then the
/// cluster's.
pub(crate) struct Backend {
    standalone: Option<ConnectionManager>,
    cluster_client: Result<ClusterClient, String>,
    /// Set once, on the first cluster reply (or the first call, with seeds).
    cluster: OnceLock<ClusterConnection>,
}

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
        let standalone = match clients.standalone {
            Some(client) => Some(
                ConnectionManager::new_lazy_with_config(client, config)
                    .map_err(BackendError::Client)?,
            ),
            None => None,
        };
        Ok(Self {
            standalone,
            cluster_client: clients.cluster,
            cluster: OnceLock::new(),
        })
    }

    /// `true` once the limiter talks to a cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.standalone.is_none() || self.cluster.get().is_some()
    }

    /// The connection to use now.
    pub(crate) fn con(&self) -> Result<Con, BackendError> {
        match (&self.standalone, self.cluster.get()) {
            (_, Some(c)) => Ok(Con::Cluster(c.clone())),
            (Some(s), None) => Ok(Con::Standalone(s.clone())),
            (None, None) => self.to_cluster().map(Con::Cluster),
        }
    }

    /// Cluster mode from now on: the cluster connection, created (without waiting for it to
    /// connect: its task connects in the background, and calls queue for it) on first use.
    pub(crate) fn to_cluster(&self) -> Result<ClusterConnection, BackendError> {
        if let Some(c) = self.cluster.get() {
            return Ok(c.clone());
        }
        let client = self
            .cluster_client
            .as_ref()
            .map_err(|why| BackendError::Cluster(why.clone()))?;
        let con = self.cluster.get_or_init(|| {
            #[cfg(feature = "tracing")]
            tracing::info!(
                target: "tollgate::redis",
                event = "cluster_mode",
                "Redis answered as a cluster node (or seeds were given): checks go through the cluster client"
            );
            client.get_pending_async_connection_with_config(ClusterConfig::new())
        });
        Ok(con.clone())
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
        redis::ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask | ServerErrorKind::TryAgain)
    )
}
