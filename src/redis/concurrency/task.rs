//! The background task of a shared concurrency limiter: it releases the slots of dropped
//! permits (so a drop never waits on the network) and renews the leases of the slots this
//! instance holds, every third of a lease. One task per limiter; it ends when the limiter and
//! its last permit are gone.
//!
//! Releases and renewals run one after another in this task, so a release is never overtaken
//! by a renewal of the same holder (which would hold its slot for one more lease).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::script::{Op, SlotReply};
use super::Inner;
use crate::redis::call::Called;
use crate::redis::stats::bump;

/// What the task is asked to do.
pub(crate) enum Msg {
    /// Remove this holder from the key's set.
    Release { key: Vec<u8>, seq: u64 },
    /// Answer once every release sent before this one is done.
    Flush(oneshot::Sender<()>),
    /// Renew now (after the releases before it), answering how many leases were extended.
    Renew(oneshot::Sender<u64>),
}

pub(crate) async fn run(inner: Arc<Inner>, mut rx: UnboundedReceiver<Msg>) {
    let every = inner.renew_every();
    let mut next = Instant::now() + every;
    loop {
        match tokio::time::timeout_at(next, rx.recv()).await {
            // The limiter and every permit are gone.
            Ok(None) => break,
            Ok(Some(m)) => {
                let mut batch = vec![m];
                while let Ok(m) = rx.try_recv() {
                    batch.push(m);
                }
                handle(&inner, batch).await;
            }
            Err(_) => {
                inner.renew_all().await;
                next = Instant::now() + every;
            }
        }
    }
}

/// Carries out `batch` in order, one release call per key for the releases between two
/// requests for an answer.
async fn handle(inner: &Inner, batch: Vec<Msg>) {
    let mut releases: HashMap<Vec<u8>, Vec<u64>> = HashMap::new();
    for m in batch {
        match m {
            Msg::Release { key, seq } => releases.entry(key).or_default().push(seq),
            Msg::Flush(done) => {
                release_all(inner, &mut releases).await;
                let _ = done.send(());
            }
            Msg::Renew(done) => {
                release_all(inner, &mut releases).await;
                let _ = done.send(inner.renew_all().await);
            }
        }
    }
    release_all(inner, &mut releases).await;
}

async fn release_all(inner: &Inner, releases: &mut HashMap<Vec<u8>, Vec<u64>>) {
    for (key, seqs) in releases.drain() {
        inner.release(&key, &seqs).await;
    }
}

impl Inner {
    /// Removes these holders of `key` from Redis, counted. A release Redis did not answer
    /// is tried again at each renewal until its lease would have ended anyway (a removal is
    /// idempotent, so a release that did land and is sent again changes nothing).
    pub(crate) async fn release(&self, key: &[u8], seqs: &[u64]) {
        let holders: Vec<String> = seqs.iter().map(|&s| self.holder(s)).collect();
        let n = holders.len() as u64;
        let c = &self.counts;
        match self.call(key, Op::Release(&holders)).await {
            Ok(Called::Answered(SlotReply::Count { .. })) => bump(&c.released, n),
            _ => {
                bump(&c.release_failed, n);
                let since = tokio::time::Instant::now();
                let mut unreleased = self.unreleased.lock();
                for &seq in seqs {
                    unreleased.push((key.to_vec(), seq, since));
                }
            }
        }
    }

    /// Sends again the releases that failed, but for those whose lease has ended since.
    async fn retry_releases(&self) {
        let lease = self.lease_time;
        let due: Vec<(Vec<u8>, u64, Instant)> = core::mem::take(&mut *self.unreleased.lock());
        let mut by_key: HashMap<Vec<u8>, Vec<u64>> = HashMap::new();
        for (key, seq, since) in due {
            if since.elapsed() < lease {
                by_key.entry(key).or_default().push(seq);
            }
        }
        for (key, seqs) in by_key {
            self.release(&key, &seqs).await;
        }
    }

    /// Extends the lease of every slot this instance holds: one call per key. A holder Redis
    /// no longer has is counted lapsed and no longer renewed (adding it back could exceed the
    /// limit: its slot may be taken by now).
    pub(crate) async fn renew_all(&self) -> u64 {
        self.retry_releases().await;
        let held: Vec<(Vec<u8>, Vec<u64>)> = self
            .held
            .lock()
            .iter()
            .map(|(k, seqs)| (k.clone(), seqs.clone()))
            .collect();
        let c = &self.counts;
        let mut renewed = 0;
        for (key, seqs) in held {
            let holders: Vec<String> = seqs.iter().map(|&s| self.holder(s)).collect();
            let n = holders.len() as u64;
            match self.call(&key, Op::Renew(&holders)).await {
                Ok(Called::Answered(SlotReply::Renewed { lost, .. })) => {
                    let kept = n - lost.len() as u64;
                    renewed += kept;
                    bump(&c.renewed, kept);
                    bump(&c.lapsed, lost.len() as u64);
                    for i in lost {
                        self.forget(&key, seqs[i]);
                    }
                }
                _ => bump(&c.renew_failed, n),
            }
        }
        renewed
    }
}
