//! Traffic shaping (incident 003): retry budgets, client backoff with jitter, and priority
//! classes with reserved capacity. Uses only the engine.

pub(crate) mod priority;
pub(crate) mod retry;
