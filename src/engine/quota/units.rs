//! The units of a quota: the time unit of its period and the work unit of a byte budget.

/// The unit of a quota's period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TimeUnit {
    Milli,
    Second,
    Minute,
    Hour,
    Day,
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
        }
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
