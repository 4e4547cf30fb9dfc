//! Exact Kubernetes quantity arithmetic.
//!
//! `k8s-openapi` carries quantities as strings ([`Quantity`]); this module
//! parses every form the API server accepts (`2`, `1k`, `1Ki`, `1000m`,
//! `1e3`, `1.5`, `-1`, ...) into an exact value and decides whether it is a
//! non-negative integer. No floating point is involved anywhere.
//!
//! Integer amounts are `u64` bounded by [`MAX_AMOUNT`] (Kubernetes itself
//! stores quantities in an `int64`); anything larger is rejected as absurd
//! instead of wrapping or saturating.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::fmt;

/// The largest amount a resource may have: `2^63 - 1`, the Kubernetes int64 bound.
pub const MAX_AMOUNT: u64 = i64::MAX as u64;

/// Why a quantity string is not an acceptable integer amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Malformed,
    #[error("must be greater than or equal to 0")]
    Negative,
    #[error("must be an integer")]
    Fractional,
    #[error("must be less than or equal to {MAX_AMOUNT}")]
    TooLarge,
}

/// A parsed quantity: `(-1)^negative * mantissa * 10^exp10 * 1024^pow1024`,
/// with `mantissa` free of trailing decimal zeros (they are folded into `exp10`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedQuantity {
    pub negative: bool,
    pub mantissa: u128,
    pub exp10: i32,
    pub pow1024: u32,
}

/// Parses a quantity string exactly.
pub fn parse(s: &str) -> Result<ParsedQuantity, QuantityError> {
    let s = s.trim();
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut negative = false;
    if let Some(&c) = bytes.first()
        && (c == b'+' || c == b'-')
    {
        negative = c == b'-';
        i = 1;
    }
    // Number: digits with at most one '.', at least one digit.
    let num_start = i;
    let mut seen_dot = false;
    let mut digits = 0usize;
    while i < bytes.len() {
        match bytes[i] {
            b'0'..=b'9' => digits += 1,
            b'.' if !seen_dot => seen_dot = true,
            _ => break,
        }
        i += 1;
    }
    if digits == 0 {
        return Err(QuantityError::Malformed);
    }
    let number = &s[num_start..i];
    let suffix = &s[i..];
    let (mut exp10, pow1024): (i64, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 1),
        "Mi" => (0, 2),
        "Gi" => (0, 3),
        "Ti" => (0, 4),
        "Pi" => (0, 5),
        "Ei" => (0, 6),
        _ => {
            let rest = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))
                .ok_or(QuantityError::Malformed)?;
            let (sign, digits) = match rest.as_bytes().first() {
                Some(b'-') => (-1i64, &rest[1..]),
                Some(b'+') => (1, &rest[1..]),
                _ => (1, rest),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 6
            {
                return Err(QuantityError::Malformed);
            }
            let e: i64 = digits.parse().map_err(|_| QuantityError::Malformed)?;
            (sign * e, 0)
        }
    };
    // Mantissa from the significant digits; leading zeros skipped, trailing
    // zeros folded into the exponent so huge-but-round values stay exact.
    let mut mantissa: u128 = 0;
    let mut pending_zeros: i64 = 0;
    let mut after_dot = false;
    let mut frac_digits: i64 = 0;
    for b in number.bytes() {
        if b == b'.' {
            after_dot = true;
            continue;
        }
        if after_dot {
            frac_digits += 1;
        }
        let d = u128::from(b - b'0');
        if d == 0 {
            if mantissa != 0 {
                pending_zeros += 1;
            }
            continue;
        }
        for _ in 0..pending_zeros {
            mantissa = mantissa.checked_mul(10).ok_or(QuantityError::TooLarge)?;
        }
        pending_zeros = 0;
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(d))
            .ok_or(QuantityError::TooLarge)?;
    }
    exp10 += pending_zeros - frac_digits;
    if mantissa == 0 {
        return Ok(ParsedQuantity {
            negative: false,
            mantissa: 0,
            exp10: 0,
            pow1024: 0,
        });
    }
    let exp10 = i32::try_from(exp10).map_err(|_| QuantityError::Malformed)?;
    Ok(ParsedQuantity {
        negative,
        mantissa,
        exp10,
        pow1024,
    })
}

