//! Incident 003: correlated restarts sent replica recovery at 8 Gbit/s per node over links
//! shared with heartbeats and client writes; clients retried timed-out writes at once, up to
//! ten times; heartbeats starved and leaders flapped.
//!
//! The model, in 100 ms ticks on one shared 40 Gbit/s link (15 Gbit/s of it other traffic,
//! counted, not simulated): 1,000 clients write 3,000 times a second (16 KiB each) to 400
//! partitions, whose leaders send a 1 KiB heartbeat every 500 ms; six nodes restart at 14:05
//! and six more at 14:25, each recovering a 1.2 TB backlog in 16 MiB chunks. When more is
//! offered than the link carries, each item gets through with the same chance (a shared
//! queue). A partition that misses 4 heartbeats in a row elects a new leader and refuses
//! writes for 5 s (a write to it is refused at once). A write not served within 10 s has failed.
//!
//! * **naive**: recovery at 8 Gbit/s per node, no priorities; clients retry at once (next
//!   tick), up to 10 times. The postmortem's mitigations at their times: recovery cut to
//!   2 Gbit/s at 14:47, retries shed at the edge from 14:52.
//! * **tollgate**: the link's storage share behind a byte budget (`20Gbit/s;burst=48MiB`)
//!   with priority classes — heartbeats class 0, writes class 1 (reserve 20 %), recovery
//!   class 2 (reserve 50 %) — and a [`RetryBudget`]; clients use [`Backoff`].

use tollgate::shaping::{Backoff, Priorities, RetryBudget};
use tollgate::{Check, ManualClock, RateLimiter, Verdict};

use super::report::{Incident, Run};
use super::sim::{Answer, Clients, Mark, Op, Recorder, RetryPolicy, Rng, MINUTE};
use super::ReplayError;

const TICK_MS: u64 = 100;
const LINK_BYTES_PER_TICK: u64 = 40_000_000_000 / 8 / 10;
const OTHER_BYTES_PER_TICK: u64 = 15_000_000_000 / 8 / 10;
const CLIENTS: u32 = 1_000;
const WRITES_PER_TICK: u64 = 300;
const WRITE_BYTES: u64 = 16 << 10;
const PARTITIONS: usize = 400;
const HEARTBEAT_EVERY_TICKS: u64 = 5;
const HEARTBEAT_BYTES: u64 = 1 << 10;
const CHUNK: u64 = 16 << 20;
const DEADLINE_MS: u64 = 10_000;
const ELECTION_MS: u64 = 5_000;
/// Heartbeats missed in a row before a partition elects a new leader.
const MISSES_TO_ELECT: u8 = 4;

#[derive(Clone, Copy, Debug)]
struct Timeline {
    restarts: [u64; 2],
    recovery_cut: u64,
    retries_shed: u64,
    end: u64,
    backlog_bytes: u64,
}

impl Timeline {
    fn new(short: bool) -> Timeline {
        if short {
            Timeline {
                restarts: [2 * MINUTE, 6 * MINUTE],
                recovery_cut: 12 * MINUTE,
                retries_shed: 14 * MINUTE,
                end: 20 * MINUTE,
                backlog_bytes: 300_000_000_000,
            }
        } else {
            Timeline {
                restarts: [2 * MINUTE, 22 * MINUTE],
                recovery_cut: 44 * MINUTE,
                retries_shed: 49 * MINUTE,
                end: 78 * MINUTE,
                backlog_bytes: 1_200_000_000_000,
            }
        }
    }
}

/// Something wanting the link this tick.
#[derive(Clone, Copy, Debug)]
enum Item {
    Heartbeat(usize),
    Write(Op, usize),
    Chunk(usize),
}

/// How a side puts items on the link: `Some(verdict)` when a limiter judged it.
trait Gate {
    fn admit(&mut self, item: &Item) -> Option<Verdict>;
    /// Recovery chunks per tick a node may offer at `t`.
    fn node_rate(&self, t: u64) -> u64;
    /// Whether the edge drops this retry before it reaches the link.
    fn shed(&self, _t: u64, _op: &Op) -> bool {
        false
    }
    /// The tick's time, for what the gate records.
    fn set_now(&mut self, _t: u64) {}
}

