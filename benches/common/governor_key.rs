//! tower_governor's key for the gateway benches: the `x-api-key` header, copied into a
//! `String` (as tollgate's `HeaderKey` reads it for a `KeyedRateLimiter<String>`).

use axum::http::{HeaderName, Request};
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::GovernorError;

/// The header both layers key by.
pub const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

#[derive(Clone)]
pub struct ApiKey;

impl KeyExtractor for ApiKey {
    type Key = String;

    fn extract<T>(&self, req: &Request<T>) -> Result<String, GovernorError> {
        req.headers()
            .get(&X_API_KEY)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or(GovernorError::UnableToExtractKey)
    }
}
