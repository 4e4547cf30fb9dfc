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

/// A reduced fraction `num/den`, `den > 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ratio {
    num: u128,
    den: u128,
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Ratio {
    pub const ZERO: Ratio = Ratio { num: 0, den: 1 };

    /// `num/den`, reduced. A zero denominator is treated as 1 (never produced
    /// by callers: capacities are positive).
    pub fn new(num: u128, den: u128) -> Self {
        let den = den.max(1);
        let g = gcd(num, den).max(1);
        Ratio {
            num: num / g,
            den: den / g,
        }
    }

    pub fn num(&self) -> u128 {
        self.num
    }

    pub fn den(&self) -> u128 {
        self.den
    }

    fn to_big(self) -> BigRatio<BigUint> {
        BigRatio::new(BigUint::from(self.num), BigUint::from(self.den))
    }
}

impl Ord for Ratio {
    fn cmp(&self, other: &Self) -> Ordering {
        match (
            self.num.checked_mul(other.den),
            other.num.checked_mul(self.den),
        ) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => self.to_big().cmp(&other.to_big()),
        }
    }
}

impl PartialOrd for Ratio {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

/// An exact sum of ratios.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RatioSum {
    Small(Ratio),
    Big(BigRatio<BigUint>),
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
                    *self = RatioSum::Big(s.to_big() + r.to_big());
                }
            }
            RatioSum::Big(b) => *b += r.to_big(),
        }
    }

    fn to_big(&self) -> BigRatio<BigUint> {
        match self {
            RatioSum::Small(s) => s.to_big(),
            RatioSum::Big(b) => b.clone(),
        }
    }
}

fn checked_add(a: Ratio, b: Ratio) -> Option<Ratio> {
    let g = gcd(a.den, b.den);
    let den = (a.den / g).checked_mul(b.den)?;
    let num = a
        .num
        .checked_mul(den / a.den)?
        .checked_add(b.num.checked_mul(den / b.den)?)?;
    Some(Ratio::new(num, den))
}

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
            RatioSum::Big(b) => write!(f, "{}/{}", b.numer(), b.denom()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
