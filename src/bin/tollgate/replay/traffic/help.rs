//! `tollgate replay --help` for the traffic replay: its inputs, options, the JSON report's
//! shape and the exit status.

/// The traffic replay and its JSON report, for `tollgate replay --help`.
pub(crate) const HELP: &str = r#"Traffic (--traffic FILE… --limits OLD.toml [--against NEW.toml]):
  FILE is CSV (a header line naming the columns) or JSON lines (one object per line), told
  apart by the first character, gzip-compressed or not (told by its first bytes); - reads
  stdin; several --traffic files are merged by time. Columns: timestamp, key, and optionally
  tier, category, route, status, bytes, attempt. Timestamps: RFC 3339 with an offset
  (2026-03-14T08:17:00Z, …+01:00), nginx $time_local (14/Mar/2026:08:17:00 +0000), nginx
  $msec (1773476220.250), or epoch seconds, milliseconds or microseconds (told by size).
  Rows should be in time order: a row up to 1 s earlier than the latest (the first row
  included) is replayed at the latest; an older one is a bad line. Bad lines are counted and
  reported with their file and line numbers (the first 20 shown).
  Every policy that applies to a request is checked (the most specific one and each
  `also = true` policy); a shadow policy never denies, and what it would deny is reported
  apart (shadow_denied).
  Memory stays bounded: keys are tracked in the limiters (bounded by max_keys) and the
  per-key deny counts keep the 10,000 keys denied most (a space-saving top-k).
  --generate FILE writes a sample log (--lines N, --keys N, --seed N).

  --clients none|retry-after|backoff|naive (--max-retries N, default 3): what clients do with
  a 429. none (the default) replays the log as written, its retries included: what NEW would
  deny of this traffic, exactly. Under a model the log's retries (attempt > 0) are dropped and
  each side's denials make retries of their own, in time order with the log: retry-after
  waits the Retry-After; backoff is the library's Backoff (exponential, full jitter, seeded
  by --seed, honouring Retry-After); naive retries one 50 ms round trip later. A client gives
  up after N retries or before a wait over 5 minutes. Reported per side: customers' success
  (originals that got through) and the retry share of load (retries over attempts). The
  log's status column (429) is compared with each side's verdicts. The staged rollout and
  the detector's baseline see the log's rows only.
  --from T / --to T (any timestamp form above; --to excluded): replay only that window.
  --newly-denied FILE (with --against): every customer NEW denies and OLD never did, as CSV
  with the header key,denied,first_denied_at (RFC 3339), the most denied first (up to
  100,000 keys: the keys NEW denied most are kept by name).
  --instances N: beside each side's one shared limit, a fleet of N instances, each with a
  local limiter holding the full quota, requests spread round-robin per request (the same
  attempts the shared limit sees): the N× admission of local limits.

  --format json prints one object (fields are only added; schema_version changes otherwise):
  {
    "schema_version": 1,
    "file": string, "files": [string],   // the logs as given ("file": the first)
    "lines": integer,                     // lines read, over every log
    "requests": integer,                  // requests replayed
    "customers": integer,                 // distinct keys in the log
    "window": {"from": string | null, "to": string | null, "rows_outside": integer},
    "key_rates": {"p50_per_minute", "p99_per_minute", "max_per_minute": integer,
                  // requests per minute of a key, over the minutes it was active
                  "peak_burst": integer, "peak_burst_key": string,   // most in one second
                  "peak_burst_at": string | null, "at_least": bool},
    "clients": {"model": "none" | "retry-after" | "backoff" | "naive",
                "max_retries": integer, "log_retries_dropped": integer},
    "bad_lines": integer,
    "bad_lines_shown": [{"file": string, "line": integer, "message": string}],  // first 20
    "first_at": string | null,            // the first request, RFC 3339
    "span_secs": number,                  // first to last request
    "sides": [{                           // "old", then "new" with --against
      "side": string, "file": string, "revision": integer,
      "allowed": integer,                 // requests let through
      "denied": integer,                  // requests denied (enforced)
      "shadow_denied": integer,           // let through only because the policy that
                                          // would deny them is in shadow mode
      "unmatched": integer,               // requests no policy applies to
      "oversized": integer,               // denied: the cost exceeds the burst
      "keys_ever_denied": integer, "keys_ever_denied_at_least": bool,
      "policies": {NAME: {"allowed": integer, "denied": integer, "shadow_denied": integer}},
      "breakdown": [{"policy", "tier", "route": string, "allowed", "denied",
                     "shadow_denied": integer}],   // each policy's verdicts by tier and route
                                          // (10,000 rows, then one "(other)" route)
      "hardest_hit": [[key, denied]],     // the 10 keys denied most
      "deny_breadth_per_minute": [number], // share of active keys mostly denied, 0 to 1
      "clients": {"originals": integer, "retries": integer, "retry_share": number,
                  "succeeded": integer, "success": number, "gave_up": integer,
                  "dropped": integer},
      "log_429": integer,                 // rows whose status is 429
      "log_429_denied": integer,          // of those, denied by this side too
      "fleet": null | {"instances": integer, "allowed": integer, "denied": integer,
                       "keys_ever_denied": integer}    // with --instances
    }],
    "against": null | {                   // with --against
      "newly_denied_keys": integer,       // keys NEW denies at least once and OLD never
      "newly_denied_at_least": bool,
      "newly_denied_sample": [string],    // up to 10, the most denied first
      "diff": object,                     // as `tollgate diff --format json` writes "diff"
      "tightening_factors": [{"policy", "from", "to", "factor"}],
      "guard": {"accepts": bool, "errors": [string]},
      "rollout": null | {"events": [{     // null: nothing replayed, or refused
        "event": "staged" | "complete" | "halted", "at": string, "after_secs": number,
        "percent": number, "reverted": bool, "reason": string | null}]},
      "detector": null | {"tripped": bool, "at": string | null, "after_secs": number | null,
        "deny_breadth": number, "baseline": number | null, "summary": string}
    },
    "gate": null | {                      // with --fail-if-newly-denied
      "threshold": string, "limit": integer, "newly_denied": integer,
      "customers": integer, "customers_at_least": bool, "passed": bool},
    "peak_rss_kib": integer | null, "out": string
  }

Exit status (traffic): 0 on success, 1 when a log had bad lines or a document is invalid,
2 on a usage error or a file that cannot be read (also part way: a truncated gzip log), 3
when --fail-if-newly-denied N|P% is given and NEW newly denies more customers than that
(3 wins over 1, 2 over both)."#;
