//! Exact non-negative rationals for utilization scores.
//!
//! Utilizations are `(usage + request) / capacity` with 64-bit terms, so a
//! single ratio compares exactly in `u128`. Sums of ratios with unrelated
//! denominators can outgrow `u128`; they then move to a big rational. The
//! common case never allocates.

use num_bigint::BigUint;
use num_rational::Ratio as BigRatio;
use std::cmp::Ordering;
use std::fmt;

/// A fraction `num/den`, `den > 0`. Kept unreduced on the hot path
/// (comparison is by cross-multiplication); reduced when shown.
#[derive(Debug, Clone, Copy)]
pub struct Ratio {
    num: u128,
    den: u128,
}

/// Binary GCD: shifts and subtractions only (u128 division is slow).
pub fn gcd(mut a: u128, mut b: u128) -> u128 {
    if a == 0 {
        return b;
    }
    if b == 0 {
        return a;
    }
    let shift = (a | b).trailing_zeros();
    a >>= a.trailing_zeros();
    loop {
        b >>= b.trailing_zeros();
        if a > b {
            std::mem::swap(&mut a, &mut b);
        }
        b -= a;
        if b == 0 {
            return a << shift;
        }
    }
}

impl Ratio {
    pub const ZERO: Ratio = Ratio { num: 0, den: 1 };

    /// `num/den`. A zero denominator is treated as 1 (never produced by
    /// callers: capacities are positive).
    pub fn new(num: u128, den: u128) -> Self {
        Ratio {
            num,
            den: den.max(1),
        }
    }

    /// The same value in lowest terms.
    pub fn reduced(self) -> Self {
        let g = gcd(self.num, self.den).max(1);
        Ratio {
            num: self.num / g,
            den: self.den / g,
        }
    }

    pub fn num(&self) -> u128 {
        self.reduced().num
    }

    pub fn den(&self) -> u128 {
        self.reduced().den
    }

    fn to_big(self) -> BigRatio<BigUint> {
        BigRatio::new(BigUint::from(self.num), BigUint::from(self.den))
    }
}

impl PartialEq for Ratio {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ratio {}

/// Both fit in 64 bits, so their product fits in 128.
#[inline]
fn small(a: u128, b: u128) -> bool {
    (a | b) >> 64 == 0
}

impl Ord for Ratio {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        if small(self.num | self.den, other.num | other.den) {
            // Single widening multiplies.
            let l = (self.num as u64 as u128) * (other.den as u64 as u128);
            let r = (other.num as u64 as u128) * (self.den as u64 as u128);
            return l.cmp(&r);
        }
        // Exact 256-bit products: no allocation, whatever the terms.
        mul_wide(self.num, other.den).cmp(&mul_wide(other.num, self.den))
    }
}

/// `a * b` as `(high, low)` 128-bit halves: compares as the product does.
#[inline]
fn mul_wide(a: u128, b: u128) -> (u128, u128) {
    const MASK: u128 = u64::MAX as u128;
    let (a_hi, a_lo) = (a >> 64, a & MASK);
    let (b_hi, b_lo) = (b >> 64, b & MASK);
    let ll = a_lo * b_lo;
    let lh = a_lo * b_hi;
    let hl = a_hi * b_lo;
    let hh = a_hi * b_hi;
    // The middle column: carries into the high half.
    let mid = (ll >> 64) + (lh & MASK) + (hl & MASK);
    let low = (ll & MASK) | (mid << 64);
    let high = hh + (lh >> 64) + (hl >> 64) + (mid >> 64);
    (high, low)
}

impl PartialOrd for Ratio {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.reduced();
        write!(f, "{}/{}", r.num, r.den)
    }
}

/// An exact sum of ratios.
#[derive(Debug, Clone)]
pub enum RatioSum {
    Small(Ratio),
    Big(Box<BigRatio<BigUint>>),
}

impl Default for RatioSum {
    fn default() -> Self {
        RatioSum::Small(Ratio::ZERO)
    }
}

impl RatioSum {
    pub fn add(&mut self, r: Ratio) {
        match self {
            RatioSum::Small(s) => {
                if let Some(sum) = checked_add(*s, r) {
                    *s = sum;
                } else {
                    *self = RatioSum::Big(Box::new(s.to_big() + r.to_big()));
                }
            }
            RatioSum::Big(b) => **b += r.to_big(),
        }
    }

    fn to_big(&self) -> BigRatio<BigUint> {
        match self {
            RatioSum::Small(s) => s.to_big(),
            RatioSum::Big(b) => (**b).clone(),
        }
    }
}