/// What became of an item at admission.
#[derive(Clone, Copy, Debug)]
enum Admit {
    /// No limiter: straight onto the link.
    Open,
    /// A limiter's verdict.
    Judged(Verdict),
    /// Refused before the link: shed at the edge, or its partition is electing a leader.
    Refused,
}

impl Admit {
    fn sends(&self) -> bool {
        match self {
            Admit::Open => true,
            Admit::Judged(v) => v.is_permitted(),
            Admit::Refused => false,
        }
    }
}

struct Naive {
    tl: Timeline,
}

impl Gate for Naive {
    fn admit(&mut self, _: &Item) -> Option<Verdict> {
        None
    }
    fn node_rate(&self, t: u64) -> u64 {
        // 8 Gbit/s = 1 GB/s: 6 chunks of 16 MiB a tick; 2 Gbit/s after the cut.
        if t >= self.tl.recovery_cut {
            1
        } else {
            6
        }
    }
    fn shed(&self, t: u64, op: &Op) -> bool {
        t >= self.tl.retries_shed && op.attempt > 1
    }
}

struct Tollgate {
    link: RateLimiter,
    first_held: Option<u64>,
    now: u64,
}

impl Gate for Tollgate {
    fn admit(&mut self, item: &Item) -> Option<Verdict> {
        let check = match item {
            Item::Heartbeat(_) => Check::cost(HEARTBEAT_BYTES).class(0),
            Item::Write(op, _) => Check::cost(WRITE_BYTES).class(1).attempt(op.attempt),
            Item::Chunk(_) => Check::cost(CHUNK).class(2),
        };
        let v = self.link.check_with(check).ok()?;
        if matches!(item, Item::Chunk(_)) && !v.is_permitted() && self.first_held.is_none() {
            self.first_held = Some(self.now);
        }
        Some(v)
    }
    fn node_rate(&self, _: u64) -> u64 {
        6
    }
    fn set_now(&mut self, t: u64) {
        self.now = t;
    }
}

/// What a run leaves besides its buckets.
struct Extra {
    marks: Vec<Mark>,
    backlog_left: u64,
    elections: u64,
}

fn drive(
    tl: &Timeline,
    seed: u64,
    clock: &ManualClock,
    gate: &mut dyn Gate,
    mut clients: Clients,
) -> (Recorder, Extra) {
    let mut rng = Rng::new(seed);
    let mut rec = Recorder::new(CLIENTS as usize);
    let mut backlog = [0u64; 12];
    let mut missed = [0u8; PARTITIONS];
    let mut electing_until = [0u64; PARTITIONS];
    let mut extra = Extra {
        marks: Vec::new(),
        backlog_left: 0,
        elections: 0,
    };
    let mut due = Vec::new();
    let mut items = Vec::new();
    let mut sent: Vec<(Item, Admit)> = Vec::new();
    let start = clock.now();
    for tick in 0..tl.end / TICK_MS {
        let t = tick * TICK_MS;
        clock.set(start + std::time::Duration::from_millis(t));
        gate.set_now(t);
        for (batch, &at) in tl.restarts.iter().enumerate() {
            if t == at {
                for b in &mut backlog[batch * 6..batch * 6 + 6] {
                    *b = tl.backlog_bytes;
                }
                extra
                    .marks
                    .push(Mark::new(t, "six nodes restart: recovery begins"));
            }
        }
        items.clear();
        if tick % HEARTBEAT_EVERY_TICKS == 0 {
            items.extend((0..PARTITIONS).map(Item::Heartbeat));
        }
        clients.due(t, &mut due);
        items.extend(due.iter().map(|&op| Item::Write(op, partition(&op))));
        items.extend((0..WRITES_PER_TICK).map(|_| {
            let op = Op {
                key: rng.below(u64::from(CLIENTS)) as u32,
                born: t,
                attempt: 0,
            };
            Item::Write(op, partition(&op))
        }));
        let rate = gate.node_rate(t);
        for (node, &left) in backlog.iter().enumerate() {
            let chunks = left.div_ceil(CHUNK).min(rate);
            items.extend((0..chunks).map(|_| Item::Chunk(node)));
        }
        shuffle(&mut items, &mut rng);
        // Admission (the limiter, if any), then the shared link.
        sent.clear();
        let mut offered = OTHER_BYTES_PER_TICK;
        let n = items.len().max(1) as u64;
        for (i, item) in items.iter().enumerate() {
            // Items arrive spread over the tick, so the budget refills between them.
            let within = TICK_MS * 1_000_000 * i as u64 / n;
            clock.set(start + std::time::Duration::from_nanos(t * 1_000_000 + within));
            let refused = match item {
                Item::Write(op, p) => gate.shed(t, op) || electing_until[*p] > t,
                _ => false,
            };
            let admit = match gate.admit(item) {
                _ if refused => Admit::Refused,
                Some(v) => Admit::Judged(v),
                None => Admit::Open,
            };
            if admit.sends() {
                offered += bytes(item);
            }
            sent.push((*item, admit));
        }
        let p = (LINK_BYTES_PER_TICK as f64 / offered as f64).min(1.0);
        for &(item, admit) in &sent {
            let delivered = admit.sends() && (p >= 1.0 || rng.chance(p));
            match item {
                Item::Heartbeat(part) => {
                    rec.heartbeat(t, delivered);
                    if delivered {
                        missed[part] = 0;
                    } else {
                        missed[part] = missed[part].saturating_add(1);
                        if missed[part] >= MISSES_TO_ELECT && electing_until[part] <= t {
                            electing_until[part] = t + ELECTION_MS;
                            extra.elections += 1;
                        }
                    }
                }
                Item::Write(op, _) => {
                    let answer = match admit {
                        _ if delivered => Answer::Served,
                        Admit::Judged(Verdict::Deny(d)) => Answer::Denied(Some(d.retry_after())),
                        _ => Answer::Lost,
                    };
                    clients.answer(&mut rec, t, op, answer);
                }
                Item::Chunk(node) if delivered => {
                    backlog[node] = backlog[node].saturating_sub(CHUNK);
                }
                Item::Chunk(_) => {}
            }
        }
    }
    extra.backlog_left = backlog.iter().sum();
    (rec, extra)
}

