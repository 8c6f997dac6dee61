//! The document's rules for single fields of deployments and endpoints: names,
//! descriptions, variables and probes.

use std::collections::BTreeMap;

use crate::ServingError;
use crate::runtime::process::OWNER_VAR;
use kep_api::serving::Probe;

const DESCRIPTION_MAX: usize = 1024;
const ENV_MAX: usize = 50;
const ENV_VALUE_MAX: usize = 1024;
pub(in crate::control) const MODELS_PER_ENDPOINT: usize = 2;
/// Probe timings: at least this often, so a typo cannot spin a probe loop.
const PROBE_MIN_S: f64 = 0.05;

/// Variables the runtime sets on an instance after the deployment's own: one a deployment
/// gave would be replaced without a word.
const RUNTIME_ENV: &[(&str, &str)] = &[
    ("PORT", "PORT is set by the runtime to the instance's port"),
    (
        OWNER_VAR,
        "KEP_INSTANCE_OWNER is set by the runtime to the kep that started the instance",
    ),
];

/// A deployment (or endpoint) name: 2 to 63 of a-z, 0-9 and `-`, starting with a letter
/// and ending with a letter or digit.
pub(in crate::control) fn check_name(field: &str, name: &str) -> Result<(), ServingError> {
    let bad = |why: &str| Err(ServingError::field(field, format!("{field} {why}")));
    let len = name.chars().count();
    if !(2..=63).contains(&len) {
        return bad("must be 2 to 63 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return bad("may hold only lowercase a-z, digits 0-9 and hyphens");
    }
    if !name.as_bytes()[0].is_ascii_lowercase() {
        return bad("must start with a lowercase letter");
    }
    if name.ends_with('-') {
        return bad("must end with a lowercase letter or digit");
    }
    Ok(())
}

pub(in crate::control) fn check_description(field: &str, d: &str) -> Result<(), ServingError> {
    if d.chars().count() > DESCRIPTION_MAX {
        return Err(ServingError::field(
            field,
            format!("{field} is over {DESCRIPTION_MAX} characters"),
        ));
    }
    Ok(())
}

/// At most 50 variables; a name of 2 to 63 of A-Z a-z 0-9 `_`, not starting with a digit;
/// a value of at most 1,024 characters. `PORT` is the runtime's.
pub(in crate::control) fn check_env(env: &BTreeMap<String, String>) -> Result<(), ServingError> {
    if env.len() > ENV_MAX {
        return Err(ServingError::field(
            "env",
            format!("at most {ENV_MAX} environment variables per deployment"),
        ));
    }
    for (name, value) in env {
        let field = format!("env.{name}");
        let len = name.chars().count();
        if !(2..=63).contains(&len) {
            return Err(ServingError::field(
                field,
                "a variable name must be 2 to 63 characters",
            ));
        }
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(ServingError::field(
                field,
                "a variable name may hold only A-Z, a-z, 0-9 and _",
            ));
        }
        if name.as_bytes()[0].is_ascii_digit() {
            return Err(ServingError::field(
                field,
                "a variable name must not start with a digit",
            ));
        }
        if let Some((_, why)) = RUNTIME_ENV.iter().find(|(set, _)| name == set) {
            return Err(ServingError::field(field, *why));
        }
        // No process environment can hold a NUL: the instance would never start.
        if value.contains('\0') {
            return Err(ServingError::field(
                field,
                "a variable value cannot hold a NUL character",
            ));
        }
        if value.chars().count() > ENV_VALUE_MAX {
            return Err(ServingError::field(
                field,
                format!("a variable value is over {ENV_VALUE_MAX} characters"),
            ));
        }
    }
    Ok(())
}

pub(in crate::control) fn check_probe(field: &str, p: &Probe) -> Result<(), ServingError> {
    match (&p.http, &p.tcp) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(ServingError::field(
                field,
                "a probe is exactly one of `http` and `tcp`",
            ));
        }
        (Some(h), None) if !h.path.starts_with('/') => {
            return Err(ServingError::field(
                format!("{field}.http.path"),
                "the probe path must start with /",
            ));
        }
        _ => {}
    }
    for (name, v) in [
        ("interval_s", p.interval_s),
        ("timeout_s", p.timeout_s),
        ("initial_delay_s", p.initial_delay_s),
    ] {
        if let Some(v) = v {
            let min = if name == "initial_delay_s" {
                0.0
            } else {
                PROBE_MIN_S
            };
            if !v.is_finite() || !(min..=3600.0).contains(&v) {
                return Err(ServingError::field(
                    format!("{field}.{name}"),
                    format!("{name} must be between {min} and 3600 seconds"),
                ));
            }
        }
    }
    if p.failure_threshold == Some(0) {
        return Err(ServingError::field(
            format!("{field}.failure_threshold"),
            "failure_threshold must be at least 1",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_at_and_past_their_bounds() {
        assert!(check_name("name", "ab").is_ok());
        assert!(check_name("name", "a").is_err());
        assert!(check_name("name", &"a".repeat(63)).is_ok());
        assert!(check_name("name", &"a".repeat(64)).is_err());
        assert!(check_name("name", "model-v2").is_ok());
        for bad in ["2ab", "-ab", "ab-", "aB", "a b", "a_b", "ab.c", "가나"] {
            assert!(check_name("name", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_rules() {
        let env = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert!(check_env(&env(&[("AB", ""), ("_x", "1"), ("a9", "v")])).is_ok());
        assert!(check_env(&env(&[("A", "v")])).is_err());
        assert!(check_env(&env(&[(&"A".repeat(63), "v")])).is_ok());
        assert!(check_env(&env(&[(&"A".repeat(64), "v")])).is_err());
        assert!(check_env(&env(&[("9A", "v")])).is_err());
        assert!(check_env(&env(&[("A-B", "v")])).is_err());
        assert!(check_env(&env(&[("PORT", "1")])).is_err());
        assert!(check_env(&env(&[("KEP_INSTANCE_OWNER", "/x")])).is_err());
        assert!(check_env(&env(&[("AB", &"v".repeat(1024))])).is_ok());
        assert!(check_env(&env(&[("AB", &"v".repeat(1025))])).is_err());
        let fifty: BTreeMap<_, _> = (0..50).map(|i| (format!("V{i}"), String::new())).collect();
        assert!(check_env(&fifty).is_ok());
        let fifty_one: BTreeMap<_, _> = (0..51).map(|i| (format!("V{i}"), String::new())).collect();
        assert!(check_env(&fifty_one).is_err());
    }
}