fn checked_add(a: Ratio, b: Ratio) -> Option<Ratio> {
    if a.num == 0 {
        return Some(b);
    }
    if a.den == b.den {
        return Some(Ratio::new(a.num.checked_add(b.num)?, a.den));
    }
    if small(a.num | a.den, b.num | b.den) {
        // Cross-multiply with single widening multiplies; no gcd, no division.
        // Products of small denominators stay small; reduce once they do not.
        let den = (a.den as u64 as u128) * (b.den as u64 as u128);
        let num = ((a.num as u64 as u128) * (b.den as u64 as u128))
            .checked_add((b.num as u64 as u128) * (a.den as u64 as u128))?;
        let sum = Ratio::new(num, den);
        return Some(if small(num, den) { sum } else { sum.reduced() });
    }
    let g = gcd(a.den, b.den);
    let (fa, fb) = (b.den / g, a.den / g);
    let den = a.den.checked_mul(fa)?;
    let num = a.num.checked_mul(fa)?.checked_add(b.num.checked_mul(fb)?)?;
    Some(Ratio::new(num, den).reduced())
}

impl PartialEq for RatioSum {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for RatioSum {}

impl Ord for RatioSum {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (RatioSum::Small(a), RatioSum::Small(b)) => a.cmp(b),
            _ => self.to_big().cmp(&other.to_big()),
        }
    }
}

impl PartialOrd for RatioSum {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for RatioSum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RatioSum::Small(s) => s.fmt(f),
            // num_rational keeps big ratios in lowest terms.
            RatioSum::Big(b) => write!(f, "{}/{}", b.numer(), b.denom()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_gcd() {
        for (a, b, g) in [
            (0, 5, 5),
            (5, 0, 5),
            (12, 18, 6),
            (17, 5, 1),
            (1 << 100, 3 << 90, 1 << 90),
            (u128::MAX, u128::MAX, u128::MAX),
        ] {
            assert_eq!(gcd(a, b), g, "gcd({a}, {b})");
        }
    }

    #[test]
    fn wide_products_match_big_integers() {
        let xs = [
            0u128,
            1,
            3,
            u64::MAX as u128,
            (u64::MAX as u128) + 1,
            1 << 100,
            (1 << 127) + 12345,
            u128::MAX - 1,
            u128::MAX,
        ];
        for a in xs {
            for b in xs {
                let (hi, lo) = mul_wide(a, b);
                let got = (BigUint::from(hi) << 128u32) + BigUint::from(lo);
                assert_eq!(got, BigUint::from(a) * BigUint::from(b), "{a} * {b}");
            }
        }
    }

    #[test]
    fn reduces_and_orders() {
        assert_eq!(Ratio::new(6, 8).to_string(), "3/4");
        assert_eq!(Ratio::new(0, 5).to_string(), "0/1");
        assert!(Ratio::new(2, 3) > Ratio::new(3, 5));
        assert_eq!(Ratio::new(2, 4).cmp(&Ratio::new(1, 2)), Ordering::Equal);
        // Products overflow u128: the big path decides.
        let a = Ratio::new(u128::MAX - 1, u128::MAX);
        let b = Ratio::new(u128::MAX - 2, u128::MAX - 1);
        assert!(a > b);
    }

    #[test]
    fn sums_match_a_big_rational_reference() {
        let dens: [u128; 7] = [1, 3, 8, 1000, 1 << 36, 999_999_937, (1 << 63) - 25];
        for (i, d1) in dens.iter().enumerate() {
            for d2 in &dens[i..] {
                for d3 in &dens {
                    let parts = [
                        Ratio::new(d1 / 2, *d1),
                        Ratio::new(d2 - 1, *d2),
                        Ratio::new(*d3, *d3),
                    ];
                    let mut s = RatioSum::default();
                    let mut reference = BigRatio::new(BigUint::from(0u8), BigUint::from(1u8));
                    for p in parts {
                        s.add(p);
                        reference += p.to_big();
                    }
                    assert_eq!(s.to_big(), reference, "{d1} {d2} {d3}");
                    assert_eq!(
                        s.to_string(),
                        format!("{}/{}", reference.numer(), reference.denom())
                    );
                }
            }
        }
    }

    #[test]
    fn sums_stay_exact_past_u128() {
        let mut s = RatioSum::default();
        s.add(Ratio::new(3, 4));
        s.add(Ratio::new(1, 2));
        assert_eq!(s.to_string(), "5/4");
        let primes: [u128; 4] = [
            18446744073709551557,
            18446744073709551533,
            18446744073709551521,
            18446744073709551437,
        ];
        let mut big = RatioSum::default();
        for p in primes {
            big.add(Ratio::new(1, p));
        }
        assert!(matches!(big, RatioSum::Big(_)));
        let mut other = RatioSum::default();
        for p in primes {
            other.add(Ratio::new(1, p));
        }
        assert_eq!(big.cmp(&other), Ordering::Equal);
        let mut smaller = RatioSum::default();
        smaller.add(Ratio::new(1, primes[0]));
        assert!(smaller < big);
        assert!(RatioSum::Small(Ratio::new(1, 1)) > big);
    }
}
