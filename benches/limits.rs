//! Limits documents at scale: loading and validating a ~2 MB document of 25,000
//! policies in each format, and the diff of two such documents, as `tollgate diff` and a
//! reload do them. See `benches/README.md` for the figures.
//!
//! ```text
//! cargo bench --features config --bench limits
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate::limits::{Format, Limits};

/// The policies of the document: 25,000 make a ~2 MB TOML document.
const POLICIES: usize = 25_000;

/// A document of `n` policies with all-different matchers over four tiers and categories
/// (a tier and a route prefix, a category and an exact route, or a route prefix), each
/// policy's quota `quota` except every tenth, which gets `changed`; policies whose number is
/// a multiple of `renamed` are named `q…` instead of `p…`.
fn document(n: usize, quota: &str, changed: &str, renamed: usize, revision: u64) -> String {
    let mut text = format!(
        "schema = 1\nrevision = {revision}\ntiers = [\"t0\", \"t1\", \"t2\", \"t3\"]\n\
         categories = [\"c0\", \"c1\", \"c2\", \"c3\"]\n"
    );
    for i in 0..n {
        let matcher = match i % 3 {
            0 => format!("tier = \"t{}\", route = \"/r{i}/*\"", i % 4),
            1 => format!("category = \"c{}\", route = \"/r{i}\"", i % 4),
            _ => format!("route = \"/r{i}/*\""),
        };
        let name = if i % renamed == 0 { 'q' } else { 'p' };
        let quota = if i % 10 == 0 { changed } else { quota };
        text.push_str(&format!(
            "\n[[policies]]\nname = \"{name}{i}\"\nmatch = {{ {matcher} }}\nquota = \"{quota}\"\n"
        ));
    }
    text
}

fn limits(c: &mut Criterion) {
    let old_text = document(POLICIES, "100/s", "100/s", usize::MAX, 1);
    let new_text = document(POLICIES, "100/s", "50/s", 100, 2);
    let load = |text: &str, format| Limits::parse(text, format).expect("a valid document");
    let (old, new) = (load(&old_text, Format::Toml), load(&new_text, Format::Toml));
    eprintln!(
        "limits: {POLICIES} policies, {} KB of TOML; the diff changes {} policies and moves {} groups of requests",
        new_text.len() >> 10,
        Limits::diff(&old, &new).changed().len(),
        Limits::diff(&old, &new).moves().len(),
    );
    let mut group = c.benchmark_group("limits");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    group.bench_function("load+validate+diff 2MB TOML", |b| {
        b.iter(|| {
            let old = load(black_box(&old_text), Format::Toml);
            let new = load(black_box(&new_text), Format::Toml);
            Limits::diff(&old, &new)
        })
    });
    for format in [Format::Toml, Format::Yaml, Format::Json] {
        let text = new.to_format(format);
        group.bench_function(
            format!("load+validate {format} ({} KB)", text.len() >> 10),
            |b| b.iter(|| load(black_box(&text), format)),
        );
    }
    group.bench_function("diff", |b| {
        b.iter(|| Limits::diff(black_box(&old), black_box(&new)))
    });
    group.bench_function("check_transition", |b| {
        b.iter(|| Limits::check_transition(black_box(&old), black_box(&new), 10.0))
    });
    group.finish();
}

criterion_group!(benches, limits);
criterion_main!(benches);
