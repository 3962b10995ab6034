//! The detector's `tracing` events (feature `tracing`).

use super::{AlertKind, FaultEvent};

/// The `tracing` event for a detector transition or alert (target `tollgate::detector`): a
/// trip and every alert at WARN, a recovery at INFO, with the figures behind it.
pub(super) fn trace(event: &FaultEvent) {
    let (what, f) = match event {
        FaultEvent::Tripped(f) => ("tripped", f),
        FaultEvent::Recovered(f) => ("recovered", f),
        FaultEvent::Alert(_, f) => ("alert", f),
    };
    let baseline = f.baseline.unwrap_or(f64::NAN);
    macro_rules! emit {
        ($level:ident, $kind:expr, $msg:literal) => {
            tracing::$level!(
                target: "tollgate::detector",
                event = what,
                kind = $kind,
                measure = f.measure,
                baseline,
                allowed_per_sec = f.allowed_per_sec,
                samples = f.samples,
                window_secs = f.window.as_secs_f64(),
                at_secs = f.at.as_secs_f64(),
                $msg
            )
        };
    }
    match event {
        FaultEvent::Tripped(_) => emit!(
            warn,
            "deny_anomaly",
            "fault detector tripped: passing traffic through"
        ),
        FaultEvent::Recovered(_) => {
            emit!(info, "none", "fault detector recovered: enforcing again")
        }
        FaultEvent::Alert(kind, _) => emit!(warn, alert_name(*kind), "fault detector alert"),
    }
}

/// The alert's name in events and metrics: snake case, fixed.
fn alert_name(kind: AlertKind) -> &'static str {
    match kind {
        AlertKind::ColdStart => "cold_start",
        AlertKind::Drift => "drift",
        AlertKind::CoolDown => "cool_down",
        AlertKind::OverflowCell => "overflow_cell",
        AlertKind::PassThroughExhausted => "pass_through_exhausted",
    }
}
