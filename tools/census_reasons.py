"""Why each mutant of tools/mutation_census.py that no model or test kills is harmless, or
why it is not and what stands in for a model.

A reason is found by the mutant's file, its mutation ("Acquire -> Relaxed", "remove fence",
"recheck") and a piece of the mutated line. Its class says what kind of argument it is:

  lock       the access is made under a lock (the keyed table's insert lock, a concurrency
             limiter's queue or shard mutex) that every write it depends on is made under too:
             the lock's release and acquire order them, whatever the access's own ordering;
  payload    a read-modify-write (or the load feeding it) whose word is its whole message: the
             thread writes nothing before it that a reader of the word then reads, and reads
             nothing after it on the strength of its value (an RMW always reads the latest
             value in the word's modification order, whatever its ordering);
  coherence  a re-check loaded after an Acquire load of the word it validates: if that load
             read a write that came after the checked value changed, the change happens before
             the re-check, which (read coherence, on any ordering) sees it;
  fence      an Acquire fence follows the load in program order (the quota sequence lock's
             `load` or `confirm`), and a Relaxed load followed by an Acquire fence
             synchronises with the Release it read from exactly as an Acquire load does;
  pair       redundant with a neighbouring step that gives the same ordering; the two removed
             together are killed (named in the reason);
  linear     a reader that misses the write is concurrent with the operation making it, and
             is ordered before it: a legal outcome;
  number     a count read for a report or a bound, with nothing read on its strength;
  loom       statements only compiled under `cfg(loom)`: the models' stand-in for std's
             `OnceLock`, absent from every real build;
  needed     NOT equivalent: the ordering is required, and the argument is given; loom 0.7
             does not produce the weak-memory outcome in any model written for it.
"""

LOCK = "lock"

