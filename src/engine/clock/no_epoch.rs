//! The epoch and the fast clock on `wasm32-unknown-unknown`: none. The standard library has
//! no time there (`std::time::Instant::now` panics), so both types are empty: no value of
//! them is ever made, and the built-in clocks are [`ClockError::Unavailable`] instead of a
//! panic at a limiter's first check.

use crate::engine::error::ClockError;

/// No epoch: an empty type.
pub(crate) enum Epoch {}

/// No fast clock: an empty type, so a limiter never takes the fast clock's path.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FastClock {}

/// Always the error: this target's standard library cannot read time.
pub(super) fn epoch() -> Result<&'static Epoch, ClockError> {
    Err(ClockError::Unavailable {
        target: "wasm32-unknown-unknown",
    })
}

impl Epoch {
    pub(super) fn fast(&'static self) -> Option<FastClock> {
        match *self {}
    }

    pub(super) fn fast_nanos(&self) -> u64 {
        match *self {}
    }

    pub(super) fn os_nanos(&self) -> u64 {
        match *self {}
    }
}

impl FastClock {
    pub(crate) fn now_nanos(self) -> u64 {
        match self {}
    }

    pub(crate) fn now_for_step(&self) -> u64 {
        match *self {}
    }
}
