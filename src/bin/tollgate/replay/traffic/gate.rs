//! `--fail-if-newly-denied N|P%`: the CI gate. With `--against`, the run exits 3 when NEW
//! newly denies more customers than N, or than P % of the customers in the log.

use serde::Serialize;

/// How many newly denied customers the gate lets pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Threshold {
    /// At most this many customers.
    Customers(u64),
    /// At most this share of the log's customers, in percent (0 to 100).
    Percent(f64),
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Threshold::Customers(n) => write!(f, "{n}"),
            Threshold::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// Parses `N` (a whole number of customers) or `P%` (a percentage of 0 to 100).
pub(crate) fn parse_threshold(text: &str) -> Result<Threshold, String> {
    let t = text.trim();
    let bad = || {
        let shown: String = text.chars().take(40).collect();
        format!(
            "invalid threshold {shown:?}: write a number of customers (5) or a share of the \
             log's customers (0.5%)"
        )
    };
    match t.strip_suffix('%') {
        Some(p) => match p.trim().parse::<f64>() {
            Ok(p) if p.is_finite() && (0.0..=100.0).contains(&p) => Ok(Threshold::Percent(p)),
            _ => Err(bad()),
        },
        None => t
            .parse::<u64>()
            .map(Threshold::Customers)
            .map_err(|_| bad()),
    }
}

/// The gate's verdict.
#[derive(Debug, Serialize)]
pub(super) struct Gate {
    /// As given: `5` or `0.5%`.
    pub(super) threshold: String,
    /// The most newly denied customers that pass.
    pub(super) limit: u64,
    pub(super) newly_denied: u64,
    /// Distinct keys in the log (a lower bound past `customers_at_least`).
    pub(super) customers: u64,
    pub(super) customers_at_least: bool,
    pub(super) passed: bool,
}

impl Gate {
    pub(super) fn judge(t: Threshold, newly_denied: u64, customers: u64, capped: bool) -> Gate {
        let limit = match t {
            Threshold::Customers(n) => n,
            // Rounded down: "at most 0.5 %" of 1,000 customers lets 5 pass, not 6.
            Threshold::Percent(p) => (customers as f64 * p / 100.0).floor() as u64,
        };
        Gate {
            threshold: t.to_string(),
            limit,
            newly_denied,
            customers,
            customers_at_least: capped,
            passed: newly_denied <= limit,
        }
    }

    /// The line for people.
    pub(super) fn human(&self) -> String {
        let of = if self.threshold.ends_with('%') {
            format!(
                " ({} of {}{} customers)",
                self.threshold,
                if self.customers_at_least {
                    "at least "
                } else {
                    ""
                },
                self.customers
            )
        } else {
            String::new()
        };
        if self.passed {
            format!(
                "gate: passed: {} customers newly denied, at most {}{of} allowed by --fail-if-newly-denied",
                self.newly_denied, self.limit
            )
        } else {
            format!(
                "gate: FAILED (exit 3): {} customers newly denied, more than the {}{of} allowed by --fail-if-newly-denied",
                self.newly_denied, self.limit
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_in_both_forms() {
        assert_eq!(parse_threshold("5"), Ok(Threshold::Customers(5)));
        assert_eq!(parse_threshold("0.5%"), Ok(Threshold::Percent(0.5)));
        assert_eq!(parse_threshold("100 %"), Ok(Threshold::Percent(100.0)));
        for bad in ["", "-1", "5.5", "101%", "NaN%", "x%", "%"] {
            assert!(parse_threshold(bad).is_err(), "{bad}");
        }
        let long = parse_threshold(&"9".repeat(500)).err().unwrap_or_default();
        assert!(long.len() < 200, "{long}");
    }

    #[test]
    fn a_share_is_rounded_down() {
        let g = Gate::judge(Threshold::Percent(0.5), 6, 1_000, false);
        assert_eq!((g.limit, g.passed), (5, false));
        let g = Gate::judge(Threshold::Customers(6), 6, 1_000, false);
        assert!(g.passed);
    }
}
