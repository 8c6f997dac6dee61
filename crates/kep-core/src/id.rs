//! Typed ids: each id of the documents is its own type, so a client id can't be passed
//! where a service id is wanted. They are strings on the wire (serde) and in the database
//! (sqlx), unchanged.

/// Declares a string id: `kep_core::string_id!(ServiceId, "A live service's id.");`
#[macro_export]
macro_rules! string_id {
    ($name:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(
            Debug,
            Clone,
            PartialEq,
            Eq,
            PartialOrd,
            Ord,
            Hash,
            serde::Serialize,
            serde::Deserialize,
            sqlx::Type,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl ::std::convert::From<String> for $name {
            fn from(id: String) -> Self {
                $name(id)
            }
        }

        impl ::std::convert::From<&str> for $name {
            fn from(id: &str) -> Self {
                $name(id.to_owned())
            }
        }

        impl ::std::convert::AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl ::std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl ::std::cmp::PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }
    };
}

#[cfg(test)]
mod tests {
    #![allow(dead_code, reason = "the test uses part of what the macro declares")]

    string_id!(ThingId, "A test id.");

    #[test]
    fn an_id_is_a_plain_string_on_the_wire_and_a_key_by_str() {
        let id = ThingId::from("abc");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"abc\"");
        let back: ThingId = serde_json::from_str("\"abc\"").unwrap();
        assert_eq!(back, id);
        let map = std::collections::HashMap::from([(id.clone(), 1)]);
        assert_eq!(map.get("abc"), Some(&1));
        assert_eq!(id.to_string(), "abc");
        assert!(id == *"abc");
    }
}
