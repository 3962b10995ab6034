//! The ring provider, assembled from rustls's public *ring* parts.
//!
//! rustls 0.23.48 deprecated `rustls::crypto::ring::default_provider` (its note: no
//! post-quantum key exchange; rustls points at aws-lc-rs, which needs a C build this crate
//! avoids). The parts that function returns are public and not deprecated: ring's cipher
//! suites and key-exchange groups ([`rustls::crypto::ring::DEFAULT_CIPHER_SUITES`],
//! [`DEFAULT_KX_GROUPS`](rustls::crypto::ring::DEFAULT_KX_GROUPS)), its key loader
//! ([`any_supported_type`](rustls::crypto::ring::sign::any_supported_type)), webpki's ring
//! signature algorithms and ring's system random. This module puts them together as rustls's
//! function does, so the provider is the same at every rustls 0.23 release this crate
//! builds with, warning-free.
//!
//! It is used only when the process has no default provider (see
//! [`ensure_provider`](super::ensure_provider)): an application that installs its own
//! (aws-lc-rs, FIPS, a post-quantum group) keeps it for every connection.

use std::sync::Arc;

use rustls::crypto::ring::sign::any_supported_type;
use rustls::crypto::ring::{DEFAULT_CIPHER_SUITES, DEFAULT_KX_GROUPS};
use rustls::crypto::{
    CryptoProvider, GetRandomFailed, KeyProvider, SecureRandom, WebPkiSupportedAlgorithms,
};
use rustls::pki_types::PrivateKeyDer;
use rustls::sign::SigningKey;
use rustls::SignatureScheme;
use webpki::ring as algs;

/// ring's cipher suites, key-exchange groups, signature checks, random and key loading.
pub(super) fn ring_provider() -> CryptoProvider {
    CryptoProvider {
        cipher_suites: DEFAULT_CIPHER_SUITES.to_vec(),
        kx_groups: DEFAULT_KX_GROUPS.to_vec(),
        signature_verification_algorithms: SIGNATURE_ALGORITHMS,
        secure_random: &Ring,
        key_provider: &Ring,
    }
}

#[derive(Debug)]
struct Ring;

impl SecureRandom for Ring {
    fn fill(&self, buf: &mut [u8]) -> Result<(), GetRandomFailed> {
        use ring::rand::SecureRandom as _;
        ring::rand::SystemRandom::new()
            .fill(buf)
            .map_err(|_| GetRandomFailed)
    }
}

impl KeyProvider for Ring {
    fn load_private_key(
        &self,
        key_der: PrivateKeyDer<'static>,
    ) -> Result<Arc<dyn SigningKey>, rustls::Error> {
        any_supported_type(&key_der)
    }
}

/// webpki's checks under ring: every algorithm for certificate chains, and the TLS signature
/// schemes offered to the server in preference order, each with the checks that serve it
/// (for TLS 1.2 the curve is not fixed by the scheme, so both curves are tried).
static SIGNATURE_ALGORITHMS: WebPkiSupportedAlgorithms = WebPkiSupportedAlgorithms {
    all: &[
        algs::ECDSA_P256_SHA256,
        algs::ECDSA_P256_SHA384,
        algs::ECDSA_P384_SHA256,
        algs::ECDSA_P384_SHA384,
        algs::ED25519,
        algs::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
        algs::RSA_PSS_2048_8192_SHA384_LEGACY_KEY,
        algs::RSA_PSS_2048_8192_SHA512_LEGACY_KEY,
        algs::RSA_PKCS1_2048_8192_SHA256,
        algs::RSA_PKCS1_2048_8192_SHA384,
        algs::RSA_PKCS1_2048_8192_SHA512,
        algs::RSA_PKCS1_2048_8192_SHA256_ABSENT_PARAMS,
        algs::RSA_PKCS1_2048_8192_SHA384_ABSENT_PARAMS,
        algs::RSA_PKCS1_2048_8192_SHA512_ABSENT_PARAMS,
    ],
    mapping: &[
        (
            SignatureScheme::ECDSA_NISTP384_SHA384,
            &[algs::ECDSA_P384_SHA384, algs::ECDSA_P256_SHA384],
        ),
        (
            SignatureScheme::ECDSA_NISTP256_SHA256,
            &[algs::ECDSA_P256_SHA256, algs::ECDSA_P384_SHA256],
        ),
        (SignatureScheme::ED25519, &[algs::ED25519]),
        (
            SignatureScheme::RSA_PSS_SHA512,
            &[algs::RSA_PSS_2048_8192_SHA512_LEGACY_KEY],
        ),
        (
            SignatureScheme::RSA_PSS_SHA384,
            &[algs::RSA_PSS_2048_8192_SHA384_LEGACY_KEY],
        ),
        (
            SignatureScheme::RSA_PSS_SHA256,
            &[algs::RSA_PSS_2048_8192_SHA256_LEGACY_KEY],
        ),
        (
            SignatureScheme::RSA_PKCS1_SHA512,
            &[algs::RSA_PKCS1_2048_8192_SHA512],
        ),
        (
            SignatureScheme::RSA_PKCS1_SHA384,
            &[algs::RSA_PKCS1_2048_8192_SHA384],
        ),
        (
            SignatureScheme::RSA_PKCS1_SHA256,
            &[algs::RSA_PKCS1_2048_8192_SHA256],
        ),
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The same suites, groups, schemes and certificate checks as rustls's own ring provider
    /// at the version built, so dropping the deprecated function changed nothing a server
    /// sees (a rustls release that changed its table fails here).
    #[test]
    #[allow(deprecated)] // the one use: the test that the assembled provider matches it
    fn same_as_rustls_ring_provider() {
        let ours = ring_provider();
        let theirs = rustls::crypto::ring::default_provider();
        let suites =
            |p: &CryptoProvider| -> Vec<_> { p.cipher_suites.iter().map(|s| s.suite()).collect() };
        assert_eq!(suites(&ours), suites(&theirs));
        let groups =
            |p: &CryptoProvider| -> Vec<_> { p.kx_groups.iter().map(|g| g.name()).collect() };
        assert_eq!(groups(&ours), groups(&theirs));
        let (a, b) = (
            &ours.signature_verification_algorithms,
            &theirs.signature_verification_algorithms,
        );
        assert_eq!(a.supported_schemes(), b.supported_schemes());
        assert_eq!(a.supported_schemes().len(), 9);
        let ids = |w: &WebPkiSupportedAlgorithms| -> Vec<_> {
            w.all
                .iter()
                .map(|alg| (alg.public_key_alg_id(), alg.signature_alg_id()))
                .collect()
        };
        assert_eq!(ids(a), ids(b));
        for ((scheme, ours), (_, theirs)) in a.mapping.iter().zip(b.mapping) {
            let ids = |v: &[&dyn rustls::pki_types::SignatureVerificationAlgorithm]| -> Vec<_> {
                v.iter()
                    .map(|alg| (alg.public_key_alg_id(), alg.signature_alg_id()))
                    .collect()
            };
            assert_eq!(ids(ours), ids(theirs), "{scheme:?}");
        }
        let mut buf = [0u8; 32];
        ours.secure_random.fill(&mut buf).unwrap(); // a test: a panic is its failure
        assert_ne!(buf, [0u8; 32]);
    }
}
