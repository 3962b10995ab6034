//! The Lua GCRA (`gcra.lua`) and one call of it: `EVALSHA`, and on `NOSCRIPT` (a restarted
//! server, a `SCRIPT FLUSH`, a replica promoted by a failover that never had it) `EVAL` with
//! the body, transparently. `EVAL` is routed by the first key like `EVALSHA`, so in a cluster
//! it reaches the node that lacks the script, and it leaves the script in that node's cache:
//! the next `EVALSHA` there finds it. (A `SCRIPT LOAD` sent to every node would fail while any
//! node is down, which is when a promoted replica needs it.)

use core::future::Future;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::call::Eval;

/// The script's source.
pub(crate) const SOURCE: &str = include_str!("gcra.lua");

/// One call: the keys, the clock reading (`None`: the server's `TIME`), whether to charge,
/// and per key the weight and τ (µs).
#[derive(Debug)]
pub(crate) struct Call<'a> {
    pub(crate) keys: &'a [Vec<u8>],
    pub(crate) now: Option<u64>,
    pub(crate) charge: bool,
    /// The least PX TTL, in ms.
    pub(crate) min_ttl_ms: u64,
    pub(crate) limits: &'a [(u64, u64)],
    /// A lease to take instead of a check: at most this many cells, and the TAT the previous
    /// lease of the run left if it continues one.
    pub(crate) lease: Option<(u32, Option<u64>)>,
    /// The lease horizon (µs) of a limiter with leases, else 0: what the script lets a TAT
    /// run ahead of `now + τ`.
    pub(crate) horizon: u64,
    /// The debt cap (µs): how far past `now + τ` a charge may push a TAT.
    pub(crate) debt: u64,
    /// A settle instead of a check; `keys` then ends with the call's token for a refund or a
    /// charge (see `gcra.lua`).
    pub(crate) op: Option<Op>,
}

/// What a settle call does to each cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Take the weight off, never past full.
    Refund,
    /// Add the weight whatever the room, up to the debt cap.
    Charge,
    /// Delete the cells.
    Reset,
}

impl Call<'_> {
    /// How many of the keys are cells (the others are a settle's token).
    fn cells(&self) -> usize {
        match self.op {
            Some(Op::Refund | Op::Charge) => self.keys.len().saturating_sub(1),
            _ => self.keys.len(),
        }
    }
}

/// What the script answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Conforms (code 0) or not (code 1), at `now` µs, with `ahead_i = max(tat_i, now) + w_i −
    /// now` per key, and how many values were unreadable.
    Decided {
        conforms: bool,
        now: u64,
        aheads: Vec<u64>,
        corrupt: u64,
    },
    /// A lease of `cells` ≥ 1 cells taken at `now` µs from `tat0 = max(tat, now)` (code 4).
    Leased {
        now: u64,
        cells: u64,
        tat0: u64,
        corrupt: u64,
    },
    /// A settle applied at `now` µs (code 5): per cell `ahead_i = max(tat'_i, now) − now` and
    /// the weight taken off or added.
    Settled {
        now: u64,
        aheads: Vec<u64>,
        moved: Vec<u64>,
        corrupt: u64,
    },
    /// A settle whose token was already set: this call had been applied (code 6).
    Duplicate,
    /// The clock reading was out of range (code 2).
    ClockOutOfRange,
}

/// The script and its SHA1.
#[derive(Debug)]
pub(crate) struct GcraScript {
    script: redis::Script,
}

impl GcraScript {
    pub(crate) fn new() -> Self {
        Self {
            script: redis::Script::new(SOURCE),
        }
    }

    /// The SHA1 that `EVALSHA` names.
    pub(crate) fn hash(&self) -> &str {
        self.script.get_hash()
    }

    /// Runs the call on `con` (one server or a cluster); `reloaded` is set when the server had
    /// lost the script.
    pub(crate) async fn run<C: ConnectionLike + Send>(
        &self,
        con: &mut C,
        call: &Call<'_>,
        reloaded: &mut bool,
    ) -> Result<Result<Reply, String>, RedisError> {
        let sha = self.hash();
        let raw: Vec<i64> = match command("EVALSHA", sha, call).query_async(con).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                *reloaded = true;
                command("EVAL", SOURCE, call).query_async(con).await?
            }
            other => other?,
        };
        Ok(parse(&raw, call.cells()))
    }
}

/// One GCRA call with its script, as the guarded call runs it.
pub(crate) struct Gcra<'a> {
    pub(crate) script: &'a GcraScript,
    pub(crate) call: &'a Call<'a>,
}

impl Eval for Gcra<'_> {
    type Out = Reply;

    fn run<C: ConnectionLike + Send>(
        &self,
        con: &mut C,
        reloaded: &mut bool,
    ) -> impl Future<Output = Result<Result<Reply, String>, RedisError>> + Send {
        self.script.run(con, self.call, reloaded)
    }
}

