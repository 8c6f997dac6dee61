//! Reading a request's JSON into a typed value the way its OpenAPI schema (JSON Schema)
//! reads it: a struct only from an object, never from an array, and an integer also when
//! it is spelled as a float with no fraction (`3.0`).

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, Visitor};
use serde_json::{Error, Value};

/// `T` from `value`, tracking the path of a failure (`targets[1].streamId`). Every number
/// with no fraction is first rewritten as the integer it is ([`whole_numbers`]).
pub fn deserialize<T: de::DeserializeOwned>(
    mut value: Value,
) -> Result<T, serde_path_to_error::Error<Error>> {
    whole_numbers(&mut value);
    from_value(&value)
}

/// `T` from `value` as it is (its numbers already rewritten where that is wanted), a
/// struct only from an object, tracking the path of a failure.
pub fn from_value<T: de::DeserializeOwned>(
    value: &Value,
) -> Result<T, serde_path_to_error::Error<Error>> {
    serde_path_to_error::deserialize(Strict(value))
}

/// Rewrites every number with no fraction (`3.0`, `1e3`) as the integer it is, so that a
/// client whose JSON writer spells integers as floats is read as JSON Schema reads it. Only
/// numbers a double holds exactly (at most 2^53 in size) are rewritten.
pub fn whole_numbers(value: &mut Value) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() <= EXACT
            {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        Value::Object(fields) => fields.values_mut().for_each(whole_numbers),
        _ => {}
    }
}

/// A `serde_json::Value` as a deserializer that, unlike the value's own, refuses an array
/// where a struct is expected (serde's derived structs also take their fields in order from
/// a sequence, so `[null, null]` would pass for `{}`).
struct Strict<'a>(&'a Value);

fn unexpected(v: &Value) -> de::Unexpected<'_> {
    match v {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(_) => de::Unexpected::Other("number"),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

impl<'de> de::Deserializer<'de> for Strict<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => n.deserialize_any(visitor),
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(Seq(items.iter())),
            Value::Object(fields) => visitor.visit_map(Map {
                fields: fields.iter(),
                value: None,
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(_) => self.deserialize_any(visitor),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        // An externally tagged enum: the value's own reading (a unit variant from a string,
        // another from a one-key object).
        self.0.deserialize_enum(name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

struct Seq<'a>(std::slice::Iter<'a, Value>);

impl<'de> de::SeqAccess<'de> for Seq<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0
            .next()
            .map(|v| seed.deserialize(Strict(v)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Map<'a> {
    fields: serde_json::map::Iter<'a>,
    value: Option<&'a Value>,
}

impl<'de> de::MapAccess<'de> for Map<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.fields.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let value = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("a map value asked for before its key"))?;
        seed.deserialize(Strict(value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.fields.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        a: Option<u32>,
        b: Option<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        One,
        Two,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        inner: Option<Inner>,
        list: Vec<Inner>,
        kind: Kind,
        map: std::collections::BTreeMap<String, u16>,
        any: Option<Value>,
    }

    fn read(v: Value) -> Result<Outer, String> {
        deserialize::<Outer>(v).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    #[test]
    fn reads_what_the_schema_admits() {
        let got = read(
            json!({"inner": {"a": 3.0}, "list": [{"b": "x"}], "kind": "two",
                              "map": {"k": 8080.0}, "any": [1.5, {"x": 2.0}]}),
        )
        .unwrap();
        assert_eq!(
            got.inner,
            Some(Inner {
                a: Some(3),
                b: None
            })
        );
        assert_eq!(
            got.list,
            vec![Inner {
                a: None,
                b: Some("x".into())
            }]
        );
        assert_eq!(got.kind, Kind::Two);
        assert_eq!(got.map["k"], 8080);
        assert_eq!(got.any, Some(json!([1.5, {"x": 2}])));
        let got = read(json!({"inner": null, "list": [], "kind": "one", "map": {}})).unwrap();
        assert_eq!(got.inner, None);
    }

    #[test]
    fn a_large_whole_float_is_read_exactly_as_the_integer_it_is() {
        // Below 2^53 but with more digits than the fast path reads exactly: the default
        // parser landed an ulp off (…247.25), a fraction.
        let value: serde_json::Value = serde_json::from_str("2251799813685247.0").unwrap();
        assert_eq!(super::deserialize::<i64>(value).unwrap(), 2251799813685247);
    }

    #[test]
    fn refuses_an_array_for_a_struct_and_a_fraction_for_an_integer() {
        let base = || json!({"list": [], "kind": "one", "map": {}});
        let mut v = base();
        v["inner"] = json!([null, null]);
        assert!(
            read(v)
                .unwrap_err()
                .starts_with("inner: invalid type: sequence")
        );
        let mut v = base();
        v["list"] = json!([[1, "x"]]);
        assert!(
            read(v)
                .unwrap_err()
                .starts_with("list[0]: invalid type: sequence")
        );
        assert!(deserialize::<Inner>(json!([1, "x"])).is_err());
        let mut v = base();
        v["inner"] = json!({"a": 2.5});
        assert!(
            read(v)
                .unwrap_err()
                .starts_with("inner.a: invalid type: floating point")
        );
        let mut v = base();
        v["kind"] = json!("three");
        assert!(read(v).unwrap_err().starts_with("kind: unknown variant"));
    }
}
