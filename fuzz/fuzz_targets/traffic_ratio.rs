//! `PUT …/traffic` bodies (CONTRACT §3): read as the operator API reads a body (a JSON
//! object, `kep_core::http::from_json` into `TrafficRequest`), then
//! `kep_serving::traffic_weights`, which `Control::set_traffic` calls, and `percentages`,
//! which shows the stored weights. The input's first line names the endpoint's deployments
//! in creation order; the rest is the body.
#![no_main]

use std::collections::BTreeSet;

use kep_api::serving::TrafficRequest;
use kep_fuzz::split_line;
use kep_serving::{percentages, traffic_weights};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (line, body) = split_line(data);
    // An endpoint's deployments have distinct names.
    let mut names: Vec<String> = Vec::new();
    for name in String::from_utf8_lossy(line).split_whitespace() {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    // The server refuses an endpoint without deployments before it reads the body.
    if names.is_empty() {
        return;
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    if !value.is_object() {
        return;
    }
    let Ok(req) = kep_core::http::from_json::<TrafficRequest>(value) else {
        return;
    };
    let Ok(weights) = traffic_weights(&req, &names) else {
        return;
    };
    // Every deployment has a weight, and only they do.
    let keys: BTreeSet<&String> = weights.keys().collect();
    assert_eq!(keys, names.iter().collect());
    let sum: u32 = weights.values().sum();
    if req.weights.is_some() {
        // Percentages in steps of 5 that sum to 100.
        assert!(
            weights.values().all(|w| w % 5 == 0 && *w <= 100),
            "{weights:?}"
        );
        assert_eq!(sum, 100, "{weights:?}");
    } else {
        // One part from 0 to 10,000 per deployment the ratio names, one of them above 0;
        // the others get 0.
        let ratio = req.ratio.as_deref().expect("weights or a ratio");
        let parts = ratio.split(':').count();
        let given = weights.values().filter(|w| **w > 0).count();
        assert!((1..=parts).contains(&given), "{ratio:?} {weights:?}");
        assert!(weights.values().all(|w| *w <= 10_000), "{weights:?}");
    }
    // As shown: each share a whole percentage, together exactly 100.
    let shown = percentages(&weights);
    assert!(
        shown.values().all(|p| (0.0..=100.0).contains(p) && p.fract() == 0.0),
        "{shown:?}"
    );
    let total: f64 = shown.values().sum();
    assert_eq!(total, 100.0, "{shown:?}");
});
