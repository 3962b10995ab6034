//! `tollgate replay` (the incidents) read as a person reads it: every figure explained where
//! it first appears, no empty rows, prevention not called detection, 003's cost in its table,
//! the run ending on the next step, and nothing pointing outside the repository.
#![cfg(feature = "cli")]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

fn tollgate(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs");
    (
        output.status.code(),
        String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    )
}

/// The shortened replay of the three incidents, run once: its stdout and its output directory.
fn replay() -> &'static (String, PathBuf) {
    static RUN: OnceLock<(String, PathBuf)> = OnceLock::new();
    RUN.get_or_init(|| {
        // In the target's own scratch directory, one per test binary: no run leaves files
        // behind elsewhere, and a rerun starts from an empty directory.
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replay-charts");
        let _ = std::fs::remove_dir_all(&dir);
        let out = dir.display().to_string();
        let (code, stdout, stderr) = tollgate(&["replay", "--short", "--out", &out]);
        assert_eq!(code, Some(0), "{stderr}");
        (stdout, dir)
    })
}

/// The block of incident `id` in the output, up to its verdict line.
fn block(id: &str) -> String {
    let out = &replay().0;
    let start = out
        .find(&format!("== incident {id}"))
        .unwrap_or_else(|| panic!("no incident {id}:\n{out}"));
    let rest = &out[start..];
    let end = rest.find("\nverdict: ").expect("a verdict");
    rest[..end].to_owned()
}

