//! Unit tests of the backoff delays, the jitter windows and the generator behind them.

use super::*;

#[test]
fn splitmix64_matches_the_reference_vector() {
    // rand_xoshiro's `reference` test, produced with Vigna's splitmix64.c.
    let rng = SplitMix64::new(1_477_776_061_723_855_037);
    let expected = [
        1_985_237_415_132_408_290,
        2_979_275_885_539_914_483,
        13_511_426_838_097_143_398,
        8_488_337_342_461_049_707,
        15_141_737_807_933_549_159,
    ];
    for e in expected {
        assert_eq!(rng.next_u64(), e);
    }
}

#[test]
fn uniform_covers_both_ends_and_stays_inside() {
    let rng = SplitMix64::new(5);
    let draws: Vec<u128> = (0..2_000).map(|_| rng.uniform(10, 13)).collect();
    assert!(draws.iter().all(|d| (10..=13).contains(d)));
    for v in 10..=13 {
        assert!(draws.contains(&v), "{v} never drawn");
    }
    assert_eq!(rng.uniform(7, 7), 7);
}

#[test]
fn shl_and_nanos_saturate() {
    assert_eq!(shl_saturating(1, 127), 1 << 127);
    assert_eq!(shl_saturating(1, 128), u128::MAX);
    assert_eq!(shl_saturating(3, 127), u128::MAX);
    assert_eq!(shl_saturating(5, u32::MAX), u128::MAX);
    assert_eq!(shl_saturating(0, u32::MAX), 0);
    assert_eq!(from_nanos_saturating(u128::MAX), Duration::MAX);
    assert_eq!(
        from_nanos_saturating(Duration::MAX.as_nanos()),
        Duration::MAX
    );
    assert_eq!(
        from_nanos_saturating(1_500_000_001),
        Duration::new(1, 500_000_001)
    );
}
