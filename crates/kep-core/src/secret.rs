//! Secret hashing, constant-time comparison and random identifiers.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore as _;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// Lowercase hexadecimal SHA-256 of the UTF-8 text, the hash every seed computes.
pub fn sha256_hex(text: &str) -> String {
    hex::encode(sha256(text))
}

/// SHA-256 of the UTF-8 text, as raw bytes (a map key for hashed tokens).
pub fn sha256(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// Compares two secrets (or their hashes) without leaking where they differ.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// An opaque random string of `bytes` random bytes, URL-safe base64 without padding, that
/// never starts with `-`: one in 64 did, and a command line took it for an option where it
/// was an option's value (`kep live provision --admin-secret -xY…` failed).
pub fn random_token(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    loop {
        rand::rng().fill_bytes(&mut buf);
        // The first character is the first byte's top six bits, and `-` is the 62nd.
        if buf.first().is_none_or(|b| b >> 2 != 62) {
            return URL_SAFE_NO_PAD.encode(buf);
        }
    }
}

/// A 256-bit secret or token; 128 bits is the contract's floor.
pub fn new_secret() -> String {
    random_token(32)
}

/// The fewest and most characters of a secret the operator gives (CONTRACT §0, "Declared
/// resources"): a generated one is longer than the fewest.
pub const GIVEN_SECRET_CHARS: std::ops::RangeInclusive<usize> = 8..=256;

/// `given`, or a new secret where none is given; a given one must be 8 to 256 printable
/// ASCII characters (space to `~`), else why not.
pub fn given_or_new(given: Option<String>) -> Result<String, String> {
    let Some(secret) = given else {
        return Ok(new_secret());
    };
    if !GIVEN_SECRET_CHARS.contains(&secret.chars().count()) {
        return Err(format!(
            "{} to {} characters, not {}",
            GIVEN_SECRET_CHARS.start(),
            GIVEN_SECRET_CHARS.end(),
            secret.chars().count()
        ));
    }
    if let Some(c) = secret.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(format!("printable ASCII characters only, not {c:?}"));
    }
    Ok(secret)
}

/// A random version-4 UUID in its canonical text form.
pub fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_secret_is_8_to_256_printable_characters() {
        assert_eq!(given_or_new(None).unwrap().len(), new_secret().len());
        for ok in ["a".repeat(8), "a b~!@#$%".into(), "x".repeat(256)] {
            assert_eq!(given_or_new(Some(ok.clone())), Ok(ok));
        }
        assert_eq!(
            given_or_new(Some("a".repeat(7))),
            Err("8 to 256 characters, not 7".into())
        );
        assert_eq!(
            given_or_new(Some("a".repeat(257))),
            Err("8 to 256 characters, not 257".into())
        );
        for bad in ["secret\tkey", "비밀번호비밀번호", "secret\u{7f}key"] {
            assert!(
                given_or_new(Some(bad.into()))
                    .unwrap_err()
                    .starts_with("printable ASCII"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn sha256_hex_matches_sha256sum() {
        // printf 'svc:secret' | sha256sum
        assert_eq!(
            sha256_hex("svc:secret"),
            "8a545b172eecdb6eb0a1e4a64f8b985e661a4fb90796ea72f4092051dbed26d6"
        );
        // printf '' | sha256sum
        assert_eq!(
            sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq("abc", "abc"));
        assert!(!constant_time_eq("abc", "abd"));
        assert!(!constant_time_eq("abc", "abcd"));
    }

    #[test]
    fn tokens_never_start_with_a_dash() {
        // Without the redraw, 1 − (63/64)^4000 of such runs would see one.
        assert!((0..4000).all(|_| !random_token(4).starts_with('-')));
        assert_eq!(random_token(0), "");
    }

    #[test]
    fn tokens_are_long_enough_and_distinct() {
        let a = new_secret();
        assert!(a.len() >= 22, "128 bits in base64 is 22 characters");
        assert_ne!(a, new_secret());
        let u = new_uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }
}
