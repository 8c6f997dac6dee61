//! The traffic forms: percentages in steps of 5, or a ratio such as `1:2`, and the whole
//! percentages shown for either.

use std::collections::BTreeMap;

use crate::ServingError;
use kep_api::serving::TrafficRequest;

/// Percentages: each a multiple of 5, summing to 100, naming only `deployments`.
/// Deployments left out get 0.
fn percent_weights(
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
fn ratio_weights(
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
