//! A staged rollout in steady state, for the cohort-check cases of `benches/keyed.rs` and
//! `benches/ir_per_check.rs`: what a cohort key's check costs next to a control
//! key's, and next to the same check through a [`LimitsHandle`] (no rollout at all).
//!
//! Both documents have one policy, `api`, with live keys (1/s, burst 10^9: every check moves
//! the key's TAT 1 s ahead, so a key stays live in both limiters and is never denied). The
//! rollout runs at 0.01 %, every key is checked once there (so it is live in the old
//! document's limiter), then it is promoted to 50 % and every key is checked again: the cohort
//! keys join the cohort and carry their state over, as a real promotion does. The timed checks
//! then see the steady state of a promoted cohort: each key present in the new limiter and
//! still live in the old one. The stages last 10^6 s, so nothing moves while the bench runs.

use std::time::Duration;

use tollgate::limits::{Limits, LimitsHandle, Rollout, RolloutStage};
use tollgate::Check;

/// The request every check makes: the `api` policy matches it in both documents.
pub const REQUEST: (&str, &str, &str) = ("free", "api", "/api/items");

fn doc(revision: u64) -> Limits {
    Limits::from_toml(&format!(
        "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\n\
         match = {{ route = \"/api/*\" }}\nquota = \"1/s;burst=1000000000\"\n"
    ))
    .expect("a valid bench document")
}

/// The rollout, a handle on the new document, and `keys` keys of each kind, all warmed.
pub struct Fixture {
    pub rollout: Rollout,
    pub handle: LimitsHandle,
    /// Keys that joined the cohort at the promotion (judged by the new document).
    pub cohort: Vec<String>,
    /// Keys outside the cohort (judged by the old document).
    pub control: Vec<String>,
}

impl Fixture {
    pub fn new(keys: usize) -> Self {
        let long = Duration::from_secs(1_000_000);
        let rollout = Rollout::builder(doc(1), doc(2))
            .stages([RolloutStage::new(1, long), RolloutStage::new(5_000, long)])
            .seed(0x5eed)
            .build()
            .expect("a harmless change");
        let (mut cohort, mut control) = (Vec::new(), Vec::new());
        for i in 0.. {
            if cohort.len() == keys && control.len() == keys {
                break;
            }
            let key = format!("customer-{i:07}");
            match rollout.bucket(&key) {
                0 => {}
                1..5_000 if cohort.len() < keys => cohort.push(key),
                5_000.. if control.len() < keys => control.push(key),
                _ => {}
            }
        }
        let handle = LimitsHandle::new(doc(2));
        let (tier, category, route) = REQUEST;
        let check = |k: &str| {
            let d = rollout
                .check(tier, category, route, k, Check::cost(1))
                .expect("cost 1 fits");
            assert!(d.is_permitted());
            d.revision()
        };
        for k in cohort.iter().chain(&control) {
            assert_eq!(check(k), 1, "on the old document before the promotion");
        }
        assert!(rollout.promote());
        assert_eq!(rollout.basis_points(), 5_000);
        for k in &cohort {
            assert_eq!(check(k), 2, "joined the cohort");
            let d = handle.check(tier, category, route, k, Check::cost(1));
            assert!(d.expect("cost 1 fits").is_permitted());
        }
        for k in &control {
            assert_eq!(check(k), 1, "still on the old document");
        }
        Self {
            rollout,
            handle,
            cohort,
            control,
        }
    }
}
