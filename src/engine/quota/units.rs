//! The units of a quota: the time unit of its period and the work unit of a byte budget.

/// The unit of a quota's period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TimeUnit {
    Milli,
    Second,
    Minute,
    Hour,
    Day,
    /// Seven days.
    Week,
    /// Thirty days: a rolling window, not a calendar month.
    Month,
}

impl TimeUnit {
    /// The length of the period in ns.
    pub(super) const fn nanos(self) -> u64 {
        match self {
            TimeUnit::Milli => 1_000_000,
            TimeUnit::Second => 1_000_000_000,
            TimeUnit::Minute => 60_000_000_000,
            TimeUnit::Hour => 3_600_000_000_000,
            TimeUnit::Day => 86_400_000_000_000,
            TimeUnit::Week => 7 * 86_400_000_000_000,
            TimeUnit::Month => 30 * 86_400_000_000_000,
        }
    }

    /// The short form, which `Display` writes.
    pub(super) const fn symbol(self) -> &'static str {
        match self {
            TimeUnit::Milli => "ms",
            TimeUnit::Second => "s",
            TimeUnit::Minute => "min",
            TimeUnit::Hour => "h",
            TimeUnit::Day => "d",
            TimeUnit::Week => "w",
            TimeUnit::Month => "month",
        }
    }
}

/// A quota's period: a whole number (`span`, at least 1) of a time unit, as written
/// (`"1/90ms"` is 90 ms, `"5/min"` one minute). At most [`MAX_PERIOD_NS`] long, so the
/// arithmetic of a byte budget (`P·8` ns) stays within 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Period {
    span: u64,
    unit: TimeUnit,
}

/// The longest period: 2^59 ns, about 18 years.
pub(crate) const MAX_PERIOD_NS: u64 = 1 << 59;

impl Period {
    /// One `unit`.
    pub(super) const fn of(unit: TimeUnit) -> Self {
        Self { span: 1, unit }
    }

    /// `span` units, if at least one and at most [`MAX_PERIOD_NS`] long.
    pub(super) fn new(span: u64, unit: TimeUnit) -> Option<Self> {
        let ns = span.checked_mul(unit.nanos())?;
        (span >= 1 && ns <= MAX_PERIOD_NS).then_some(Self { span, unit })
    }

    /// The length in ns (checked at construction: it fits).
    pub(super) const fn nanos(self) -> u64 {
        self.span.saturating_mul(self.unit.nanos())
    }

    /// The period written as its largest exact unit with a span: 90 ms as `(90, ms)`, two
    /// days as `(2, d)`; `None` unless it is a whole number of milliseconds. Days are the
    /// largest unit it picks (seven days stay `7d`, not `w`), so the string form of
    /// [`Quota::with_interval`](super::Quota::with_interval) is what it was before weeks and
    /// months were added.
    pub(super) fn from_nanos(ns: u64) -> Option<Self> {
        [
            TimeUnit::Day,
            TimeUnit::Hour,
            TimeUnit::Minute,
            TimeUnit::Second,
            TimeUnit::Milli,
        ]
        .into_iter()
        .find(|u| ns % u.nanos() == 0)
        .and_then(|u| Self::new(ns / u.nanos(), u))
    }
}

impl core::fmt::Display for Period {
    /// `ms`, `s`, `min`, `h`, `d`, `w`, `month`; with the span before the unit when it is not 1 (`90ms`).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.span != 1 {
            write!(f, "{}", self.span)?;
        }
        f.write_str(self.unit.symbol())
    }
}

/// The work unit of a byte budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum WorkUnit {
    Byte,
    KiloByte,
    MegaByte,
    GigaByte,
    KibiByte,
    MebiByte,
    GibiByte,
    Bit,
    KiloBit,
    MegaBit,
    GigaBit,
}

impl WorkUnit {
    /// How many bits one unit is.
    pub(super) const fn bits(self) -> u64 {
        match self {
            WorkUnit::Byte => 8,
            WorkUnit::KiloByte => 8_000,
            WorkUnit::MegaByte => 8_000_000,
            WorkUnit::GigaByte => 8_000_000_000,
            WorkUnit::KibiByte => 8 << 10,
            WorkUnit::MebiByte => 8 << 20,
            WorkUnit::GibiByte => 8 << 30,
            WorkUnit::Bit => 1,
            WorkUnit::KiloBit => 1_000,
            WorkUnit::MegaBit => 1_000_000,
            WorkUnit::GigaBit => 1_000_000_000,
        }
    }

    pub(super) const fn symbol(self) -> &'static str {
        match self {
            WorkUnit::Byte => "B",
            WorkUnit::KiloByte => "kB",
            WorkUnit::MegaByte => "MB",
            WorkUnit::GigaByte => "GB",
            WorkUnit::KibiByte => "KiB",
            WorkUnit::MebiByte => "MiB",
            WorkUnit::GibiByte => "GiB",
            WorkUnit::Bit => "bit",
            WorkUnit::KiloBit => "kbit",
            WorkUnit::MegaBit => "Mbit",
            WorkUnit::GigaBit => "Gbit",
        }
    }

    /// The units of this unit's family from kilo up, largest first: a burst on a rate in
    /// this unit is written in the largest of them that is exact (see [`burst_unit`]).
    const fn family(self) -> &'static [WorkUnit] {
        match self {
            WorkUnit::KiloByte | WorkUnit::MegaByte | WorkUnit::GigaByte => {
                &[WorkUnit::GigaByte, WorkUnit::MegaByte, WorkUnit::KiloByte]
            }
            WorkUnit::KibiByte | WorkUnit::MebiByte | WorkUnit::GibiByte => {
                &[WorkUnit::GibiByte, WorkUnit::MebiByte, WorkUnit::KibiByte]
            }
            WorkUnit::Bit | WorkUnit::KiloBit | WorkUnit::MegaBit | WorkUnit::GigaBit => {
                &[WorkUnit::GigaBit, WorkUnit::MegaBit, WorkUnit::KiloBit]
            }
            WorkUnit::Byte => &[],
        }
    }

    /// `n` units in bytes, rounded down (u128: `u64::MAX` GiB is about 2^94 bytes).
    pub(super) fn floor_bytes(self, n: u64) -> u128 {
        u128::from(n) * u128::from(self.bits()) / 8
    }
}

/// The byte units from kilo up, largest first.
const BYTE_UNITS: [WorkUnit; 6] = [
    WorkUnit::GibiByte,
    WorkUnit::GigaByte,
    WorkUnit::MebiByte,
    WorkUnit::MegaByte,
    WorkUnit::KibiByte,
    WorkUnit::KiloByte,
];

/// The unit a burst of `bits` (a whole number of bytes) is written in on a rate in `rate`:
/// the largest unit of the rate's family that is exact, else the largest exact byte unit,
/// else `B`.
pub(super) fn burst_unit(bits: u128, rate: WorkUnit) -> WorkUnit {
    let exact = |unit: &&WorkUnit| bits % u128::from(unit.bits()) == 0;
    rate.family()
        .iter()
        .find(exact)
        .or_else(|| BYTE_UNITS.iter().find(exact))
        .copied()
        .unwrap_or(WorkUnit::Byte)
}
