//! The document's field rules for deployments and endpoints, and the traffic forms
//! (percentages in steps of 5, or a ratio such as `1:2`).

use std::collections::BTreeMap;

use crate::ServingError;
use crate::runtime::process::OWNER_VAR;
use kep_api::serving::{Probe, TrafficRequest};

pub const DESCRIPTION_MAX: usize = 1024;
pub const ENV_MAX: usize = 50;
pub const ENV_VALUE_MAX: usize = 1024;
pub const MODELS_PER_ENDPOINT: usize = 2;
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
pub fn check_name(field: &str, name: &str) -> Result<(), ServingError> {
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

pub fn check_description(field: &str, d: &str) -> Result<(), ServingError> {
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
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), ServingError> {
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

pub fn check_probe(field: &str, p: &Probe) -> Result<(), ServingError> {
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

/// Percentages: each a multiple of 5, summing to 100, naming only `deployments`.
/// Deployments left out get 0.
pub fn percent_weights(
    weights: &BTreeMap<String, u32>,
    deployments: &[String],
) -> Result<BTreeMap<String, u32>, ServingError> {
    let mut out: BTreeMap<String, u32> = deployments.iter().map(|d| (d.clone(), 0)).collect();
    for (name, &w) in weights {
        let field = format!("weights.{name}");
        let Some(slot) = out.get_mut(name) else {
            return Err(ServingError::field(field, format!("no deployment {name}")));
        };
        if w > 100 || w % 5 != 0 {
            return Err(ServingError::field(
                field,
                "a traffic share is a percentage in steps of 5",
            ));
        }
        *slot = w;
    }
    let sum: u32 = out.values().sum();
    if sum != 100 {
        return Err(ServingError::field(
            "weights",
            format!("traffic shares must sum to 100, not {sum}"),
        ));
    }
    Ok(out)
}

/// The weights a `PUT …/traffic` body asks for, over the endpoint's deployments `names` (in
/// creation order): `weights` alone, or `ratio` with optional `deployments`.
pub fn traffic_weights(
    req: &TrafficRequest,
    names: &[String],
) -> Result<BTreeMap<String, u32>, ServingError> {
    match (&req.weights, &req.ratio) {
        (Some(w), None) if req.deployments.is_none() => percent_weights(w, names),
        (None, Some(r)) => ratio_weights(r, req.deployments.as_deref().unwrap_or(names), names),
        _ => Err(ServingError::field(
            "weights",
            "give either `weights`, or `ratio` with optional `deployments`",
        )),
    }
}

/// A ratio such as `1:2`: one whole number per deployment, in order; a `0` part gives its
/// deployment no calls, as long as one part is not 0.
pub fn ratio_weights(
    ratio: &str,
    order: &[String],
    all: &[String],
) -> Result<BTreeMap<String, u32>, ServingError> {
    let parts: Vec<&str> = ratio.split(':').map(str::trim).collect();
    if parts.len() != order.len() {
        return Err(ServingError::field(
            "ratio",
            format!(
                "the ratio has {} parts for {} deployments",
                parts.len(),
                order.len()
            ),
        ));
    }
    let mut out: BTreeMap<String, u32> = all.iter().map(|d| (d.clone(), 0)).collect();
    let mut named: Vec<&String> = Vec::new();
    for (part, name) in parts.iter().zip(order) {
        let w: u32 = part
            .parse()
            .ok()
            .filter(|w| (0..=10_000).contains(w))
            .ok_or_else(|| {
                ServingError::field(
                    "ratio",
                    format!("ratio part {part:?} is not a whole number from 0 to 10000"),
                )
            })?;
        match out.get_mut(name) {
            Some(slot) if !named.contains(&name) => {
                named.push(name);
                *slot = w;
            }
            Some(_) => {
                return Err(ServingError::field(
                    "deployments",
                    format!("{name} is named twice"),
                ));
            }
            None => {
                return Err(ServingError::field(
                    "deployments",
                    format!("no deployment {name}"),
                ));
            }
        }
    }
    if out.values().all(|&w| w == 0) {
        return Err(ServingError::field(
            "ratio",
            "at least one part must be above 0",
        ));
    }
    Ok(out)
}

/// Each deployment's share in whole percent, summing to exactly 100 (largest remainder:
/// `1:1:1` is 34/33/33, the extra points going to the largest remainders, ties by name).
pub fn percentages(weights: &BTreeMap<String, u32>) -> BTreeMap<String, f64> {
    let sum: u64 = weights.values().map(|&w| u64::from(w)).sum();
    if sum == 0 {
        return weights.keys().map(|d| (d.clone(), 0.0)).collect();
    }
    let mut shares: Vec<(&String, u64, u64)> = weights
        .iter()
        .map(|(d, &w)| {
            let scaled = u64::from(w) * 100;
            (d, scaled / sum, scaled % sum)
        })
        .collect();
    let left = 100 - shares.iter().map(|s| s.1).sum::<u64>();
    let mut by_remainder: Vec<usize> = (0..shares.len()).collect();
    // Stable: equal remainders keep the names' order.
    by_remainder.sort_by(|&a, &b| shares[b].2.cmp(&shares[a].2));
    for &i in by_remainder
        .iter()
        .take(usize::try_from(left).unwrap_or(usize::MAX))
    {
        shares[i].1 += 1;
    }
    shares
        .into_iter()
        .map(|(d, p, _)| (d.clone(), p as f64))
        .collect()
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

    #[test]
    fn percentages_in_steps_of_five_summing_to_100() {
        let ds = vec!["a".to_string(), "b".to_string()];
        let w = |pairs: &[(&str, u32)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            percent_weights(&w(&[("a", 30), ("b", 70)]), &ds).unwrap(),
            w(&[("a", 30), ("b", 70)])
        );
        assert_eq!(
            percent_weights(&w(&[("a", 100)]), &ds).unwrap(),
            w(&[("a", 100), ("b", 0)])
        );
        assert!(percent_weights(&w(&[("a", 33), ("b", 67)]), &ds).is_err());
        assert!(percent_weights(&w(&[("a", 30), ("b", 60)]), &ds).is_err());
        assert!(percent_weights(&w(&[("a", 50), ("b", 55)]), &ds).is_err());
        assert!(percent_weights(&w(&[("a", 50), ("c", 50)]), &ds).is_err());
    }

    #[test]
    fn shown_percentages_sum_to_exactly_100_by_largest_remainder() {
        let w = |pairs: &[(&str, u32)]| -> BTreeMap<String, u32> {
            pairs.iter().map(|(d, w)| (d.to_string(), *w)).collect()
        };
        let shown =
            |pairs: &[(&str, u32)]| -> Vec<f64> { percentages(&w(pairs)).into_values().collect() };
        assert_eq!(shown(&[("a", 1), ("b", 1), ("c", 1)]), [34.0, 33.0, 33.0]);
        assert_eq!(shown(&[("a", 1), ("b", 2), ("c", 3)]), [17.0, 33.0, 50.0]);
        assert_eq!(shown(&[("a", 2), ("b", 1), ("c", 1)]), [50.0, 25.0, 25.0]);
        assert_eq!(shown(&[("a", 1), ("b", 5), ("c", 1)]), [14.0, 72.0, 14.0]);
        assert_eq!(shown(&[("a", 0), ("b", 0)]), [0.0, 0.0]);
        let sevens = w(&(0..7)
            .map(|i| (["a", "b", "c", "d", "e", "f", "g"][i], 1))
            .collect::<Vec<_>>());
        assert_eq!(percentages(&sevens).values().sum::<f64>(), 100.0);
    }

    #[test]
    fn ratios() {
        let ds = vec!["a".to_string(), "b".to_string()];
        let r = ratio_weights("1:2", &ds, &ds).unwrap();
        assert_eq!((r["a"], r["b"]), (1, 2));
        assert_eq!((percentages(&r)["a"], percentages(&r)["b"]), (33.0, 67.0));
        let z = ratio_weights("0:1", &ds, &ds).unwrap();
        assert_eq!((z["a"], z["b"]), (0, 1), "a 0 part: no calls");
        assert_eq!(percentages(&z)["a"], 0.0);
        for bad in [
            "0:0", "1", "1:2:3", "a:b", "1:-2", "", "1.5:2", ":", "1:10001",
        ] {
            assert!(ratio_weights(bad, &ds, &ds).is_err(), "{bad}");
        }
        let twice = vec!["a".to_string(), "a".to_string()];
        assert!(ratio_weights("1:2", &twice, &ds).is_err());
    }
}