# (file, mutation, a piece of the line) -> (class, reason)
REASONS = [
    # --- the quota sequence lock and the gates -------------------------------------------
    ("src/engine/params/mod.rs", "Acquire -> Relaxed", "self.seq.load(Ordering::Acquire) == seq",
     "coherence", "`unchanged`: called after an Acquire load of a TAT word; a rescale publishes "
     "the new sequence number before it writes any word."),
    ("src/engine/params/gate.rs", "Acquire -> Relaxed", "gate.0.load(Ordering::Acquire) == g",
     "coherence", "`still_valid`'s gate load, after an Acquire load of the word: a rescaled word "
     "was written after the odd gate value (fence, then the word's swap)."),
    ("src/engine/params/gate.rs", "remove fence", "fence(Ordering::Release)",
     "pair", "Each rescaled word is written by an AcqRel swap, whose Release orders the odd gate "
     "before the word as the fence does. Fence and swap weakened together: killed by "
     "`quota_gate_orders_a_group_rescale`."),
    ("src/engine/params/gate.rs", "Release -> Relaxed", "self.0.store(gen.wrapping_mul(2), Ordering::Release);\n    }\n\n    /// Waits",
     "lock", "`mark`: a new segment's gates are marked before the segment is published (std's "
     "`OnceLock`, Release and Acquire), and the spill gate under the insert lock; no reader "
     "reaches a gate another way."),
    ("src/engine/params/gate.rs", "Acquire -> Relaxed", ".load(Ordering::Acquire)\n            .wrapping_sub",
     "payload", "`wait_for` only decides when to stop waiting: its caller then starts the check "
     "over, whose gate load in `resolve` is Acquire."),
    ("src/engine/params/gate.rs", "Acquire -> Relaxed", "self.0.load(Ordering::Acquire) == gen.wrapping_mul(2)",
     LOCK, "`is_at`: gates are written only under the insert lock (a rescale holds it per "
     "group), and this is read under it."),
    ("src/engine/params/gate.rs", "Acquire -> Relaxed", "self.0.load(Ordering::Acquire) == other.0.load",
     LOCK, "`same_generation`: both gates read under the insert lock, which every gate write "
     "holds."),
    ("src/engine/params/gate.rs", "Acquire -> Relaxed", "let mut raw = word.load(Ordering::Acquire);",
     "payload", "A rescale reads the TAT value only; the checks and refunds racing it write "
     "nothing but the word."),
    ("src/engine/params/gate.rs", "AcqRel -> Acquire", "word.compare_exchange_weak(raw, next",
     "pair", "The rescale's Release fence before its words gives every following write of the "
     "thread, this swap included, its Release. Weakened with the fence: killed by "
     "`quota_gate_orders_a_group_rescale`."),
    ("src/engine/params/gate.rs", "AcqRel -> Release", "word.compare_exchange_weak(raw, next",
     "payload", "Nothing is read after the rescale's swap on the strength of the word it "
     "replaced (the next word is another location; the gate is the rescale's own)."),
    ("src/engine/params/gate.rs", "Acquire -> Relaxed", "word.compare_exchange_weak(raw, next",
     "payload", "A failed rescale swap only takes the value it failed on to retry with."),
    # --- the TAT word's step ---------------------------------------------------------------
    ("src/engine/cell.rs", "AcqRel -> Acquire", "word.compare_exchange_weak(raw, next",
     "payload", "A check's swap publishes only the TAT it writes: nothing written before it is "
     "read by another thread through this word."),
    ("src/engine/cell.rs", "AcqRel -> Release", "word.compare_exchange_weak(raw, next",
     "payload", "After a successful swap the check reads nothing: it returns its verdict."),
    ("src/engine/refund.rs", "AcqRel -> Acquire", "word.compare_exchange_weak(raw, next",
     "payload", "As `cell.rs`'s swap: the word is the whole message."),
    ("src/engine/refund.rs", "AcqRel -> Release", "word.compare_exchange_weak(raw, next",
     "payload", "As `cell.rs`'s swap: after it the refund reads nothing."),
    ("src/limiter/direct.rs", "Acquire -> Relaxed", "let mut cur = tat.load(Ordering::Acquire);",
     "fence", "The direct fast path's TAT load is followed by `confirm`, whose first step is an "
     "Acquire fence."),
    ("src/limiter/direct.rs", "AcqRel -> Acquire", "tat.compare_exchange_weak(cur, next",
     "payload", "As `cell.rs`'s swap: the word is the whole message."),
    ("src/limiter/direct.rs", "AcqRel -> Release", "tat.compare_exchange_weak(cur, next",
     "payload", "After a successful swap the check reads nothing."),
    ("src/limiter/direct.rs", "Acquire -> Relaxed", "tat.compare_exchange_weak(cur, next",
     "fence", "A failed swap loops back to `confirm`, whose first step is an Acquire fence."),
    # --- the keyed table ---------------------------------------------------------------------
    ("src/limiter/keyed/carry.rs", "Acquire -> Relaxed", "let moves = self.moves.load",
     "fence", "The carry's first move-counter load is followed by the quota snapshot's `load`, "
     "which ends in an Acquire fence, before the lookup."),
    ("src/limiter/keyed/carry.rs", "Acquire -> Relaxed", "let spilled = self.spilled.load",
     "fence", "As the move counter: the snapshot's Acquire fence follows before the lookup."),
    ("src/limiter/keyed/carry.rs", "remove fence", "fence(Ordering::Acquire)",
     "pair", "The lookup's own loads (the shape, a slot's key and liveness) are Acquire: one "
     "that read a write of the move synchronises with the move's Release fence, so the "
     "counter's re-read sees the move as the fence would make it. The fence and those loads "
     "weakened together: killed by `slot_move_races_a_carry`."),
    ("src/limiter/keyed/carry.rs", "Acquire -> Relaxed", "let ours = place.slot.key.load",
     "coherence", "The key re-check after `tat_of`'s Acquire load of the word."),
    ("src/limiter/keyed/carry.rs", "Acquire -> Relaxed", "let mut raw = word.load(Ordering::Acquire);",
     "payload", "`raise` (under the insert lock) only reads the TAT value it raises."),
    ("src/limiter/keyed/carry.rs", "AcqRel -> Acquire", "word.compare_exchange_weak(raw, next",
     "payload", "`raise`'s swap publishes only the TAT; the carry's other writes are made under "
     "the insert lock."),
    ("src/limiter/keyed/carry.rs", "AcqRel -> Release", "word.compare_exchange_weak(raw, next",
     "payload", "Nothing is read after `raise`'s swap."),
    ("src/limiter/keyed/carry.rs", "Acquire -> Relaxed", "word.compare_exchange_weak(raw, next",
     "payload", "A failed swap only takes the value to retry with."),
    ("src/limiter/keyed/grow.rs", "remove fence", "fence(Ordering::Release)",
     "pair", "Every write inside a move is itself Release or stronger (the old copy's AcqRel "
     "swap to the tombstone, `install`'s key or TAT Release, the shape's Release), and each "
     "carries the odd counter with it. The fence, the tombstone swap's Release and the "
     "shape's Release weakened together: killed by `slot_move_races_a_carry` and "
     "`slot_reuse_races_a_key_peek`."),
    ("src/limiter/keyed/grow.rs", "Acquire -> Relaxed", "let mut raw = from.tat.load",
     "payload", "A relocation (under the insert lock) reads the TAT value it moves; the checks "
     "racing it write nothing but the word."),
    ("src/limiter/keyed/grow.rs", "AcqRel -> Acquire", "Ordering::AcqRel,",
     "pair", "The move's Release fence (`moving`) gives the tombstone swap its Release; a "
     "reader that sees the tombstone goes to the insert lock (weakened with the fence: "
     "killed, see the fence)."),
    ("src/limiter/keyed/grow.rs", "AcqRel -> Release", "Ordering::AcqRel,",
     "payload", "After the tombstone swap the relocation writes the new copy from the value it "
     "swapped out; it reads nothing else on its strength."),
    ("src/limiter/keyed/grow.rs", "Acquire -> Relaxed", "Ordering::Acquire,",
     "payload", "A failed tombstone swap only takes the value to retry with."),
    ("src/limiter/keyed/insert.rs", "Release -> Relaxed", "self.spilled.store(slow.spill.len(), Ordering::Release);\n            self.inserted",
     "linear", "A key spills at its first insert: a peek that reads the old count is concurrent "
     "with that insert; one that reads the new count takes the insert lock, which orders the "
     "map."),
    ("src/limiter/keyed/insert.rs", "Acquire -> Relaxed", "if slot.tat.load(Ordering::Acquire) != TOMBSTONE",
     LOCK, "`held`, under the insert lock: tombstones are written only under it (sweeps, "
     "moves), and a check's swap never writes one."),
    ("src/limiter/keyed/refund.rs", "Acquire -> Relaxed", "let ours = || place.slot.key.load",
     "coherence", "The refund's key re-check after `refund_word`'s Acquire load of the word."),
    ("src/limiter/keyed/store.rs", "Acquire -> Relaxed", "self.key.load(Ordering::Relaxed) == 0 || self.tat.load",
     LOCK, "`is_free`, under the insert lock, where every tombstone is written."),
    ("src/limiter/keyed/store.rs", "Acquire -> Relaxed", "(fp != 0 && self.tat.load",
     LOCK, "`live_key`, under the insert lock, where every tombstone is written."),
    ("src/limiter/keyed/store.rs", "Acquire -> Relaxed", "buckets_of_shape(self.shape.load",
     LOCK, "`buckets_in_use`: read by the sweep under the insert lock (where the shape is "
     "written) and by reports."),
    ("src/limiter/keyed/store.rs", "Acquire -> Relaxed", "let shape = self.shape.load(Ordering::Acquire);",
     "pair", "A lookup that reads a new shape and misses the moved key is re-checked: a check "
     "or a refund goes to the insert lock; a peek or a carry re-reads the move counter after "
     "an Acquire fence, which (the shape being written inside the move, after its Release "
     "fence) sees the move. Weakened with the lookup's other loads and the fences: killed by "
     "`slot_move_races_a_carry` and `slot_reuse_races_a_key_peek`."),
    ("src/limiter/keyed/store.rs", "Acquire -> Relaxed", "at col 68: slot.key.load(Ordering::Acquire) == fp",
     "coherence", "The lookup's liveness filter: every user loads the word again with Acquire "
     "and re-checks the tombstone and the key, so a stale live reading goes the way a death "
     "just after the lookup would."),
    ("src/limiter/keyed/store.rs", "Acquire -> Relaxed", "if !self.published.get(seg)?.load",
     "loom", "Under `cfg(loom)` only: the models' stand-in for `OnceLock`'s own Acquire."),
    ("src/limiter/keyed/store.rs", "Release -> Relaxed", "flag.store(true, Ordering::Release);",
     "loom", "Under `cfg(loom)` only: the models' stand-in for `OnceLock`'s own Release."),
    ("src/limiter/keyed/store.rs", "Release -> Relaxed", "self.shape.store(shape, Ordering::Release);",
     "pair", "The shape is written inside a move, after its Release fence (`moving`), which "
     "gives it its Release (weakened with the fence: killed, see the fence)."),
    ("src/limiter/keyed/sweep.rs", "Acquire -> Relaxed", "let mut raw = tat.load(Ordering::Acquire);",
     "payload", "A sweep (under the insert lock) reads the TAT value only."),
    ("src/limiter/keyed/sweep.rs", "AcqRel -> Acquire", "tat.compare_exchange(raw, TOMBSTONE",
     LOCK, "A reader that sees the tombstone goes to the insert lock, which the sweep holds: "
     "the lock orders what the swap's Release would."),
    ("src/limiter/keyed/sweep.rs", "AcqRel -> Release", "tat.compare_exchange(raw, TOMBSTONE",
     LOCK, "The sweep reads nothing after its swap but under the insert lock."),
    ("src/limiter/keyed/sweep.rs", "Acquire -> Relaxed", "tat.compare_exchange(raw, TOMBSTONE",
     "payload", "A failed sweep swap only takes the value to test again."),
    ("src/limiter/keyed/sweep.rs", "Release -> Relaxed", "self.spilled.store(slow.spill.len(), Ordering::Release);\n            return true;",
     "linear", "Only idle spilled keys are swept (TAT ≤ now), whose state is a new key's: a "
     "reader that sees them gone says what it would have said of them."),
    ("src/limiter/keyed/table.rs", "Acquire -> Relaxed", "|| slot.key.load(Ordering::Acquire) != fp",
     "coherence", "The fast path's key re-check after its Acquire load of the word."),
    ("src/limiter/keyed/table.rs", "AcqRel -> Acquire", "Ordering::AcqRel,",
     "payload", "The fast path's swap publishes only the TAT."),
    ("src/limiter/keyed/table.rs", "AcqRel -> Release", "Ordering::AcqRel,",
     "payload", "After a successful swap the fast path reads nothing."),
    ("src/limiter/keyed/table.rs", "Acquire -> Relaxed", "let valid = || slot.key.load(Ordering::Acquire) == fp && self.params",
     "coherence", "A key re-check called by `step_checked` after its Acquire load of the word."),
    ("src/limiter/keyed/table.rs", "Acquire -> Relaxed", "|| slot.key.load(Ordering::Acquire) == fp && token",
     "coherence", "A key re-check called by `step_checked` after its Acquire load of the word."),
    ("src/limiter/keyed/table.rs", "Acquire -> Relaxed", "let moves = self.moves.load",
     "fence", "The peek's move-counter load is followed by the snapshot's `load`, which ends in "
     "an Acquire fence, before the lookup."),
    ("src/limiter/keyed/table.rs", "Acquire -> Relaxed", "let spilled = self.spilled.load",
     "fence", "As the move counter: the snapshot's Acquire fence follows before the lookup "
     "(checked by hand: `spill_rehome_races_a_key_peek` passes with it Relaxed, and fails with "
     "`rehome`'s Release store Relaxed)."),
    ("src/limiter/keyed/table.rs", "remove fence", "fence(Ordering::Acquire)",
     "pair", "As the carry's fence: the lookup's Acquire loads order the counter's re-read. "
     "Weakened together: killed by `slot_reuse_races_a_key_peek`."),
    ("src/limiter/keyed/table.rs", "Acquire -> Relaxed", "if place.slot.key.load(Ordering::Acquire) != fp",
     "coherence", "The peek's key re-check after `tat_of`'s Acquire load of the word."),
    # --- the concurrency limiters ------------------------------------------------------------
    ("src/concurrency/direct.rs", "AcqRel -> Acquire", ".compare_exchange_weak(w, w + 1",
     "payload", "An acquire publishes nothing: what a permit's holder writes comes after it, "
     "and the release publishes that."),
    ("src/concurrency/direct.rs", "AcqRel -> Release", "if self.word.fetch_sub(1",
     LOCK, "After a release the thread reads the waiter flag from its own subtraction (one "
     "word's modification order) and grants under the queue's lock."),
    ("src/concurrency/direct.rs", "AcqRel -> Acquire", "self.word.fetch_or(QUEUED",
     LOCK, "The waiter flag: set under the queue's lock, before the grant attempt; a release "
     "learns it from the word's modification order (`concurrency_wait_loses_no_wake_up`)."),
    ("src/concurrency/direct.rs", "AcqRel -> Release", "self.word.fetch_or(QUEUED",
     LOCK, "As above: the grant that follows runs under the queue's lock."),
    ("src/concurrency/direct.rs", "AcqRel -> Acquire", "        self.word.fetch_sub(1, Ordering::AcqRel);\n        self.grant",
     LOCK, "`release_locked` gives back the slot of a ticket granted and then abandoned: no "
     "user code held it, so it publishes nothing."),
    ("src/concurrency/direct.rs", "AcqRel -> Release", "        self.word.fetch_sub(1, Ordering::AcqRel);\n        self.grant",
     LOCK, "As above; the grant that follows runs under the queue's lock."),
    ("src/concurrency/direct.rs", "Release -> Relaxed", "self.waiting.store(n",
     "number", "The count of waiters: a fairness hint and a report, written under the queue's "
     "lock."),
    ("src/concurrency/direct.rs", "AcqRel -> Acquire", "self.word.fetch_and(!QUEUED",
     LOCK, "Cleared under the queue's lock with no waiter left; the flag's protocol is the "
     "word's modification order."),
    ("src/concurrency/direct.rs", "AcqRel -> Release", "self.word.fetch_and(!QUEUED",
     LOCK, "As above."),
    ("src/concurrency/direct.rs", "Acquire -> Relaxed", "let (limit, n) = split(self.word.load",
     "number", "`refusal`: the limit and count reported in a `Saturated`."),
    ("src/concurrency/direct.rs", "Acquire -> Relaxed", "split(self.word.load(Ordering::Acquire)).1",
     "number", "`in_flight`: a report."),
    ("src/concurrency/direct.rs", "Acquire -> Relaxed", "split(self.word.load(Ordering::Acquire)).0",
     "number", "`limit`: a report."),
    ("src/concurrency/direct.rs", "Acquire -> Relaxed", "self.core.waiting.load",
     "number", "`waiting`: a report."),
    ("src/concurrency/direct.rs", "AcqRel -> Acquire", ".compare_exchange_weak(w, new",
     "payload", "`set_limit` publishes only the limit, which is in the word itself."),
    ("src/concurrency/direct.rs", "AcqRel -> Release", ".compare_exchange_weak(w, new",
     LOCK, "After `set_limit`'s swap the thread grants under the queue's lock."),
    ("src/concurrency/keyed.rs", "SeqCst -> Acquire", "self.limit.load(Ordering::SeqCst)",
     LOCK, "Read under a shard's lock; `set_limit` stores it and then locks every shard, so a "
     "waiter that locked before is granted there and one that locks after sees the new "
     "limit through the lock."),
    ("src/concurrency/keyed.rs", "SeqCst -> AcqRel", ".fetch_update(Ordering::SeqCst",
     "number", "The count of keys against `max_keys`: exact by the read-modify-write's "
     "atomicity; the entries themselves are ordered by their shard's lock."),
    ("src/concurrency/keyed.rs", "SeqCst -> AcqRel", "self.keys.fetch_sub(1",
     "number", "As above: the count of keys."),
    ("src/concurrency/keyed.rs", "SeqCst -> Acquire", "self.core.keys.load",
     "number", "`keys`: a report."),
    ("src/concurrency/keyed.rs", "SeqCst -> Release", "self.core.limit.store",
     LOCK, "Every shard is locked after the store (see the load above)."),
    ("src/concurrency/wait.rs", "Acquire -> Relaxed", "if core.waiting.load",
     "number", "A fairness hint (do not pass a queued waiter); the acquire that follows is the "
     "word's own swap, and a stale hint only queues a waiter that could have been served, "
     "which the grant then serves."),
    # --- needed, and not produced by loom 0.7 -------------------------------------------------
    ("src/limiter/keyed/table.rs", "Acquire -> Relaxed", "let mut raw = slot.tat.load(Ordering::Acquire);",
     "needed", "The fast path's TAT load, then the key re-check: if a move or a sweep gave the "
     "slot to another key, a Relaxed load may read the new owner's word and the re-check the "
     "old key. The word decoded under the wrong mask is a uniform 64-bit number, and the fast "
     "path takes it for its own when it falls between 0 and now + τ (probability (now + τ)/2⁶⁴: "
     "about 2⁻⁹ a year into a process), then swaps into the other key's word. "
     "`slot_move_fails_a_check_swap` runs this race; the decoded words of its keys fall "
     "outside that window."),
    ("src/limiter/keyed/table.rs", "Acquire -> Relaxed", "Ordering::Acquire,",
     "needed", "The fast path's failed swap, then the key re-check: as its first load (the "
     "model `slot_move_fails_a_check_swap` passes with this mutant: the decoded word falls "
     "outside the window; the same mutant of `cell.rs`'s general step is killed by it)."),
    ("src/limiter/keyed/store.rs", "Release -> Relaxed", "slot.key.store(fp, Ordering::Release);\n        slot.tat",
     "needed", "A reused slot's new key: its Release orders the tombstone before it, so a reader "
     "that finds the new key reads the tombstone or the new TAT, never the previous key's "
     "live word (which it would decode under the new key's mask)."),
    ("src/limiter/keyed/store.rs", "Acquire -> Relaxed", "at col 26: slot.key.load(Ordering::Acquire) == fp",
     "needed", "The lookup's key load: its Acquire pairs with `install`'s key Release (a "
     "never-used slot's TAT is written first), so a lookup that finds the key reads its TAT, "
     "not the empty word. `slot_install_races_a_key_peek` runs this race and passes with "
     "the mutant."),
    ("src/limiter/keyed/store.rs", "Release -> Relaxed", "slot.key.store(fp, Ordering::Release);\n    }\n}",
     "needed", "A never-used slot's key: its Release orders the TAT before it, so a lookup that "
     "finds the key reads its TAT, not the empty word (decoded: a TAT of centuries). "
     "`slot_install_races_a_key_peek` runs this race and passes with the mutant."),
]


def reason_of(path, line, what):
    """(class, reason) for the mutant `what` of line `line` (1-based) of `path`, or None."""
    for f, op, piece, cls, why in REASONS:
        if f != path or not what.startswith(op):
            continue
        if piece in what or piece in context_of(path, line):
            return cls, why
    return None


_LINES = {}


def context_of(path, line):
    """The mutated line and the three after it, for pieces that span lines."""
    if path not in _LINES:
        try:
            _LINES[path] = open(path).read().split("\n")
        except OSError:
            _LINES[path] = []
    return "\n".join(_LINES[path][line - 1:line + 3])