impl ParsedQuantity {
    /// The value as a non-negative integer amount, or why it is not one.
    ///
    /// A negative value is reported as [`QuantityError::Negative`] even when
    /// it is also fractional; a fractional value is reported before its size.
    pub fn to_amount(&self) -> Result<u64, QuantityError> {
        if self.mantissa == 0 {
            return Ok(0);
        }
        if self.negative {
            return Err(QuantityError::Negative);
        }
        let mut m = self.mantissa;
        if self.exp10 < 0 {
            // Divisible by 10^n = 2^n * 5^n?  mantissa * 2^(10k) must carry 2^n, mantissa 5^n.
            let n = self.exp10.unsigned_abs();
            let twos_available = m.trailing_zeros() + 10 * self.pow1024;
            let mut fives = 0u32;
            let mut t = m;
            while fives < n && t.is_multiple_of(5) {
                t /= 5;
                fives += 1;
            }
            if fives < n || twos_available < n {
                return Err(QuantityError::Fractional);
            }
            // Exact division: remove 5^n from the mantissa and 2^n from mantissa/binary power.
            m = t;
            let from_mantissa = n.min(m.trailing_zeros());
            m >>= from_mantissa;
            let rest_twos = n - from_mantissa;
            // Remaining twos come out of the 1024 powers: multiply by 2^(10k - rest).
            let shift = 10 * self.pow1024 - rest_twos;
            m = shl_checked(m, shift)?;
        } else {
            let p = 10u128
                .checked_pow(self.exp10 as u32)
                .ok_or(QuantityError::TooLarge)?;
            m = m.checked_mul(p).ok_or(QuantityError::TooLarge)?;
            m = shl_checked(m, 10 * self.pow1024)?;
        }
        if m > u128::from(MAX_AMOUNT) {
            return Err(QuantityError::TooLarge);
        }
        Ok(m as u64)
    }
}

impl ParsedQuantity {
    /// The value times `10^scale`, rounded up to an integer, as Kubernetes'
    /// `Value()` (`scale` 0) and `MilliValue()` (`scale` 3) do for
    /// resource accounting: `"0.5"` cpu is 500 milli, `"1.5"` bytes is 2.
    pub fn to_scaled_ceil(&self, scale: u32) -> Result<u64, QuantityError> {
        if self.mantissa == 0 {
            return Ok(0);
        }
        if self.negative {
            return Err(QuantityError::Negative);
        }
        let m = shl_checked(self.mantissa, 10 * self.pow1024.min(12))?;
        let e = self.exp10.saturating_add(scale as i32);
        let v = if e >= 0 {
            let p = 10u128
                .checked_pow(e as u32)
                .ok_or(QuantityError::TooLarge)?;
            m.checked_mul(p).ok_or(QuantityError::TooLarge)?
        } else {
            match 10u128.checked_pow(e.unsigned_abs()) {
                Some(p) => m.div_ceil(p),
                // 10^39 and beyond exceed any u128 mantissa: a positive value below 1.
                None => 1,
            }
        };
        if v > u128::from(MAX_AMOUNT) {
            return Err(QuantityError::TooLarge);
        }
        Ok(v as u64)
    }

    /// The largest integer not above a positive value, saturated at
    /// [`MAX_AMOUNT`]: a capacity compared with integer sums exactly as
    /// Kubernetes' `Quantity.Cmp` compares it (`used + request <= 1.5` is
    /// `used + request <= 1` for integers). `None` for a value that is not
    /// positive.
    pub fn floor_positive(&self) -> Option<u64> {
        if self.negative || self.mantissa == 0 {
            return None;
        }
        match self.to_amount() {
            Ok(a) => Some(a),
            Err(QuantityError::TooLarge) => Some(MAX_AMOUNT),
            Err(QuantityError::Fractional) => match self.to_scaled_ceil(0) {
                Ok(c) => Some(c.saturating_sub(1)),
                Err(_) => Some(MAX_AMOUNT),
            },
            Err(_) => None,
        }
    }

    /// The exact product of two quantities (used for DRA multipliers).
    pub fn checked_mul(&self, other: &ParsedQuantity) -> Result<ParsedQuantity, QuantityError> {
        Ok(ParsedQuantity {
            negative: self.negative != other.negative,
            mantissa: self
                .mantissa
                .checked_mul(other.mantissa)
                .ok_or(QuantityError::TooLarge)?,
            exp10: self.exp10.saturating_add(other.exp10),
            pow1024: self.pow1024.saturating_add(other.pow1024).min(12),
        })
    }
}

/// A quantity in milli-units rounded up (`MilliValue()`), e.g. cpu `"250m"` → 250.
#[cfg(test)]
pub fn parse_milli(s: &str) -> Result<u64, QuantityError> {
    parse(s)?.to_scaled_ceil(3)
}

/// A quantity rounded up to an integer (`Value()`), e.g. memory `"1.5"` → 2.
#[cfg(test)]
pub fn parse_ceil(s: &str) -> Result<u64, QuantityError> {
    parse(s)?.to_scaled_ceil(0)
}

fn shl_checked(m: u128, shift: u32) -> Result<u128, QuantityError> {
    if shift == 0 {
        return Ok(m);
    }
    if shift >= 128 || m.leading_zeros() < shift {
        return Err(QuantityError::TooLarge);
    }
    Ok(m << shift)
}

/// Parses a quantity string into a non-negative integer amount.
pub fn parse_amount(s: &str) -> Result<u64, QuantityError> {
    parse(s)?.to_amount()
}

