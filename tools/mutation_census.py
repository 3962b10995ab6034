#!/usr/bin/env python3
"""Mutation census of tollgate's lock-free code: does some model or test fail when one step
of a lock-free protocol is weakened?

Each mutant is one small, plausible weakening of a lock-free protocol step:

  order    one memory ordering weakened: Acquire -> Relaxed, Release -> Relaxed,
           AcqRel -> Acquire and AcqRel -> Release, SeqCst -> the weakest ordering that
           keeps its kind (a load's Acquire, a store's Release, a read-modify-write's AcqRel);
  fence    one `fence(..)` removed;
  recheck  one re-validation skipped or moved, by hand, listed in RECHECKS below;
  guard    one guard taken as passed, found in the code (see `guards_in`): a comparison of an
           atomic load with a value that is not a constant (a key against `fp`, a counter
           against the value read before, a gate against a generation), a sequence counter's
           or a gate's parity test (`x & 1 == 1`: odd while a change is under way), or a call
           of a re-validation or a generation test (`still_valid`, `unchanged`, `confirm`,
           `is_at`, `same_generation`). `==` and a call become `true`, `!=` becomes `false`,
           a parity test says even. A mutant whose text another one makes already (a recheck
           of the hand list) is made once.

A mutant is killed when the loom models that exercise its file fail (stage 1: `--cfg loom`,
release), or else when the race tests do (stage 2: a normal release build). The census
writes one line per mutant to the output file (TSV: id, file, line, operator, what, verdict,
seconds) and a summary at the end. Survivors are to be killed by a sharper model or test, or
explained in docs/model-checking.md.

Run from the repository root (about 30 s per mutant on 2 cores):

    python3 tools/mutation_census.py --out target/census.tsv            # every mutant
    python3 tools/mutation_census.py --only src/engine/params/mod.rs    # one file
    python3 tools/mutation_census.py --op guard                         # one operator
    python3 tools/mutation_census.py --list                             # list, run nothing
    python3 tools/mutation_census.py --table --write-doc docs/model-checking.md
                                       # every verdict, and each survivor's reason
                                       # (tools/census_reasons.py): exits 1 if one has none

The tree is restored after each mutant (and on Ctrl-C); run it on a clean checkout.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

# The files of the lock-free protocols, and the loom models that exercise each.
QUOTA = ["quota_"]
KEYED = ["slot_", "spill_", "grow_", "refund_races_a_split", "quota_change_gates_two_groups",
         "quota_change_races_a_key_peek", "quota_change_races_an_overflow_peek"]
DIRECT = ["quota_change_races_direct_checks", "quota_change_races_a_peek",
          "refund_races_a_quota_change", "quota_seqlock_publication"]
CONC = ["concurrency_", "permit_"]
FILES = {
    "src/engine/params/mod.rs": QUOTA + ["refund_races_a_quota_change"] + KEYED,
    "src/engine/params/gate.rs": QUOTA + KEYED + ["refund_races_a_quota_change"],
    "src/engine/cell.rs": DIRECT + KEYED,
    "src/engine/tagged.rs": KEYED,
    "src/limiter/direct.rs": DIRECT,
    "src/limiter/keyed/carry.rs": KEYED,
    "src/limiter/keyed/grow.rs": KEYED,
    "src/limiter/keyed/insert.rs": KEYED,
    "src/limiter/keyed/refund.rs": KEYED + ["refund_"],
    "src/limiter/keyed/store.rs": KEYED,
    "src/limiter/keyed/sweep.rs": KEYED,
    "src/limiter/keyed/table.rs": KEYED,
    "src/limiter/keyed/check.rs": KEYED,
    "src/concurrency/direct.rs": CONC,
    "src/concurrency/keyed.rs": CONC,
    "src/concurrency/wait.rs": CONC,
    "src/concurrency/permit.rs": CONC,
}

# Files added after the first pass: their mutants are numbered after the re-checks, so the
# numbers of the first pass's mutants stay.
LATER_FILES = {
    "src/engine/refund.rs": DIRECT + KEYED + ["refund_"],
}

# Models that take a minute or more; run last.
SLOW = {"quota_seqlock_never_tears_a_snapshot"}

# Re-validations, by file: (a unique text, what it becomes).
RECHECKS = {
    "src/limiter/keyed/table.rs": [
        ("if place.slot.key.load(Ordering::Acquire) != fp\n                        || !token",
         "if !token"),
        ("moves & 1 == 1 || self.moves.load(Ordering::Relaxed) != moves", "false"),
        ("None => self.locked_word(fp),", "None => None,"),
        # The spill count read after the lookup, as before `spill_rehome_races_a_key_peek`.
        ("_ if spilled == 0 => None,", "_ if self.spilled.load(Ordering::Relaxed) == 0 => None,"),
    ],
    "src/limiter/keyed/refund.rs": [
        ("let valid = || ours() && token.still_valid(&self.params, place.gate);",
         "let valid = || token.still_valid(&self.params, place.gate);"),
    ],
    "src/engine/params/mod.rs": [
        ("if self.seq.load(Ordering::Relaxed) == before {\n                return (t != 0)",
         "if true {\n                return (t != 0)"),
        ("        self.seq.load(Ordering::Relaxed) == seq\n", "        true\n"),
    ],
}

# The race tests of stage 2 (normal release build): the concurrency limiters' for their
# files, the rate limiters' for the rest (a mutant of one cannot change the other's code).
RACE_TESTS = ["refund", "reload", "rollout_race", "growth", "overflow", "admission",
              "multi_limits", "keyed", "seams", "accounting"]
CONC_RACE_TESTS = ["concurrency_limit", "concurrency"]

ORDER = re.compile(r"Ordering::(Acquire|Release|AcqRel|SeqCst)")
FENCE = re.compile(r"^\s*fence\(Ordering::\w+\);\s*(//.*)?$")


def kind_of(line, col):
    """The kind of access an ordering at `col` belongs to: load, store or rmw."""
    head = line[:col]
    for name, kind in ((".load(", "load"), (".store(", "store")):
        if head.rfind(name) > max(head.rfind(".fetch_"), head.rfind(".compare_exchange"),
                                  head.rfind(".swap("), head.rfind(".fetch_update(")):
            return kind
    return "rmw"


def mutants():
    """Every mutant, numbered in this order: new operators and files come last, so the numbers
    of the mutants of earlier runs stay."""
    seen = set()
    for m in raw_mutants():
        path, line, _, _, how = m
        text = (path, apply(path, line, how))
        if text not in seen:
            seen.add(text)
            yield m


def raw_mutants():
    yield from file_mutants(FILES)
    yield from recheck_mutants()
    yield from file_mutants(LATER_FILES)
    yield from guard_mutants({**FILES, **LATER_FILES})


def protocol_lines(path):
    """`(index, line, code)` for each line of `path` that is protocol code: not the unit tests
    and not a loom hook; `code` is the line without its comment."""
    lines = open(path).read().split("\n")
    in_tests = False
    skip_item = False
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]"):
            in_tests = True  # the unit tests, at the end of a file, are not the protocol
        if in_tests:
            continue
        # A loom hook (an item under `#[cfg(loom)]`) is not the protocol either: skipped
        # to the end of its item, a `}` at column 0, or its one line.
        if line.startswith("#[cfg(loom)]"):
            skip_item = True
            continue
        if skip_item:
            if skip_item is True and line.startswith("#["):
                continue  # more attributes of the same item
            if line.rstrip().endswith("{") and not line.startswith("}"):
                skip_item = "block"
            elif skip_item == "block" and line.startswith("}"):
                skip_item = False
            elif skip_item is True:
                skip_item = False
            continue
        yield i, line, line.split("//")[0]


def file_mutants(files):
    for path in files:
        if not os.path.exists(path):
            continue
        for i, line, code in protocol_lines(path):
            if FENCE.match(line):
                yield (path, i, "fence", "remove " + line.strip(), ("line", None))
                continue
            for m in ORDER.finditer(code):
                o = m.group(1)
                if "fence(" in code[:m.start()]:
                    continue
                targets = {"Acquire": ["Relaxed"], "Release": ["Relaxed"],
                           "AcqRel": ["Acquire", "Release"]}.get(o)
                if o == "SeqCst":
                    targets = [{"load": "Acquire", "store": "Release", "rmw": "AcqRel"}[
                        kind_of(code, m.start())]]
                for t in targets:
                    yield (path, i, "order", f"{o} -> {t} at col {m.start()}: {line.strip()}",
                           ("col", (m.start(), m.end(), f"Ordering::{t}")))


def recheck_mutants():
    for path, edits in RECHECKS.items():
        text = open(path).read()
        for old, new in edits:
            if text.count(old) != 1:
                print(f"recheck pattern not unique in {path}: {old!r}", file=sys.stderr)
                continue
            line = text[:text.index(old)].count("\n")
            # One line of each side: the output has one row per mutant.
            yield (path, line, "recheck",
                   f"{old.splitlines()[0].strip()} -> {new.splitlines()[0].strip()}",
                   ("text", (old, new)))


# Tokens of a line of Rust, as far as `guards_in` needs them.
TOKEN = re.compile(r"\s*(==|!=|<=|>=|=>|&&|\|\||::|[A-Za-z_][A-Za-z0-9_]*|\d[\w]*|\S)")
# Where an operand of a comparison ends, at its own depth of brackets.
STOPS = {",", ";", "{", "}", "&&", "||", "|", "=", "=>", "<", ">", "<=", ">=", "==", "!=",
         "if", "while", "let", "return", "match", "else", "in"}
OPEN, CLOSE = "([", ")]"
# Re-validations and generation tests: a call of one is a guard.
GUARD_CALLS = re.compile(r"\.(still_valid|unchanged|confirm|is_at|same_generation)\(")
CONSTANT = re.compile(r"^(\d\w*|[A-Z][A-Z0-9_]*|\w+::(MAX|MIN)|true|false)$")


def tokens(code):
    return [(m.group(1), m.start(1), m.end(1)) for m in TOKEN.finditer(code)
            if m.group(1)]


def operand(toks, i, step):
    """The index of the last token of the operand next to toks[i] in direction `step`."""
    depth, j, last = 0, i + step, None
    while 0 <= j < len(toks):
        t = toks[j][0]
        if t in (OPEN if step > 0 else CLOSE):
            depth += 1
        elif t in (CLOSE if step > 0 else OPEN):
            depth -= 1
            if depth < 0:
                break
        elif depth == 0 and t in STOPS:
            break
        last, j = j, j + step
    return last


def guards_in(code):
    """`(start, end, replacement)` for each guard of a line of code (see the module's notes)."""
    toks = tokens(code)
    found = []
    for i, (t, a, b) in enumerate(toks):
        if t not in ("==", "!="):
            continue
        lo, hi = operand(toks, i, -1), operand(toks, i, 1)
        if lo is None or hi is None:
            continue
        left, right = code[toks[lo][1]:a].strip(), code[b:toks[hi][2]].strip()
        loaded = ".load(" in left or ".load(" in right
        constant = CONSTANT.match(left) or CONSTANT.match(right)
        parity = re.search(r"& 1$", left) and right in ("0", "1")
        if parity:
            # Even passes (a sequence counter or a gate at rest), odd is a change under way.
            passed = (t == "==") == (right == "0")
        elif loaded and not constant:
            passed = t == "=="
        else:
            continue
        found.append((toks[lo][1], toks[hi][2], "true" if passed else "false"))
    for m in GUARD_CALLS.finditer(code):
        # The receiver: a path of names and fields (`token`, `self.params`, `place.gate`).
        start = m.start()
        while start > 0 and (code[start - 1].isalnum() or code[start - 1] in "_."):
            start -= 1
        if start == m.start() or code[:start].rstrip().endswith("fn"):
            continue  # a call chained from the line before, or a definition
        depth, end = 0, m.end() - 1
        for end in range(m.end() - 1, len(code)):
            depth += {"(": 1, ")": -1}.get(code[end], 0)
            if depth == 0:
                break
        if depth == 0:
            found.append((start, end + 1, "true"))
    return found


def guard_mutants(files):
    for path in files:
        if not os.path.exists(path):
            continue
        for i, line, code in protocol_lines(path):
            for a, b, rep in guards_in(code):
                yield (path, i, "guard", f"{line[a:b]} -> {rep}: {line.strip()}",
                       ("col", (a, b, rep)))


def apply(path, line, how):
    text = open(path).read()
    kind, arg = how
    if kind == "text":
        old, new = arg
        return text.replace(old, new, 1)
    lines = text.split("\n")
    if kind == "line":
        lines[line] = ""
    else:
        a, b, rep = arg
        lines[line] = lines[line][:a] + rep + lines[line][b:]
    return "\n".join(lines)


def run(cmd, env, timeout):
    try:
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return "timeout", ""


def test_binary(args, env, timeout):
    """Builds a test target and returns the path of its executable (or a verdict string)."""
    try:
        r = subprocess.run(args + ["--no-run", "--message-format=json"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    if r.returncode != 0:
        return None, "unbuilt"
    exe = [json.loads(l).get("executable") for l in r.stdout.decode().splitlines()
           if l.startswith("{") and '"executable"' in l]
    return [e for e in exe if e], None


def judge(path, timeout):
    env = dict(os.environ, RUSTFLAGS="--cfg loom", CARGO_TARGET_DIR="target/census-loom",
               CARGO_INCREMENTAL="1")
    exe, err = test_binary(["cargo", "test", "--release", "-q", "--features", "config", "--test", "loom"], env, timeout)
    if err:
        return err
    # One model family at a time, stopping at the first that fails: a killed mutant costs
    # the models up to its killer, not all of them.
    rc, out = run([exe[0], "--list"], env, timeout)
    names = [l.split(":")[0] for l in out.splitlines() if l.endswith(": test")]
    models = [n for n in names if any(n.startswith(m) for m in {**FILES, **LATER_FILES}[path])]
    # The slowest model last (about a minute, the rest take seconds in all).
    models.sort(key=lambda n: n in SLOW)
    for model in models:
        rc, out = run([exe[0], "--exact", model], env, timeout)
        if rc == "timeout":
            return f"TIMEOUT (loom: {model})"
        if rc != 0:
            return f"killed (loom: {model})"
    env2 = dict(os.environ, CARGO_TARGET_DIR="target/census", CARGO_INCREMENTAL="1")
    args = ["cargo", "test", "--release", "-q", "--features", "tokio,tower"]
    for t in CONC_RACE_TESTS if path.startswith("src/concurrency/") else RACE_TESTS:
        if os.path.exists(f"tests/{t}.rs"):
            args += ["--test", t]
    rc, out = run(args, env2, timeout * 3)
    if rc == "timeout":
        return "TIMEOUT (race tests)"
    if rc != 0:
        return "killed (race tests)"
    return "SURVIVED"


def latest(path):
    """The last row of each mutant (number, file, line) in the output: a retry overrides."""
    rows = {}
    if os.path.exists(path):
        for row in open(path):
            f = row.rstrip("\n").split("\t")
            if len(f) >= 7:
                rows[tuple(f[:3])] = f
    return rows


def summary(path):
    per = {}
    for f in latest(path).values():
        v = f[5]
        kind = ("killed" if v.startswith("killed") else
                "survived" if v == "SURVIVED" else "other")
        c = per.setdefault(f[1], {"tried": 0, "killed": 0, "survived": 0, "other": 0})
        c["tried"] += 1
        c[kind] += 1
    print("| file | tried | killed | survived | other |")
    print("|---|---:|---:|---:|---:|")
    tot = {"tried": 0, "killed": 0, "survived": 0, "other": 0}
    for path_, c in sorted(per.items()):
        print(f"| `{path_}` | {c['tried']} | {c['killed']} | {c['survived']} | {c['other']} |")
        for k in tot:
            tot[k] += c[k]
    print(f"| all | {tot['tried']} | {tot['killed']} | {tot['survived']} | {tot['other']} |")
    for f in sorted(latest(path).values(), key=lambda f: int(f[0])):
        if f[5] == "SURVIVED" or not f[5].startswith("killed"):
            print("\t".join([f[0], f[1] + ":" + f[2], f[3], f[4], f[5]]))


BEGIN, END = "<!-- census table: begin -->\n", "<!-- census table: end -->"


def page_rows(doc):
    """The rows of the table already in `doc`: {number: (class, the row as written)}."""
    page = open(doc).read()
    rows = {}
    for line in page[page.index(BEGIN) + len(BEGIN):page.index(END)].splitlines():
        m = re.match(r"^\| (\d+) \| `[^`]*` \| .* \| (\w+) \| ", line)
        if m:
            rows[int(m.group(1))] = (m.group(2), line)
    return rows


def table(path, doc=None):
    """The census as docs/model-checking.md shows it: the counts, then every mutant with its
    verdict and, for a survivor, its class and reason (tools/census_reasons.py). Exits 1 if a
    survivor has no reason. Written into a page, the rows of mutants the output has no verdict
    for (a run of one file or one operator) stay as the page had them."""
    from census_reasons import reason_of
    rows = sorted(latest(path).values(), key=lambda f: int(f[0]))
    kept = page_rows(doc) if doc else {}
    for f in rows:
        kept.pop(int(f[0]), None)
    counts, lines, unexplained = {}, [], 0
    for cls, _ in kept.values():
        counts[cls] = counts.get(cls, 0) + 1
    for f in rows:
        n, file, line, op, what, verdict = f[:6]
        if verdict.startswith("killed"):
            cls, why = "killed", verdict[len("killed ("):-1]
        else:
            r = reason_of(file, int(line), what)
            cls, why = r if r else ("UNEXPLAINED", verdict)
            unexplained += r is None
        counts[cls] = counts.get(cls, 0) + 1
        change = what.split(": ", 1)[0].replace(" at col", ", col")
        code = what.split(": ", 1)[-1].replace("|", "\\|")
        lines.append((int(n), f"| {n} | `{file.removeprefix('src/')}:{line}` | {change}: "
                      f"`{code}` | {cls} | {why} |"))
    lines += [(n, row) for n, (_, row) in kept.items()]
    total = len(lines)
    out = [f"{total} mutants: " + ", ".join(f"{c} {k}" for k, c in sorted(counts.items())),
           "", "| # | place | mutation | verdict | by what, or why |", "|---:|---|---|---|---|"]
    out += [row for _, row in sorted(lines)]
    text = "\n".join(out)
    if doc:
        # Between the markers of the census's section, in place.
        page = open(doc).read()
        i, j = page.index(BEGIN) + len(BEGIN), page.index(END)
        open(doc, "w").write(page[:i] + text + "\n" + page[j:])
    else:
        print(text)
    return 1 if unexplained else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="target/census.tsv")
    ap.add_argument("--only", action="append", help="the mutants of this file (repeatable)")
    ap.add_argument("--op", action="append", choices=["order", "fence", "recheck", "guard"],
                    help="the mutants of this operator (repeatable)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--retry", action="store_true",
                    help="run again the mutants whose last verdict is SURVIVED (after a new model)")
    ap.add_argument("--summary", action="store_true", help="per-file counts of the output")
    ap.add_argument("--table", action="store_true",
                    help="every mutant with its verdict or reason, as docs/model-checking.md")
    ap.add_argument("--write-doc", metavar="PAGE",
                    help="with --table: write it into PAGE between its census markers")
    a = ap.parse_args()
    if a.summary:
        return summary(a.out)
    if a.table:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        return table(a.out, a.write_doc)
    # Numbered over the whole census, so `--only` and `--retry` keep each mutant's number.
    ms = [(n, m) for n, m in enumerate(mutants())
          if (not a.only or m[0] in a.only) and (not a.op or m[2] in a.op)]
    if a.list:
        for n, (path, line, op, what, _) in ms:
            print(f"{n}\t{path}:{line + 1}\t{op}\t{what}")
        print(f"{len(ms)} mutants", file=sys.stderr)
        return
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    # Resumable: a mutant already in the output (same number and place) is not run again.
    last = latest(a.out)
    done = {k for k, v in last.items() if not (a.retry and v[5] == "SURVIVED")}
    out = open(a.out, "a")
    for n, (path, line, op, what, how) in ms:
        if (str(n), path, str(line + 1)) in done:
            continue
        original = open(path).read()
        mutated = apply(path, line, how)
        try:
            open(path, "w").write(mutated)
            t0 = time.time()
            verdict = judge(path, a.timeout)
        finally:
            open(path, "w").write(original)
        row = f"{n}\t{path}\t{line + 1}\t{op}\t{what}\t{verdict}\t{time.time() - t0:.0f}"
        print(row, flush=True)
        out.write(row + "\n")
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