/// The table line of `figure` for `side` in `block`: `  figure   side:  cell` or the
/// continuation `   side:  cell` after it.
fn cell(block: &str, figure: &str, side: &str) -> String {
    let lines: Vec<&str> = block.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with(figure))
        .unwrap_or_else(|| panic!("no row {figure:?}:\n{block}"));
    lines[at..at + 2]
        .iter()
        .find_map(|l| {
            l.split_once(&format!("{side}:"))
                .map(|x| x.1.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no {side} cell for {figure:?}:\n{block}"))
}

#[test]
fn help_and_output_never_point_outside_the_repository() {
    let (stdout, dir) = replay();
    let mut texts = vec![("replay stdout".to_owned(), stdout.clone())];
    for args in [
        &["--help"][..],
        &["replay", "--help"],
        &["help", "replay"],
        &["replay", "-h"],
    ] {
        let (code, out, err) = tollgate(args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        texts.push((format!("tollgate {}", args.join(" ")), out));
    }
    for entry in std::fs::read_dir(dir).expect("the output directory") {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("a text file");
        texts.push((path.display().to_string(), text));
    }
    assert!(texts.len() >= 9, "{}", texts.len());
    for (what, text) in texts {
        for bad in ["shared/", "incidents/", "postmortem"] {
            assert!(!text.contains(bad), "{what} mentions {bad:?}:\n{text}");
        }
        // Nor the name of an incident file (`000_8f5fe530ac655859.txt`, as printed before).
        assert!(
            incident_file(&text).is_none(),
            "{what}: {:?}",
            incident_file(&text)
        );
    }
}

/// The first `NNN_` followed by 16 hex digits in `text`.
fn incident_file(text: &str) -> Option<&str> {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(20)).find_map(|i| {
        let w = &b[i..i + 20];
        (w[..3].iter().all(u8::is_ascii_digit)
            && w[3] == b'_'
            && w[4..].iter().all(u8::is_ascii_hexdigit))
        .then(|| &text[i..i + 20])
    })
}

#[test]
fn an_incident_file_name_would_be_caught() {
    assert_eq!(
        incident_file("(000_8f5fe530ac655859.txt; seed 13)"),
        Some("000_8f5fe530ac655859")
    );
    assert_eq!(incident_file("seed 13, 10000 customers"), None);
}

#[test]
fn every_figure_is_explained_where_it_first_appears() {
    let out = &replay().0;
    for (figure, meaning) in [
        (
            "wrongful-denial minutes",
            "(minutes in which more than 1 % of the requests",
        ),
        (
            "retry share of load",
            "(retries over all attempts: the load retrying adds)",
        ),
        (
            "customer requests failed",
            "(not served, or served after the client gave up)",
        ),
        (
            "time to detect",
            "(from the fault to the side's own first signal",
        ),
        (
            "heartbeats delivered",
            "(on time; a partition that misses 4 in a row",
        ),
        (
            "leader elections",
            "(each refuses the partition's writes for 5 s)",
        ),
    ] {
        let first = out.find(&format!("  {figure} ")).expect(figure);
        let explained = out
            .find(meaning)
            .unwrap_or_else(|| panic!("{figure} unexplained:\n{out}"));
        // Right under the figure's rows: within its block, before the next figure.
        let between = &out[first..explained];
        assert!(between.lines().count() <= 3, "{figure}: {between:?}");
        // Once: a later table does not repeat it.
        assert_eq!(out.matches(meaning).count(), 1, "{figure}");
    }
}

#[test]
fn no_row_is_empty() {
    let out = &replay().0;
    assert!(!out.contains("n/a"), "{out}");
    // 000 and 001 have no heartbeats: no such row.
    for id in ["000", "001"] {
        assert!(!block(id).contains("heartbeats"), "{}", block(id));
    }
}

#[test]
fn the_003_prevention_is_not_called_detection_and_its_cost_is_in_the_table() {
    let b = block("003");
    let toll = cell(&b, "time to detect", "tollgate");
    assert!(toll.starts_with("prevented, nothing to detect"), "{toll}");
    assert!(!toll.contains("0.0 s"), "{toll}");
    assert!(cell(&b, "time to detect", "naive").contains("alert"), "{b}");
    // The price of holding recovery back, per side, in the table; and the elections.
    let gb = |side: &str| -> u64 {
        let c = cell(&b, "recovery backlog left", side);
        c.strip_suffix(" GB")
            .unwrap_or_else(|| panic!("{c}"))
            .replace(',', "")
            .parse()
            .expect("GB")
    };
    assert!(gb("tollgate") > gb("naive"), "{b}");
    let elections = |side: &str| -> u64 {
        cell(&b, "leader elections", side)
            .replace(',', "")
            .parse()
            .expect("a count")
    };
    assert!(
        elections("naive") > 1_000 && elections("tollgate") == 0,
        "{b}"
    );
    assert!(
        cell(&b, "heartbeats delivered", "tollgate") == "100.0 %",
        "{b}"
    );
}

#[test]
fn the_run_ends_with_the_next_step() {
    let out = &replay().0;
    assert_eq!(
        out.lines().filter(|l| l.starts_with("verdict: ")).count(),
        3
    );
    let tail: Vec<&str> = out.trim_end().lines().rev().take(4).collect();
    let tail = tail.join("\n");
    assert!(tail.contains("next: replay your own access log"), "{tail}");
    assert!(tail.contains("tollgate replay --traffic "), "{tail}");
    assert!(
        tail.contains("--limits ") && tail.contains("--against "),
        "{tail}"
    );
    // The charts line comes before it, not after.
    let charts = out.rfind("charts: ").expect("the charts line");
    assert!(charts < out.rfind("next: ").expect("next"));
}

#[test]
fn the_index_wraps_long_lines_instead_of_cutting_them() {
    let index = std::fs::read_to_string(replay().1.join("index.html")).expect("index.html");
    let style = index
        .split("<style>")
        .nth(1)
        .and_then(|s| s.split("</style>").next())
        .expect("a style");
    assert!(style.contains("white-space:pre-wrap"), "{style}");
    assert!(style.contains("overflow-wrap:anywhere"), "{style}");
    assert!(style.contains("img{max-width:100%"), "{style}");
    // The figures are explained there too.
    assert!(index.contains("<small>minutes in which more than 1 %"));
}

/// Numbers of attribute `name` on each line of `svg` starting with `start`.
fn attrs(svg: &str, start: &str, name: &str) -> Vec<f64> {
    svg.lines()
        .filter(|l| l.starts_with(start))
        .filter_map(|l| {
            let at = l.find(&format!(" {name}=\""))? + name.len() + 3;
            l[at..].split('"').next()?.parse().ok()
        })
        .collect()
}

#[test]
fn the_charts_as_written_read_right() {
    let dir = &replay().1;
    let svg = |id: &str| {
        std::fs::read_to_string(dir.join(format!("incident-{id}.svg"))).expect("a chart")
    };
    for id in ["000", "001", "003"] {
        let s = svg(id);
        // Time ticks on round clock times: every tick label HH:MM on a multiple of 5 min.
        let ticks: Vec<&str> = s
            .split("text-anchor=\"middle\">")
            .skip(1)
            .filter_map(|t| t.split('<').next())
            .collect();
        assert!(ticks.len() >= 4, "{id}: {ticks:?}");
        for t in &ticks {
            let minute: u32 = t[3..5].parse().expect("HH:MM");
            assert_eq!(minute % 5, 0, "{id}: tick {t}");
        }
        // No line drawn on a frame: every point at least 5 px inside it.
        let tops = attrs(&s, "<rect x=", "y");
        let heights = attrs(&s, "<rect x=", "height");
        assert_eq!(tops.len(), 2, "{id}");
        for line in s.lines().filter(|l| l.starts_with("<path")) {
            let d = line.split("d=\"").nth(1).and_then(|d| d.split('"').next());
            for y in d
                .unwrap_or("")
                .split(' ')
                .filter_map(|p| p.split(',').nth(1))
            {
                let y: f64 = y.parse().expect("y");
                assert!(
                    tops.iter()
                        .zip(&heights)
                        .all(|(t, h)| (y - t).abs() >= 5.0 && (y - t - h).abs() >= 5.0),
                    "{id}: a line at y {y} lies on a frame"
                );
            }
        }
    }
    // 001's dip of a few percent gets an axis narrowed to it, and says so.
    assert!(svg("001").contains("zoomed to the data"));
    // 003 carries its headline figures.
    let s = svg("003");
    assert!(s.contains(">heartbeats delivered: <") && s.contains(">leader elections: <"));
}
