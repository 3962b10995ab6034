//! TLS for the Redis connection: `rediss://` through rustls with ring, the builder's private
//! CA and client certificate checked at build, and the one function that turns a URL and
//! those settings into a client.
//!
//! # Choices
//!
//! * **Provider: ring.** The `redis` crate's rustls has its default features off, so no
//!   provider comes with it; aws-lc-rs needs a C build and builds slowly. rustls picks the
//!   process-level default provider when it builds a connection's config and panics when
//!   there is none and its crate features name two (an application that also enables
//!   aws-lc-rs). So [`ensure_provider`] installs ring as the process default when a TLS client
//!   is built and none is installed yet; an application that installs its own first keeps it
//!   (and the client-certificate check at build uses that same default). The ring provider is
//!   assembled from rustls's public ring parts (`provider.rs`): rustls 0.23.48 deprecated its
//!   ready-made one.
//! * **Roots: the platform's** (`rustls-native-certs`, which the `redis` crate's rustls always
//!   builds), not compiled-in webpki roots: the managed services' public CAs are in both, and
//!   the platform store also holds an enterprise CA the operators installed, follows the
//!   system's updates and revocations without a rebuild, and costs no extra dependency. A host
//!   without a store (a distroless image without `ca-certificates`) has no roots: every
//!   connection then fails with [`BackendError::CertificateVerification`], never silently.
//!   [`tls_root_ca`](crate::redis::SharedRateLimiterBuilder::tls_root_ca) replaces the roots.

use std::sync::Arc;

use redis::{Client, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, TlsCertificates};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use super::error::BackendError;

mod provider;

/// The TLS settings of the builder beyond the URL: a private CA, a client certificate.
#[derive(Clone, Default)]
pub(crate) struct TlsConfig {
    root_ca: Option<Vec<u8>>,
    /// Certificate chain and private key, both PEM.
    client_cert: Option<(Vec<u8>, Vec<u8>)>,
}

impl core::fmt::Debug for TlsConfig {
    // Never the key: it is a secret, and a Debug line ends up in logs.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("root_ca", &self.root_ca.is_some())
            .field("client_cert", &self.client_cert.is_some())
            .finish()
    }
}

impl TlsConfig {
    pub(crate) fn set_root_ca(&mut self, pem: &[u8]) {
        self.root_ca = Some(pem.to_vec());
    }

    pub(crate) fn set_client_cert(&mut self, cert_pem: &[u8], key_pem: &[u8]) {
        self.client_cert = Some((cert_pem.to_vec(), key_pem.to_vec()));
    }

    /// `true` if any setting is made (then the URL must be `rediss://`).
    pub(crate) fn is_set(&self) -> bool {
        self.root_ca.is_some() || self.client_cert.is_some()
    }

    /// The settings as the `redis` crate takes them (for `Client::build_with_tls`, or a
    /// cluster builder's `certs`), each PEM checked first: `None` when nothing is set.
    ///
    /// # Errors
    ///
    /// [`BackendError::InvalidTls`] for a PEM that holds no certificate, a certificate or
    /// key that does not parse, or a key that does not match its certificate.
    pub(crate) fn certificates(&self) -> Result<Option<TlsCertificates>, BackendError> {
        if !self.is_set() {
            return Ok(None);
        }
        if let Some(pem) = &self.root_ca {
            root_store(pem)?;
        }
        if let Some((cert, key)) = &self.client_cert {
            check_client_cert(cert, key)?;
        }
        Ok(Some(TlsCertificates {
            client_tls: self
                .client_cert
                .as_ref()
                .map(|(cert, key)| ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root_ca.clone(),
        }))
    }
}

/// The client for `url` with `tls`: `redis://` or `rediss://` (with `#insecure` as the
/// `redis` crate documents it: no certificate check at all, for tests only), a password or
/// an ACL user and password in the URL's user part.
///
/// # Errors
///
/// [`BackendError::Client`] for a URL that does not parse, [`BackendError::InvalidSetting`]
/// for TLS settings with a URL that is not `rediss://` (they would be ignored), and
/// [`BackendError::InvalidTls`] for a bad certificate or key.
pub(crate) fn client(url: &str, tls: &TlsConfig) -> Result<Client, BackendError> {
    let info = url.into_connection_info().map_err(BackendError::Client)?;
    let is_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    if !is_tls {
        if tls.is_set() {
            return Err(BackendError::InvalidSetting(
                "tls_root_ca and tls_client_cert need a rediss:// url",
            ));
        }
        return Client::open(info).map_err(BackendError::Client);
    }
    ensure_provider();
    match tls.certificates()? {
        Some(certs) => Client::build_with_tls(info, certs).map_err(BackendError::Client),
        None => Client::open(info).map_err(BackendError::Client),
    }
}

/// Installs ring as rustls's process-level default provider unless one is installed: the
/// `redis` crate builds each connection's config with the default, and rustls panics when
/// it has none and cannot pick one from its crate features.
pub(crate) fn ensure_provider() {
    if CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is installed either way.
        let _ = provider::ring_provider().install_default();
    }
}