/// `EVALSHA sha` or `EVAL source`, then the call's keys and arguments.
fn command(name: &str, script: &str, call: &Call<'_>) -> redis::Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(script).arg(call.keys.len());
    for k in call.keys {
        cmd.arg(&k[..]);
    }
    match call.now {
        Some(now) => cmd.arg(now),
        None => cmd.arg(""),
    };
    let charge = if call.charge { "1" } else { "0" };
    let h = call.horizon;
    match (call.op, call.lease, h) {
        (Some(Op::Refund), ..) => cmd.arg(format!("R:{h}")),
        (Some(Op::Charge), ..) => cmd.arg(format!("C:{h}")),
        (Some(Op::Reset), ..) => cmd.arg(format!("X:{h}")),
        (None, Some((cells, None)), h) => cmd.arg(format!("L:{cells}:{h}")),
        (None, Some((cells, Some(after))), h) => cmd.arg(format!("L:{cells}:{h}:{after}")),
        (None, None, 0) => cmd.arg(charge),
        (None, None, h) => cmd.arg(format!("{charge}:{h}")),
    };
    match call.debt {
        0 => cmd.arg(call.min_ttl_ms),
        d => cmd.arg(format!("{}:{d}", call.min_ttl_ms)),
    };
    for &(w, tau) in call.limits {
        cmd.arg(w).arg(tau);
    }
    cmd
}

/// Reads the script's reply: `{code, now, ahead_1..ahead_n, corrupt}`, or a lease's
/// `{4, now, k, tat0, corrupt}`.
fn parse(raw: &[i64], n: usize) -> Result<Reply, String> {
    let unsigned = |x: i64| u64::try_from(x).map_err(|_| format!("negative value {x}"));
    match raw {
        [2, ..] => Ok(Reply::ClockOutOfRange),
        [4, now, cells, tat0, corrupt] if n == 1 && *cells >= 1 => Ok(Reply::Leased {
            now: unsigned(*now)?,
            cells: unsigned(*cells)?,
            tat0: unsigned(*tat0)?,
            corrupt: unsigned(*corrupt)?,
        }),
        [code @ (0 | 1), now, rest @ ..] if rest.len() == n + 1 => {
            let aheads = rest[..n]
                .iter()
                .map(|&a| unsigned(a))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Reply::Decided {
                conforms: *code == 0,
                now: unsigned(*now)?,
                aheads,
                corrupt: unsigned(rest[n])?,
            })
        }
        [5, now, rest @ ..] if rest.len() == 2 * n + 1 => {
            let all = rest[..2 * n]
                .iter()
                .map(|&a| unsigned(a))
                .collect::<Result<Vec<_>, _>>()?;
            let (aheads, moved) = all.split_at(n);
            Ok(Reply::Settled {
                now: unsigned(*now)?,
                aheads: aheads.to_vec(),
                moved: moved.to_vec(),
                corrupt: unsigned(rest[2 * n])?,
            })
        }
        [6, _] => Ok(Reply::Duplicate),
        [3, ..] => Err("the script refused its arguments".to_owned()),
        other => Err(format!("{} values for {n} keys", other.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_strictly() {
        assert_eq!(
            parse(&[0, 5, 7, 0], 1),
            Ok(Reply::Decided {
                conforms: true,
                now: 5,
                aheads: vec![7],
                corrupt: 0
            })
        );
        assert_eq!(parse(&[2, 0], 1), Ok(Reply::ClockOutOfRange));
        assert!(parse(&[0, 5, 7], 1).is_err(), "too short");
        assert!(parse(&[1, 5, -7, 0], 1).is_err(), "negative");
        assert!(parse(&[3, 5], 1).is_err());
        assert!(parse(&[9, 5, 7, 0], 1).is_err());
        assert_eq!(
            parse(&[4, 5, 20, 9, 0], 1),
            Ok(Reply::Leased {
                now: 5,
                cells: 20,
                tat0: 9,
                corrupt: 0
            })
        );
        assert!(parse(&[4, 5, 0, 9, 0], 1).is_err(), "an empty lease");
        assert!(parse(&[4, 5, 20, 9, 0], 2).is_err(), "a lease of two keys");
        assert_eq!(
            parse(&[5, 5, 7, 8, 3, 0, 1], 2),
            Ok(Reply::Settled {
                now: 5,
                aheads: vec![7, 8],
                moved: vec![3, 0],
                corrupt: 1
            })
        );
        assert!(
            parse(&[5, 5, 7, 8, 3, 0], 2).is_err(),
            "a settle reply cut short"
        );
        assert!(parse(&[5, 5, 7, -8, 3, 0, 0], 2).is_err(), "negative");
        assert_eq!(parse(&[6, 5], 1), Ok(Reply::Duplicate));
    }
}
