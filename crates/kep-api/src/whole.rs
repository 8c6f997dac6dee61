//! Integers as JSON Schema counts them (an integer is a number with no fraction): `2969.0` is
//! the integer 2969 in a path segment or a query as it is in a body, which kep reads so too.

use serde::Deserializer;
use serde::de::{self, Visitor};

/// An `i64` from an integer, a whole float, or text of either.
pub fn integer<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    d.deserialize_any(Whole)
}

/// [`integer`] of a field that may be absent (with `#[serde(default)]`).
pub fn optional_integer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    integer(d).map(Some)
}

struct Whole;

impl Visitor<'_> for Whole {
    type Value = i64;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an integer")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| E::custom(format!("{v} is out of range")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<i64, E> {
        // Within ±2^53 a float holds its integer exactly.
        const EXACT: f64 = 9_007_199_254_740_992.0;
        if v.fract() == 0.0 && v.abs() <= EXACT {
            #[expect(
                clippy::cast_possible_truncation,
                reason = "a whole float within ±2^53"
            )]
            return Ok(v as i64);
        }
        Err(E::custom(format!("{v} is not an integer")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<i64, E> {
        if let Ok(n) = v.parse::<i64>() {
            return Ok(n);
        }
        match v.parse::<f64>() {
            Ok(f) if f.is_finite() => self.visit_f64(f),
            _ => Err(E::custom(format!("{v:?} is not an integer"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Id(#[serde(deserialize_with = "super::integer")] i64);

    #[test]
    fn a_whole_number_is_an_integer_in_any_form() {
        for text in ["2969", "2969.0", "2.969e3", "\"2969\"", "\"2969.0\""] {
            assert_eq!(serde_json::from_str::<Id>(text).unwrap().0, 2969, "{text}");
        }
        for text in ["2969.5", "\"x\"", "\"NaN\"", "1e300", "true"] {
            assert!(serde_json::from_str::<Id>(text).is_err(), "{text}");
        }
    }
}