/// [`parse_amount`] for a `k8s-openapi` [`Quantity`].
pub fn amount_of(q: &Quantity) -> Result<u64, QuantityError> {
    parse_amount(&q.0)
}

/// Checked addition of amounts within [`MAX_AMOUNT`].
pub fn add(a: u64, b: u64) -> Result<u64, QuantityError> {
    a.checked_add(b)
        .filter(|v| *v <= MAX_AMOUNT)
        .ok_or(QuantityError::TooLarge)
}

impl fmt::Display for ParsedQuantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}e{}*1024^{}",
            if self.negative { "-" } else { "" },
            self.mantissa,
            self.exp10,
            self.pow1024
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use QuantityError::*;

    #[test]
    fn scaled_ceil_matches_milli_value_and_value() {
        for (s, milli, plain) in [
            ("1", 1000, 1),
            ("250m", 250, 1),
            ("0.5", 500, 1),
            ("0.1m", 1, 1),
            ("1Ki", 1_024_000, 1024),
            ("1.5", 1500, 2),
            ("0", 0, 0),
            ("2e-3", 2, 1),
        ] {
            assert_eq!(parse_milli(s), Ok(milli), "{s}");
            assert_eq!(parse_ceil(s), Ok(plain), "{s}");
        }
        assert_eq!(parse_milli("-1"), Err(Negative));
        assert_eq!(parse_milli("1e30"), Err(TooLarge));
        let two = parse("2").unwrap();
        let gi = parse("4Gi").unwrap();
        assert_eq!(gi.checked_mul(&two).unwrap().to_scaled_ceil(0), Ok(8 << 30));
        assert_eq!(
            parse("0.5")
                .unwrap()
                .checked_mul(&parse("3").unwrap())
                .unwrap()
                .to_scaled_ceil(3),
            Ok(1500)
        );
    }

    #[test]
    fn integer_forms() {
        for (s, v) in [
            ("0", 0),
            ("2", 2),
            ("+2", 2),
            ("-0", 0),
            ("0.0", 0),
            ("1k", 1000),
            ("1Ki", 1024),
            ("1000m", 1),
            ("1e3", 1000),
            ("1E3", 1000),
            ("1e+3", 1000),
            ("1000e-3", 1),
            ("1.5k", 1500),
            ("1.5Ki", 1536),
            ("0.5Ki", 512),
            ("0.0009765625Ki", 1),
            ("2000000000n", 2),
            ("3000000u", 3),
            ("1M", 1_000_000),
            ("1G", 1_000_000_000),
            ("1T", 1_000_000_000_000),
            ("1P", 1_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000),
            ("1Mi", 1 << 20),
            ("1Gi", 1 << 30),
            ("1Ti", 1 << 40),
            ("1Pi", 1 << 50),
            ("7Ei", 7 << 60),
            ("007", 7),
            ("10.000", 10),
            (".5k", 500),
            ("5.", 5),
            ("9223372036854775807", MAX_AMOUNT),
            (
                "100000000000000000000000000000000000000000e-30",
                100_000_000_000,
            ),
        ] {
            assert_eq!(parse_amount(s), Ok(v), "{s}");
        }
    }

    #[test]
    fn rejected_forms() {
        for (s, e) in [
            ("1.5", Fractional),
            ("500m", Fractional),
            ("1n", Fractional),
            ("0.1Ki", Fractional),
            ("1e-1", Fractional),
            ("-1", Negative),
            ("-500m", Negative),
            ("-1Ki", Negative),
            ("", Malformed),
            ("abc", Malformed),
            ("1x", Malformed),
            ("1KI", Malformed),
            ("1ki", Malformed),
            (".", Malformed),
            ("1..2", Malformed),
            ("1e", Malformed),
            ("1e1.5", Malformed),
            ("--1", Malformed),
            ("1 k", Malformed),
            ("1e9999999", Malformed),
            ("9223372036854775808", TooLarge),
            ("8Ei", TooLarge),
            ("1e19", TooLarge),
            ("1e300", TooLarge),
            ("99999999999999999999999999999999999999999999", TooLarge),
        ] {
            assert_eq!(parse_amount(s), Err(e.clone()), "{s}");
        }
    }

    #[test]
    fn tiny_fractions_are_fractional_not_overflow() {
        assert_eq!(
            parse_amount("0.000000000000000000000000000000000000000000000001"),
            Err(Fractional)
        );
        assert_eq!(parse_amount("1e-60"), Err(Fractional));
        assert_eq!(parse_amount("1e-60Ki"), Err(Malformed));
    }

    #[test]
    fn add_is_checked() {
        assert_eq!(add(1, 2), Ok(3));
        assert_eq!(add(MAX_AMOUNT, 1), Err(TooLarge));
        assert_eq!(add(u64::MAX, 1), Err(TooLarge));
    }
}
