//! Every atomic, fence, lock, spin hint and per-thread value of the crate comes from here:
//! `std` and `parking_lot` in a normal build, [loom](https://docs.rs/loom)'s models under
//! `cfg(loom)`, so `tests/loom.rs` runs the very code users run under every interleaving
//! loom can reach.
//!
//! In a normal build each item is a plain re-export: no wrapper, no cost. Under loom:
//!
//! | std / parking_lot | under `cfg(loom)` |
//! |---|---|
//! | `std::sync::atomic::*` | `loom::sync::atomic::*` (every access is a scheduling point) |
//! | `parking_lot::{Mutex, RwLock}` | thin wrappers over loom's, with parking_lot's guard-returning API |
//! | `core::hint::spin_loop`, `std::thread::yield_now` | loom's (a spinning thread yields to the others) |
//! | `std::thread_local!` | `loom::thread_local!` (loom runs every modelled thread on one OS thread) |
//! | `std::sync::OnceLock` | kept (loom has none); its publication is modelled where it matters |
//!
//! Statics that hold atomics or locks are built lazily under loom (`loom::lazy_static!`):
//! loom's constructors are not `const`, and each model run needs fresh ones.

// Which items a build uses depends on its features (no feature uses `RwLock` or `AtomicU32`);
// under loom the wrappers' unused methods too.
#![allow(unused_imports)]
#![cfg_attr(loom, allow(dead_code))]

#[cfg(not(loom))]
pub(crate) use core::hint::spin_loop;
#[cfg(loom)]
pub(crate) use loom::hint::spin_loop;

#[cfg(loom)]
pub(crate) use loom::thread::yield_now;
#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;

#[cfg(loom)]
pub(crate) use self::model::{Mutex, MutexGuard, RwLock};
#[cfg(not(loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard, RwLock};

/// `static NAME: T = init;` items: const-built statics normally; under loom, built lazily
/// once per model run (`loom::lazy_static!`), since loom's constructors are not `const` and
/// its objects belong to one run.
macro_rules! statics {
    ($($(#[$m:meta])* static $name:ident: $t:ty = $init:expr;)*) => {
        $(
            #[cfg(not(loom))]
            $(#[$m])*
            static $name: $t = $init;
        )*
        #[cfg(loom)]
        loom::lazy_static! {
            $($(#[$m])* static ref $name: $t = $init;)*
        }
    };
}
pub(crate) use statics;

/// `thread_local!` normally (with `const { … }` initialisers where given); under loom,
/// `loom::thread_local!`: loom runs every modelled thread on one OS thread, so std's would be
/// shared by all of them.
macro_rules! thread_locals {
    () => {};
    ($(#[$m:meta])* static $name:ident: $t:ty = const $init:block; $($rest:tt)*) => {
        #[cfg(not(loom))]
        std::thread_local! { $(#[$m])* static $name: $t = const $init; }
        #[cfg(loom)]
        loom::thread_local! { $(#[$m])* static $name: $t = $init; }
        $crate::sync::thread_locals! { $($rest)* }
    };
    ($(#[$m:meta])* static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        #[cfg(not(loom))]
        std::thread_local! { $(#[$m])* static $name: $t = $init; }
        #[cfg(loom)]
        loom::thread_local! { $(#[$m])* static $name: $t = $init; }
        $crate::sync::thread_locals! { $($rest)* }
    };
}
pub(crate) use thread_locals;

/// Atomics and fences.
pub(crate) mod atomic {
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{
        fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };

    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{
        fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
}

/// parking_lot's API (a lock returns its guard; no poisoning) over loom's std-like locks.
#[cfg(loom)]
mod model {
    use core::fmt;

    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;
    pub(crate) type RwLockReadGuard<'a, T> = loom::sync::RwLockReadGuard<'a, T>;
    pub(crate) type RwLockWriteGuard<'a, T> = loom::sync::RwLockWriteGuard<'a, T>;

    /// A loom mutex that returns its guard as parking_lot's does.
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            // A model that panics while holding the lock fails as a whole: poisoning is moot.
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }

        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }

        pub(crate) fn into_inner(self) -> T {
            self.0.into_inner().unwrap_or_else(|e| e.into_inner())
        }
    }

    impl<T: Default> Default for Mutex<T> {
        fn default() -> Self {
            Self::new(T::default())
        }
    }

    impl<T> fmt::Debug for Mutex<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Mutex { .. }")
        }
    }

    /// A loom read-write lock that returns its guards as parking_lot's does.
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(|e| e.into_inner())
        }

        pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(|e| e.into_inner())
        }
    }

    impl<T: Default> Default for RwLock<T> {
        fn default() -> Self {
            Self::new(T::default())
        }
    }

    impl<T> fmt::Debug for RwLock<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("RwLock { .. }")
        }
    }
}
