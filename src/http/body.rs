//! How the layer's responses carry their bodies: wrapped in [`RateLimitBody`] (any inner
//! body), or as the inner service's own body type (a body that can be built from bytes).

use bytes::Bytes;

use super::inflight::Held;
use super::response::RateLimitBody;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::WrappedBody {}
    impl Sealed for super::OwnBody {}
}

/// How a [`RateLimit`](super::RateLimit) service's responses carry their bodies: see
/// [`WrappedBody`] (the default) and [`OwnBody`]. Sealed: the layer's own two modes.
pub trait BodyMode<B>: sealed::Sealed + Send + Sync + 'static {
    /// The body of every response through the service, given the inner service's body `B`.
    type Body;

    /// The inner service's body, as this mode carries it.
    #[doc(hidden)]
    fn inner(body: B) -> Self::Body;

    /// The layer's own body (a rejection's problem document; empty for gRPC).
    #[doc(hidden)]
    fn own(data: Bytes) -> Self::Body;

    /// The inner service's body with the request's concurrency permits: held until the body
    /// ends where the mode can carry them, else given back now.
    #[doc(hidden)]
    #[allow(private_interfaces)] // reason: sealed; the layer's own type, never named outside
    fn holding(body: B, held: Option<Box<Held>>) -> Self::Body;
}

/// The default: every response's body is a [`RateLimitBody`], which holds the inner
/// service's body or the layer's own. Works with any body, such as hyper's `Incoming` in a
/// proxy that streams the upstream's response through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WrappedBody;

/// Responses keep the inner service's own body type `B`; the layer builds its rejections'
/// bodies with `B::from(Bytes)`. A concurrency limit's permit is then given back when the
/// inner service's response head is ready, not when its body ends (the body's own type
/// cannot carry it), and a trailer settle
/// ([`settle_trailers`](super::RateLimitLayerBuilder::settle_trailers)) is never applied
/// (counted in [`settle_lost`](super::LayerStats::settle_lost)). For bodies that can be built from bytes — axum's `Body`,
/// `http_body_util::Full<Bytes>`, `String` bodies and the like — it saves the wrapper and,
/// under axum, the allocation axum makes to box a body that is not its own. Chosen with
/// [`RateLimitLayer::own_body`](super::RateLimitLayer::own_body).
///
/// ```
/// use bytes::Bytes;
/// use http::{HeaderName, Request, Response};
/// use http_body_util::Full;
/// use tollgate::http::{HeaderKey, RateLimitLayer};
/// use tollgate::KeyedRateLimiter;
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = RateLimitLayer::builder()
///     .key(HeaderKey::new(HeaderName::from_static("x-api-key")))
///     .limit("per-key", KeyedRateLimiter::<String>::new("1/min".parse()?))
///     .build()?
///     .own_body();
/// let svc = layer.layer(tower::service_fn(|_req: Request<()>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
/// }));
/// let req = || Request::get("/").header("x-api-key", "k").body(()).unwrap();
/// // The response is the inner service's own `Response<Full<Bytes>>`, allowed or not.
/// let ok: Response<Full<Bytes>> = svc.clone().oneshot(req()).await?;
/// assert_eq!(ok.status(), 200);
/// let denied: Response<Full<Bytes>> = svc.oneshot(req()).await?;
/// assert_eq!(denied.status(), 429);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnBody;

impl<B: http_body::Body> BodyMode<B> for WrappedBody {
    type Body = RateLimitBody<B>;

    #[inline]
    fn inner(body: B) -> RateLimitBody<B> {
        RateLimitBody::inner(body)
    }

    #[inline]
    fn own(data: Bytes) -> RateLimitBody<B> {
        RateLimitBody::full(data)
    }

    #[inline]
    #[allow(private_interfaces)] // reason: sealed; see the trait
    fn holding(body: B, mut held: Option<Box<Held>>) -> RateLimitBody<B> {
        // A body already over (empty: a 204, `Content-Length: 0`) is never polled by the
        // server: a trailer settle is asked now, with no trailers.
        if let Some(h) = held.as_deref_mut().filter(|_| body.is_end_stream()) {
            super::trailers::seen::<Bytes, ()>(h, None, true);
        }
        RateLimitBody::holding(body, held)
    }
}

impl<B: From<Bytes>> BodyMode<B> for OwnBody {
    type Body = B;

    #[inline]
    fn inner(body: B) -> B {
        body
    }

    #[inline]
    fn own(data: Bytes) -> B {
        B::from(data)
    }

    /// The body's own type cannot carry the permits: they are given back as the response
    /// head is ready (see [`RateLimitLayerBuilder::concurrency`](super::RateLimitLayerBuilder::concurrency)).
    #[inline]
    #[allow(private_interfaces)] // reason: sealed; see the trait
    fn holding(body: B, held: Option<Box<Held>>) -> B {
        // Nor can the layer read its trailers: a trailer settle is lost (counted).
        if let Some(mut held) = held {
            super::trailers::unseen(&mut held);
        }
        body
    }
}
