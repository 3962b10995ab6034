//! [`BackendError`]: what a shared check or its builder reports as an error. A denial is a
//! verdict, and a backend fault becomes the failure policy's verdict; errors are caller
//! mistakes and bad configuration, and the misconfigurations a call reveals (a certificate,
//! the credentials, the ACL).

use crate::engine::error::{InsufficientCapacity, Quoted};

/// A shared check (or building a [`SharedRateLimiter`](crate::redis::SharedRateLimiter)) that could
/// not be carried out.
///
/// Redis being slow, down or at fault is *not* an error: the check returns the verdict of the
/// [`FailurePolicy`](crate::redis::FailurePolicy), which says so. Errors are the caller's mistakes and
/// bad configuration, which retrying cannot fix.
///
/// ```
/// use tollgate::redis::{BackendError, SharedRateLimiter};
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
    /// A key longer than [`MAX_KEY_BYTES`](crate::redis::SharedRateLimiter::MAX_KEY_BYTES).
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
    /// use tollgate::redis::{BackendError, SharedRateLimiter};
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
    /// [`seed_urls`]: crate::redis::SharedRateLimiterBuilder::seed_urls
    ///
    /// ```
    /// use tollgate::redis::{BackendError, SharedRateLimiter};
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
    /// [`FailurePolicy`](crate::redis::FailurePolicy) and counted in
    /// [`SharedStats::errors`](crate::redis::SharedStats::errors). Kept so that code matching it
    /// still compiles.
    #[error("unexpected reply from the redis script: {0}")]
    Protocol(String),
    /// A certificate or key given to the builder
    /// ([`tls_root_ca`](crate::redis::SharedRateLimiterBuilder::tls_root_ca),
    /// [`tls_client_cert`](crate::redis::SharedRateLimiterBuilder::tls_client_cert)) that does not
    /// parse, or a key that is not its certificate's.
    ///
    /// ```
    /// use tollgate::redis::{BackendError, SharedRateLimiter};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let err = SharedRateLimiter::builder("10/s".parse()?, "rediss://redis.internal:6380/")
    ///     .tls_root_ca(b"not a certificate")
    ///     .build()
    ///     .unwrap_err();
    /// assert!(matches!(err, BackendError::InvalidTls { what: "root ca", .. }));
    /// assert_eq!(err.to_string(), "invalid tls root ca: no CERTIFICATE block in the PEM");
    /// # Ok(())
    /// # }
    /// ```
    #[error("invalid tls {what}: {reason}")]
    InvalidTls {
        /// `"root ca"`, `"client certificate"` or `"client key"`.
        what: &'static str,
        /// What is wrong with it (never the key's bytes).
        reason: String,
    },
    /// The TLS handshake failed on a certificate: the server's is not signed by a trusted
    /// root (a wrong or missing [`tls_root_ca`](crate::redis::SharedRateLimiterBuilder::tls_root_ca)),
    /// expired or for another name; or the server refused ours (`tls-auth-clients yes` and no
    /// or an unknown [`tls_client_cert`](crate::redis::SharedRateLimiterBuilder::tls_client_cert)).
    /// Returned by the check that met it, never answered by the failure policy.
    #[error("tls certificate verification failed: {0}")]
    CertificateVerification(String),
    /// The TLS handshake failed otherwise (a `rediss://` URL to a port that does not speak
    /// TLS, no protocol version in common). Returned by the check that met it.
    #[error("tls handshake failed: {0}")]
    Tls(String),
    /// Redis refused the credentials (`WRONGPASS`), or asked for some (`NOAUTH`: the URL has
    /// no password). Returned by the check that met it, never answered by the failure policy.
    #[error("redis authentication failed: {0}")]
    Authentication(String),
    /// The ACL user may not run a command the check needs, or touch its keys (`NOPERM`; see
    /// the README for the minimal ACL). Returned by the check that met it.
    #[error("redis permission denied: {0}")]
    Permission(String),
}

/// The longest server or TLS detail an error carries, in characters.
const DETAIL_MAX: usize = 200;

impl BackendError {
    /// The misconfiguration that a failed call shows — a certificate, TLS, the credentials, the
    /// ACL — or `None` for what may pass (a timeout, a refusal, a server error). A
    /// misconfiguration is returned to the caller: the failure policy is for outages, and
    /// its verdicts would hide a fault that no waiting repairs.
    pub(crate) fn misconfiguration(e: &redis::RedisError) -> Option<Self> {
        match tls_cause(e) {
            Some(TlsCause::Handshake(t)) => return Some(handshake(t)),
            Some(TlsCause::Roots(r)) => {
                return Some(Self::CertificateVerification(cut(&format!(
                    "the platform's root certificates could not be read ({r})"
                ))))
            }
            None => {}
        }
        let text = e.to_string();
        match (e.kind(), e.code()) {
            (redis::ErrorKind::AuthenticationFailed, _) | (_, Some("NOAUTH" | "WRONGPASS")) => {
                Some(Self::Authentication(cut(&text)))
            }
            (_, Some("NOPERM")) => Some(Self::Permission(cut(&text))),
            // The ACL refusing a command inside the script: Redis 7.0 answers `ERR The user
            // executing the script can't run this command…` or `…can't access at least one
            // of the keys…`; Valkey 9.1 `ERR ACL failure in script: User u has no permissions
            // to run the 'set' command…` or `…: No permissions to access a key…`. Or SELECT
            // refused at connect (`no permissions to run the 'select' command`, without its
            // code).
            _ if text.contains("user executing the script can't")
                || text.contains("ACL failure in script")
                || text.contains("no permissions to") =>
            {
                Some(Self::Permission(cut(&text)))
            }
            _ => None,
        }
    }
}