/// The partition a write goes to: fixed per request, so its retries go there too.
fn partition(op: &Op) -> usize {
    let mut z = (u64::from(op.key) << 32) ^ op.born;
    z = (z ^ (z >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (z >> 40) as usize % PARTITIONS
}

fn bytes(item: &Item) -> u64 {
    match item {
        Item::Heartbeat(_) => HEARTBEAT_BYTES,
        Item::Write(..) => WRITE_BYTES,
        Item::Chunk(_) => CHUNK,
    }
}

fn shuffle(items: &mut [Item], rng: &mut Rng) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

fn model(e: impl std::fmt::Display) -> ReplayError {
    ReplayError::Model(e.to_string())
}

/// The naive side's own alert: write availability under 99 % over a minute.
fn availability_alert(buckets: &[super::sim::Bucket]) -> Option<u64> {
    buckets
        .iter()
        .position(|b| b.success_rate().is_some_and(|r| r < 0.99))
        .map(|i| (i as u64 + 1) * MINUTE)
}

/// Replays incident 003.
pub(crate) fn replay(short: bool, seed: u64) -> Result<Incident, ReplayError> {
    let tl = Timeline::new(short);
    let start = std::time::Duration::from_secs(3_600);

    let clock = ManualClock::at(start);
    let naive_clients = Clients::new(
        RetryPolicy::Immediate {
            max: 10,
            gap_ms: TICK_MS,
        },
        DEADLINE_MS,
    );
    let (rec, mut extra) = drive(&tl, seed, &clock, &mut Naive { tl }, naive_clients);
    let buckets = rec.finish();
    let alert = availability_alert(&buckets);
    extra.marks.push(Mark::new(
        tl.recovery_cut,
        "recovery cut to 2 Gbit/s per node",
    ));
    extra
        .marks
        .push(Mark::new(tl.retries_shed, "edge sheds retries"));
    if let Some(at) = alert {
        extra
            .marks
            .push(Mark::new(at, "alert: write availability < 99 %"));
    }
    let naive_elections = extra.elections;
    let naive_left = extra.backlog_left;
    let naive = Run {
        label: "naive",
        setup: "recovery at 8 Gbit/s per node on the shared link, no priorities; clients retry \
                at once, 10 times"
            .to_owned(),
        buckets,
        marks: extra.marks,
        detected_at_ms: alert,
        detected_by: "write-availability alert".to_owned(),
        prevented: false,
        elections: Some(naive_elections),
        backlog_left_bytes: Some(naive_left),
    };

    let clock = ManualClock::at(start);
    let classes = Priorities::new([(0, 0.0), (1, 0.2), (2, 0.5)]).map_err(model)?;
    let link = RateLimiter::builder("20Gbit/s;burst=48MiB".parse().map_err(model)?)
        .clock(clock.clone())
        .priorities(classes)
        .retry_budget(RetryBudget::new())
        .build();
    let backoff = Backoff::builder().seed(seed).build().map_err(model)?;
    let mut gate = Tollgate {
        link,
        first_held: None,
        now: 0,
    };
    let clients = Clients::new(RetryPolicy::Backoff(backoff), DEADLINE_MS);
    let (rec, mut extra) = drive(&tl, seed, &clock, &mut gate, clients);
    if let Some(at) = gate.first_held {
        extra
            .marks
            .push(Mark::new(at, "byte budget holds recovery back"));
    }
    let stats = gate.link.stats();
    let tollgate = Run {
        label: "tollgate",
        setup: "byte budget 20Gbit/s with priority classes (heartbeats 0, writes 1, recovery 2) \
                and a RetryBudget; clients use Backoff"
            .to_owned(),
        buckets: rec.finish(),
        marks: extra.marks,
        detected_at_ms: gate.first_held,
        detected_by: "the byte budget held recovery back as it began: heartbeats never starved"
            .to_owned(),
        prevented: gate.first_held.is_some(),
        elections: Some(extra.elections),
        backlog_left_bytes: Some(extra.backlog_left),
    };
    let gb = |b: u64| b as f64 / 1e9;
    let mut notes = vec![
        format!(
            "{CLIENTS} clients, {} writes/s of 16 KiB, {PARTITIONS} partitions heartbeating every \
             500 ms, 12 nodes recovering {:.0} GB each on a 40 Gbit/s link",
            WRITES_PER_TICK * 10,
            gb(tl.backlog_bytes)
        ),
        "tollgate's price: recovery waits for spare capacity, so more of the backlog is left \
         at the end (the table's last row)"
            .to_owned(),
    ];
    notes.push(format!(
        "tollgate link limiter: {} retries checked, {} denied by the retry budget",
        stats.retries, stats.denied_retry_budget
    ));
    let fault_at = tl.restarts[0];
    let mut incident = Incident::new(
        (
            "003",
            "recovery traffic starving heartbeats, and a retry storm",
            "a key-value store's recovery traffic and client retries: a SEV-1 of 74 min",
        ),
        (14 * 3600 + 3 * 60, fault_at, seed),
        notes,
        naive,
        tollgate,
        |n, t| {
            let pct = |x: Option<f64>| x.map_or("–".to_owned(), super::report::pct);
            let count = |x: Option<u64>| x.map_or("–".to_owned(), super::report::thousands);
            let gb = |x: Option<f64>| {
                x.map_or("–".to_owned(), |g| {
                    format!("{} GB", super::report::thousands(g.round() as u64))
                })
            };
            format!(
                "heartbeats {} delivered under tollgate against {} naive, leader elections {} \
                 against {}; retries {:.1} % of load against {:.1} %, writes failed {:.2} % \
                 against {:.2} %; the price: {} of recovery left at the end against {}",
                pct(t.heartbeat_success),
                pct(n.heartbeat_success),
                count(t.leader_elections),
                count(n.leader_elections),
                t.retry_share_of_load * 100.0,
                n.retry_share_of_load * 100.0,
                t.customer_requests_failed * 100.0,
                n.customer_requests_failed * 100.0,
                gb(t.recovery_backlog_left_gb),
                gb(n.recovery_backlog_left_gb),
            )
        },
    );
    incident.breadth_note = Some(BREADTH_NOTE);
    Ok(incident)
}

/// Why the naive side's deny breadth is near 100 % while most of its writes succeed.
const BREADTH_NOTE: &str = "a client counts as denied in a minute when more of its attempts \
failed than got through. The naive side has no limiter: its writes are lost on the saturated \
link, and each is retried up to 10 times, so most attempts fail (breadth near 100 %) while most \
writes still get through on a later try (the success rate above).";
