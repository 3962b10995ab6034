//! A `/metrics` scrape, rendered by the Prometheus exporter: a limits handle with a fault
//! detector, a shadow policy and a success rate, some traffic, then the exposition text a
//! scrape would return (the `tollgate_*` series that moved, and the detector's mode).
//!
//! Run with `cargo run --features metrics,config --example metrics`.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use tollgate::limits::{Limits, LimitsHandle};
use tollgate::metrics::MetricsRegistry;
use tollgate::safety::{FaultDetector, SuccessRate};
use tollgate::{Check, ManualClock, PassReason, Verdict};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The exporter is the application's choice: here the Prometheus text format.
    let recorder = PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|_| "a recorder is already installed")?;

    let clock = ManualClock::new();
    let detector = FaultDetector::builder().clock(clock.clone()).build();
    let limits = Arc::new(
        LimitsHandle::builder(Limits::from_path("examples/limits/valid.toml")?)
            .clock(clock.clone())
            .detector(detector.clone())
            .build(),
    );
    let slo = Arc::new(
        SuccessRate::builder()
            .tiers(["free", "paid"])
            .clock(clock.clone())
            .build()?,
    );
    let registry = MetricsRegistry::new();
    registry.register_limits("gateway", &limits)?;
    registry.register_success_rate("customers", &slo)?;

    // 30 requests from one free customer (burst 20): 20 allowed, 10 denied; 60 paid searches
    // on a shadow policy (burst 50): all pass through, 10 of them shadow-denied.
    let serve = |tier: &str,
                 category: &str,
                 route: &str,
                 key: &str|
     -> Result<(), Box<dyn std::error::Error>> {
        let verdict = limits
            .check(tier, category, route, key, Check::cost(1))?
            .verdict();
        let status = if let Verdict::Deny(_) = verdict {
            429
        } else {
            200
        };
        slo.record(tier, status);
        Ok(())
    };
    for _ in 0..30 {
        serve("free", "other", "/v1/items", "customer-1")?;
    }
    for _ in 0..60 {
        serve("paid", "search", "/v1/search", "customer-2")?;
    }
    // An operator stands the limiter aside for two minutes: the next checks pass through.
    detector.force_pass_through(PassReason::Forced, Duration::from_secs(120));
    for _ in 0..5 {
        serve("free", "other", "/v1/items", "customer-1")?;
    }
    // A minute later (the success rate reports complete windows), a scrape.
    clock.advance(Duration::from_secs(61));

    // GET /metrics: publish, then render.
    registry.publish();
    let text = prometheus.render();
    for line in text.lines() {
        let moved = !line.starts_with('#') && !line.ends_with(" 0") && !line.ends_with(" NaN");
        let wanted = line.contains(r#"policy="free""#)
            || line.contains(r#"policy="paid-search""#)
            || line.contains("tollgate_detector_mode")
            || line.contains("tollgate_success_rate")
            || line.contains("tollgate_responses_total");
        if wanted && (moved || line.contains("detector_mode")) {
            println!("{line}");
        }
    }
    Ok(())
}