fn handshake(e: &rustls::Error) -> BackendError {
    use rustls::AlertDescription as A;
    match e {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
            BackendError::CertificateVerification(cut(&e.to_string()))
        }
        rustls::Error::AlertReceived(
            A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::CertificateRequired,
        ) => BackendError::CertificateVerification(cut(&format!(
            "the server refused the client certificate ({e})"
        ))),
        _ => BackendError::Tls(cut(&e.to_string())),
    }
}

/// What TLS said under a failed call.
enum TlsCause<'a> {
    /// The handshake failed.
    Handshake(&'a rustls::Error),
    /// The platform's root store could not be read (before any handshake).
    Roots(&'a rustls_native_certs::Error),
}

/// The TLS error under a failed call, if any: the `redis` crate keeps the I/O error of a
/// handshake (and its root store's error) behind an `Arc`, and tokio-rustls the rustls error
/// inside that I/O error.
fn tls_cause(e: &redis::RedisError) -> Option<TlsCause<'_>> {
    use std::error::Error;
    fn within<'a>(err: &'a (dyn Error + 'static)) -> Option<TlsCause<'a>> {
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(TlsCause::Handshake(t));
        }
        if let Some(r) = err.downcast_ref::<rustls_native_certs::Error>() {
            return Some(TlsCause::Roots(r));
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            let t = io.get_ref()?.downcast_ref::<rustls::Error>()?;
            return Some(TlsCause::Handshake(t));
        }
        if let Some(a) = err.downcast_ref::<std::sync::Arc<dyn Error + Send + Sync>>() {
            return within(&**a);
        }
        None
    }
    let mut next = e.source();
    while let Some(err) = next {
        if let Some(t) = within(err) {
            return Some(t);
        }
        next = err.source();
    }
    None
}

/// `s` cut to [`DETAIL_MAX`] characters.
fn cut(s: &str) -> String {
    match s.char_indices().nth(DETAIL_MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(e: rustls::Error) -> redis::RedisError {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e).into()
    }

    #[test]
    fn tls_failures_are_told_apart() {
        let unknown = io(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ));
        let e = BackendError::misconfiguration(&unknown).unwrap(); // a test: a panic is its failure
        assert!(
            e.to_string()
                .starts_with("tls certificate verification failed: "),
            "{e}"
        );
        let refused = io(rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired,
        ));
        assert!(matches!(
            BackendError::misconfiguration(&refused),
            Some(BackendError::CertificateVerification(m)) if m.contains("client certificate")
        ));
        let plain = io(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType,
        ));
        assert!(matches!(
            BackendError::misconfiguration(&plain),
            Some(BackendError::Tls(_))
        ));
    }

    #[test]
    fn outages_are_not_misconfigurations() {
        let reset: redis::RedisError =
            std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
        assert!(BackendError::misconfiguration(&reset).is_none());
        let busy = redis::make_extension_error("BUSY".into(), Some("script".into()));
        assert!(BackendError::misconfiguration(&busy).is_none());
    }

    #[test]
    fn credentials_and_acl_are_told_apart() {
        let noauth = redis::make_extension_error("NOAUTH".into(), Some("needed".into()));
        assert!(matches!(
            BackendError::misconfiguration(&noauth),
            Some(BackendError::Authentication(_))
        ));
        let wrong = redis::make_extension_error("WRONGPASS".into(), None);
        assert!(matches!(
            BackendError::misconfiguration(&wrong),
            Some(BackendError::Authentication(_))
        ));
        let noperm = redis::make_extension_error("NOPERM".into(), Some("no".into()));
        let e = BackendError::misconfiguration(&noperm).unwrap(); // a test: a panic is its failure
        assert!(
            e.to_string().starts_with("redis permission denied: "),
            "{e}"
        );
    }

    #[test]
    fn the_acl_inside_the_script_is_a_permission_error_in_redis_and_valkey_words() {
        for detail in [
            // Redis 7.0
            "The user executing the script can't run this command or subcommand script: 8c…",
            "The user executing the script can't access at least one of the keys mentioned in \
             the command arguments script: 73…",
            // Valkey 9.1
            "ACL failure in script: User lim has no permissions to run the 'set' command \
             script: on @user_script:1.",
            "ACL failure in script: No permissions to access a key script: on @user_script:1.",
        ] {
            let e = redis::make_extension_error("ERR".into(), Some(detail.into()));
            assert!(
                matches!(
                    BackendError::misconfiguration(&e),
                    Some(BackendError::Permission(_))
                ),
                "{e}"
            );
        }
        let oom = redis::make_extension_error(
            "OOM".into(),
            Some(
                "command not allowed when used memory > 'maxmemory'. script: on @user_script:1."
                    .into(),
            ),
        );
        assert!(BackendError::misconfiguration(&oom).is_none(), "an outage");
    }

    #[test]
    fn details_are_bounded() {
        assert_eq!(cut(&"é".repeat(500)).chars().count(), DETAIL_MAX + 1);
        assert_eq!(cut("short"), "short");
    }
}
