//! The slots script (`concurrency.lua`) and its calls: acquire, release, renew, count.

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::redis::call::Eval;

/// The script's source.
pub(crate) const SOURCE: &str = include_str!("../concurrency.lua");

/// What one call asks of the script.
#[derive(Debug)]
pub(crate) enum Op<'a> {
    /// Take a slot for `holder` if fewer than `slots` are held.
    Acquire { holder: &'a str, slots: u32 },
    /// Give these holders' slots back.
    Release(&'a [String]),
    /// Extend these holders' leases.
    Renew(&'a [String]),
    /// Count the live holders.
    Count,
}

/// One call: the key, the clock reading (`None`: the server's `TIME`), the lease and the
/// key's TTL floor (ms), and the operation.
#[derive(Debug)]
pub(crate) struct SlotCall<'a> {
    pub(crate) script: &'a redis::Script,
    pub(crate) key: &'a [u8],
    pub(crate) now_ms: Option<u64>,
    pub(crate) lease_ms: u64,
    pub(crate) floor_ms: u64,
    pub(crate) op: Op<'a>,
}

/// What the script answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SlotReply {
    /// Acquire: taken, now `count` held.
    Taken { count: u32 },
    /// Acquire: refused, `count` held.
    Refused { count: u32 },
    /// Release and count: `count` held now.
    Count { count: u32 },
    /// Renew: `count` held now; the positions (0-based) of the holders no longer there.
    Renewed { count: u32, lost: Vec<usize> },
    /// The client clock read past the script's range.
    ClockOutOfRange,
}

impl Eval for SlotCall<'_> {
    type Out = SlotReply;

    async fn run<C: ConnectionLike + Send>(
        &self,
        con: &mut C,
        reloaded: &mut bool,
    ) -> Result<Result<SlotReply, String>, RedisError> {
        let sha = self.script.get_hash();
        let raw: Vec<i64> = match self.command("EVALSHA", sha).query_async(con).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                *reloaded = true;
                self.command("EVAL", SOURCE).query_async(con).await?
            }
            other => other?,
        };
        Ok(self.parse(&raw))
    }
}

impl SlotCall<'_> {
    fn command(&self, name: &str, script: &str) -> redis::Cmd {
        let mut cmd = redis::cmd(name);
        cmd.arg(script).arg(1).arg(self.key);
        match self.now_ms {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        let op = match self.op {
            Op::Acquire { .. } => "A",
            Op::Release(_) => "R",
            Op::Renew(_) => "N",
            Op::Count => "C",
        };
        cmd.arg(op).arg(self.lease_ms).arg(self.floor_ms);
        match self.op {
            Op::Acquire { holder, slots } => {
                cmd.arg(holder).arg(slots);
            }
            Op::Release(holders) | Op::Renew(holders) => {
                for h in holders {
                    cmd.arg(h.as_str());
                }
            }
            Op::Count => {}
        }
        cmd
    }

    /// Reads the reply strictly: anything the script never answers is an error.
    fn parse(&self, raw: &[i64]) -> Result<SlotReply, String> {
        let count = |c: i64| u32::try_from(c).map_err(|_| format!("a count of {c}"));
        match (&self.op, raw) {
            (_, [2]) => Ok(SlotReply::ClockOutOfRange),
            (Op::Acquire { .. }, [0, c]) => Ok(SlotReply::Taken { count: count(*c)? }),
            (Op::Acquire { .. }, [1, c]) => Ok(SlotReply::Refused { count: count(*c)? }),
            (Op::Release(_) | Op::Count, [0, c]) => Ok(SlotReply::Count { count: count(*c)? }),
            (Op::Renew(holders), [0, c, lost @ ..]) => {
                let lost = lost
                    .iter()
                    .map(|&i| match usize::try_from(i) {
                        Ok(i) if (1..=holders.len()).contains(&i) => Ok(i - 1),
                        _ => Err(format!("a holder position of {i}")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(SlotReply::Renewed {
                    count: count(*c)?,
                    lost,
                })
            }
            (_, [3]) => Err("the script refused its arguments".to_owned()),
            (_, other) => Err(format!("a reply of {} values", other.len())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(script: &'a redis::Script, op: Op<'a>) -> SlotCall<'a> {
        SlotCall {
            script,
            key: b"k",
            now_ms: None,
            lease_ms: 1,
            floor_ms: 0,
            op,
        }
    }

    #[test]
    fn replies_are_read_strictly() {
        let s = redis::Script::new(SOURCE);
        let acquire = call(
            &s,
            Op::Acquire {
                holder: "h",
                slots: 2,
            },
        );
        assert_eq!(acquire.parse(&[0, 2]), Ok(SlotReply::Taken { count: 2 }));
        assert_eq!(acquire.parse(&[1, 2]), Ok(SlotReply::Refused { count: 2 }));
        assert_eq!(acquire.parse(&[2]), Ok(SlotReply::ClockOutOfRange));
        assert!(acquire.parse(&[0, -1]).is_err(), "a negative count");
        assert!(acquire.parse(&[0]).is_err(), "too short");
        assert!(acquire.parse(&[3]).is_err(), "refused arguments");
        assert!(acquire.parse(&[0, 1, 1]).is_err(), "too long");
        let holders = ["a".to_owned(), "b".to_owned()];
        let renew = call(&s, Op::Renew(&holders));
        assert_eq!(
            renew.parse(&[0, 3, 2]),
            Ok(SlotReply::Renewed {
                count: 3,
                lost: vec![1]
            })
        );
        assert!(
            renew.parse(&[0, 3, 3]).is_err(),
            "a position past the holders"
        );
        assert!(renew.parse(&[0, 3, 0]).is_err(), "positions are 1-based");
        let release = call(&s, Op::Release(&holders));
        assert_eq!(release.parse(&[0, 0]), Ok(SlotReply::Count { count: 0 }));
        assert!(
            release.parse(&[1, 0]).is_err(),
            "a release is never refused"
        );
    }
}
