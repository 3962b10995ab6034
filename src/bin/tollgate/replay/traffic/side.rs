//! One limits document replayed: its handle (one shared limit), its tally, what its clients
//! got, and optionally a fleet of local limiters beside it.

use std::path::Path;

use tollgate::limits::{Limits, LimitsHandle};
use tollgate::{Check, ManualClock, Verdict};

use super::clients::Outcomes;
use super::fleet::Fleet;
use super::record::Record;
use super::tally::Tally;
use crate::load::Loaded;
use crate::replay::ReplayError;
use crate::OutputFormat;

/// One document replayed.
pub(super) struct Side {
    pub(super) name: &'static str,
    pub(super) file: String,
    pub(super) limits: Limits,
    handle: LimitsHandle,
    pub(super) tally: Tally,
    pub(super) clients: Outcomes,
    pub(super) fleet: Option<Fleet>,
}

/// A side's verdict on one attempt.
pub(super) enum Checked {
    /// A policy applied and judged.
    Judged(Verdict),
    /// No policy applies: unlimited.
    Unmatched,
    /// The cost exceeds a policy's burst: denied, and no retry will do better.
    Oversized,
}

impl Side {
    /// Loads `path` as side `name`, its limiters on `clock`, with a fleet of `instances`
    /// local limiters beside it if asked.
    pub(super) fn load(
        name: &'static str,
        path: &Path,
        clock: &ManualClock,
        instances: Option<usize>,
    ) -> Result<Side, ReplayError> {
        let limits = load(path)?;
        Ok(Side {
            name,
            file: path.display().to_string(),
            handle: LimitsHandle::builder(limits.clone())
                .clock(clock.clone())
                .build(),
            fleet: instances.map(|n| Fleet::new(&limits, n, clock)),
            limits,
            tally: Tally::default(),
            clients: Outcomes::default(),
        })
    }

    /// Checks one attempt against every policy that applies to it, and on the fleet.
    pub(super) fn check(&mut self, minute: usize, t_ms: i64, rec: &Record, hash: u64) -> Checked {
        self.tally.now_ms = t_ms;
        let policy = self.limits.resolve(&rec.tier, &rec.category, &rec.route);
        let cost = match policy {
            Some(p) if p.quota().is_bytes() => rec.bytes.unwrap_or(1).max(1),
            _ => 1,
        };
        let check = Check::cost(cost).attempt(rec.attempt);
        if let Some(fleet) = &mut self.fleet {
            fleet.check(rec, check, hash);
        }
        match self
            .handle
            .check_all(&rec.tier, &rec.category, &rec.route, &rec.key, check)
        {
            Ok(d) => {
                let at = (rec.key.as_str(), rec.tier.as_str(), rec.route.as_str());
                self.tally.decision(minute, at, hash, &d);
                match d.policy() {
                    Some(_) => Checked::Judged(d.verdict()),
                    None => Checked::Unmatched,
                }
            }
            Err(_) => {
                let name = policy.map(|p| p.name());
                self.tally.oversized(minute, &rec.key, hash, name);
                Checked::Oversized
            }
        }
    }
}

/// Loads a limits document: a file that cannot be read is a usage error (exit 2), an
/// invalid document a rejected one (exit 1), each problem named once with its file.
fn load(path: &Path) -> Result<Limits, ReplayError> {
    let options = crate::Options {
        format: OutputFormat::Human,
        input_format: None,
    };
    let file = crate::shown(path);
    match crate::load::load(path, &options) {
        Loaded::Valid(limits) => Ok(limits),
        Loaded::Unusable(problem) => Err(ReplayError::Io(problem.message)),
        Loaded::Invalid(problems, more) => {
            let mut list: Vec<String> = problems.iter().map(|p| p.human(&file)).collect();
            if more > 0 {
                list.push(format!("{file}: … and {more} more errors"));
            }
            Err(ReplayError::Input(list.join("\n")))
        }
    }
}