/// The process-level default provider, ring installed first when there is none.
fn default_provider() -> Arc<CryptoProvider> {
    ensure_provider();
    match CryptoProvider::get_default() {
        Some(p) => Arc::clone(p),
        // Unreachable (installed just above, and never uninstalled); ring all the same.
        None => Arc::new(provider::ring_provider()),
    }
}

fn invalid(what: &'static str, reason: impl core::fmt::Display) -> BackendError {
    BackendError::InvalidTls {
        what,
        reason: reason.to_string(),
    }
}

/// Every certificate of `pem`, at least one.
fn certs(what: &'static str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, BackendError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(what, e))?;
    if certs.is_empty() {
        return Err(invalid(what, "no CERTIFICATE block in the PEM"));
    }
    Ok(certs)
}

fn root_store(pem: &[u8]) -> Result<RootCertStore, BackendError> {
    let mut store = RootCertStore::empty();
    for cert in certs("root ca", pem)? {
        store.add(cert).map_err(|e| invalid("root ca", e))?;
    }
    Ok(store)
}

/// The chain and key parse, and rustls accepts them together (a key that is not the
/// certificate's is refused here rather than by the server at the first check), with the
/// provider the connections will load the key with.
fn check_client_cert(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), BackendError> {
    let chain = certs("client certificate", cert_pem)?;
    // The error names the PEM problem, never the key's bytes.
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| invalid("client key", e))?;
    ClientConfig::builder_with_provider(default_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("client certificate", e))?
        .with_root_certificates(RootCertStore::empty())
        .with_client_auth_cert(chain, key)
        .map_err(|e| invalid("client certificate", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_pem_is_refused_at_build() {
        let mut t = TlsConfig::default();
        t.set_root_ca(b"not a pem");
        let Err(err) = t.certificates() else {
            panic!("a root ca without a certificate was accepted")
        };
        assert_eq!(
            err.to_string(),
            "invalid tls root ca: no CERTIFICATE block in the PEM"
        );
        let block = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        t.set_root_ca(block);
        assert!(matches!(
            t.certificates(),
            Err(BackendError::InvalidTls {
                what: "root ca",
                ..
            })
        ));
    }

    #[test]
    fn the_key_is_not_in_the_debug_line() {
        let mut t = TlsConfig::default();
        t.set_client_cert(b"cert", b"SECRET-KEY");
        assert!(!format!("{t:?}").contains("SECRET"));
    }

    /// rustls panics building a config without a process-level provider when its features
    /// do not name exactly one; a TLS client leaves one installed.
    #[test]
    fn a_tls_client_leaves_a_provider_installed() {
        client("rediss://127.0.0.1:1/", &TlsConfig::default()).unwrap(); // a test: a panic is its failure
        assert!(CryptoProvider::get_default().is_some());
    }

    #[test]
    fn tls_settings_need_a_tls_url() {
        let mut t = TlsConfig::default();
        t.set_root_ca(b"x");
        assert!(matches!(
            client("redis://127.0.0.1/", &t),
            Err(BackendError::InvalidSetting(_))
        ));
    }
}
