//! [`BackendError`]: what a shared check or its builder reports as an error. A denial is a
//! verdict, and a backend fault becomes the failure policy's verdict; errors are caller
//! mistakes and bad configuration.

use crate::engine::error::{InsufficientCapacity, Quoted};

/// A shared check (or building a [`SharedRateLimiter`](crate::SharedRateLimiter)) that could
/// not be carried out.
///
/// Redis being slow, down or at fault is *not* an error: the check returns the verdict of the
/// [`FailurePolicy`](crate::FailurePolicy), which says so. Errors are the caller's mistakes and
/// bad configuration, which retrying cannot fix.
///
/// ```
/// use tollgate::{BackendError, SharedRateLimiter};
///
/// let err = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:1/")
///     .prefix("bad{prefix")
///     .build()
///     .unwrap_err();
/// assert!(matches!(err, BackendError::InvalidName { .. }));
/// assert_eq!(err.to_string(), r#"invalid prefix "bad{prefix": names are 1 to 64 bytes without '{' or '}'"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The cost exceeds the burst of one of the limits (never retryable).
    #[error(transparent)]
    InsufficientCapacity(#[from] InsufficientCapacity),
    /// A key longer than [`MAX_KEY_BYTES`](crate::SharedRateLimiter::MAX_KEY_BYTES).
    #[error("key of {len} bytes is longer than the limit of {max} bytes")]
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
        /// The largest length accepted.
        max: usize,
    },
    /// A prefix or policy name that would break the key layout `prefix:policy:{customer}`.
    #[error("invalid {what} {}: names are 1 to 64 bytes without '{{' or '}}'", Quoted(.name))]
    InvalidName {
        /// `"prefix"` or `"policy"`.
        what: &'static str,
        /// The name as given.
        name: String,
    },
    /// A policy name with a `:`. Keys are `prefix:policy:{customer}`: prefix `svc` with
    /// policy `a:b` and prefix `svc:a` with policy `b` would share every key. A prefix may
    /// hold `:` (`svc:a` is a namespace); a policy may not.
    ///
    /// ```
    /// use tollgate::{BackendError, SharedRateLimiter};
    ///
    /// let err = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:1/")
    ///     .prefix("svc")
    ///     .policy("a:b")
    ///     .build()
    ///     .unwrap_err();
    /// assert!(matches!(err, BackendError::ColonInPolicy(ref p) if p == "a:b"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[error(
        "invalid policy {}: a policy name may not contain ':' (keys are prefix:policy:{{customer}}, so it would share keys with another prefix)",
        Quoted(.0)
    )]
    ColonInPolicy(String),
    /// Two limits with the same policy name (they would share one key).
    #[error("duplicate policy {}", Quoted(.0))]
    DuplicatePolicy(String),
    /// No limit of that policy name.
    #[error("unknown policy {}", Quoted(.0))]
    UnknownPolicy(String),
    /// A local share outside `(0, 1]`.
    #[error("local share {0} is not in (0, 1]")]
    InvalidShare(f64),
    /// A setting outside its range (a zero deadline, a zero breaker threshold, …).
    #[error("invalid setting: {0}")]
    InvalidSetting(&'static str),
    /// `build` was called outside a tokio runtime (the client needs one to reconnect).
    #[error("no tokio runtime: build the shared limiter inside one")]
    NoRuntime,
    /// The Redis URL does not parse, or the client could not be set up.
    #[error("redis client: {0}")]
    Client(#[source] redis::RedisError),
    /// A cluster node answered (`MOVED`, `CLUSTERDOWN`, …) but these URLs cannot reach a
    /// cluster (a database other than 0, a Unix socket), or [`seed_urls`] were given that
    /// cannot. Returned by every check until the configuration is fixed: never fallback
    /// verdicts.
    ///
    /// [`seed_urls`]: crate::SharedRateLimiterBuilder::seed_urls
    ///
    /// ```
    /// use tollgate::{BackendError, SharedRateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let err = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:7000/3")
    ///     .seed_urls(&["redis://127.0.0.1:7001/3"])
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "redis cluster: the url selects database 3, and a cluster has database 0 only"
    /// );
    /// # Ok(())
    /// # }
    /// ```
    #[error("redis cluster: {0}")]
    Cluster(String),
    /// The script answered something it never answers (a proxy in between). Checks no longer
    /// return it: such a reply is a backend fault, answered by the
    /// [`FailurePolicy`](crate::FailurePolicy) and counted in
    /// [`SharedStats::errors`](crate::SharedStats::errors). Kept so that code matching it
    /// still compiles.
    #[error("unexpected reply from the redis script: {0}")]
    Protocol(String),
}
