//! Headless Chromium on the demo page and the browser SDK (tests/browser.py): one page
//! publishes Chromium's fake camera over WHIP, another decodes it over WHEP, and the Room
//! methods act on them; with kep's media port held to 400 kbit/s (`tc`), the publisher's
//! encoder is brought down to fit (REMB), and a subscriber of a simulcast stream moves to
//! a smaller layer, and back once the port is free. Run in a network namespace of the
//! test's own, with only `lo`, so that the browser's media can go nowhere but loopback.

use std::process::Command;

use serde_json::Value;

use crate::common::KEP;

/// Runs `tests/<script>` (a Python script driving Chromium) against kep in a network
/// namespace of its own with only `lo`: the JSON lines it printed, once it succeeded.
fn in_a_namespace(script: &str) -> Vec<Value> {
    in_a_namespace_with(script, "true")
}

/// [`in_a_namespace`], after `setup` (shell) has made the namespace's other links.
fn in_a_namespace_with(script: &str, setup: &str) -> Vec<Value> {
    let script = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("unshare")
        .args([
            "-n",
            "sh",
            "-c",
            &format!(r#"ip link set lo up && {setup} && exec python3 "$0" "$1""#),
        ])
        .args([script.as_str(), KEP])
        .output()
        .expect("unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A browser grants the camera to a page of another machine only over https: Chromium, in a
/// namespace with a veth pair (10.77.0.1, 10.77.0.2), opens the demo page of a kep on
/// 10.77.0.1 with `--tls-self-signed` (its CA trusted as a user trusts one), publishes its
/// fake camera over WHIP and the participant socket over `wss`, and a second page shows it.
#[test]
fn chromium_publishes_over_https_from_an_address_not_loopback() {
    let veth = "ip link add kep0 type veth peer name kep1 \
                && ip addr add 10.77.0.1/24 dev kep0 && ip addr add 10.77.0.2/24 dev kep1 \
                && ip link set kep0 up && ip link set kep1 up";
    let events = in_a_namespace_with("browser_tls.py", veth);
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names, ["urls", "secure context", "published", "decoding"]);
    assert_eq!(
        events[0]["live"]
            .as_str()
            .map(|u| u.starts_with("https://10.77.0.1:")),
        Some(true)
    );
    assert_eq!(events[1]["secure"], true);
}

#[test]
fn chromium_publishes_and_shows_a_stream_through_the_demo_page() {
    let events = in_a_namespace("browser.py");
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(
        names,
        [
            "published",
            "decoding",
            "listed",
            "fitted",
            "stopped",
            "destroyed",
            "simulcast",
            "best layer",
            "smaller layer",
            "best layer again"
        ]
    );
    // Bob's tile of alice's video names her.
    assert_eq!(
        events[1]["tiles"],
        serde_json::json!(["alice"]),
        "{}",
        events[1]
    );
    // The publisher's stream, with the tracks Chromium sent.
    let listed = &events[2]["participants"][0];
    assert_eq!(listed["participantId"], "alice");
    let kinds: Vec<&str> = listed["streams"][0]["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"video") && kinds.contains(&"audio"),
        "{listed}"
    );
    // A simulcast stream lists its layers.
    let tracks = &events[6]["participants"][0]["streams"][0]["tracks"];
    let video = tracks
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "video")
        .unwrap();
    assert_eq!(
        video["layers"],
        serde_json::json!(["l", "m", "h"]),
        "{tracks}"
    );
}

/// `/docs`: each OpenAPI document renders in the vendored Swagger UI, in Chromium with no
/// network but loopback, its operations listed and its listener as its server.
#[test]
fn every_api_document_renders_on_the_docs_page() {
    let docs = in_a_namespace("docs_page.py");
    let names: Vec<&str> = docs.iter().filter_map(|d| d["doc"].as_str()).collect();
    assert_eq!(names, ["admin", "live", "adapter", "messaging"], "{docs:?}");
    for d in &docs {
        assert!(d["operations"].as_u64() > Some(2), "{d}");
        let server = d["servers"][0].as_str().unwrap_or_default();
        assert!(server.starts_with("http://127.0.0.1:"), "{d}");
    }
}

/// `/console`, as an operator uses it in Chromium (tests/console_page.py): a wrong token
/// is refused; signed in, the token is in the tab's session storage and not in the URL; a
/// participant who joins appears and is kicked from the page; a message's timeline reaches
/// 200; a deployment's chart moves under load, and a mirror's chart with the calls copied to
/// it; DRM sessions and the activity stream show. What it shows holds to the console's rules:
/// one time rule (the browser's zone, named), charts whose labels fit, whose colours follow
/// the series' names and whose figures have three digits, secrets masked.
#[test]
fn an_operator_watches_and_acts_from_the_console() {
    let steps = in_a_namespace("console_page.py");
    let names: Vec<&str> = steps.iter().filter_map(|s| s["event"].as_str()).collect();
    assert_eq!(
        names,
        [
            "refused",
            "signed in",
            "room appeared",
            "kicked",
            "timeline",
            "chart moved",
            "mirror counted",
            "drm session",
            "activity",
            "times"
        ],
        "{steps:?}"
    );
    let signed_in = &steps[1];
    let token = "operator-token-of-the-console-test";
    assert!(
        !signed_in["url"].as_str().unwrap().contains(token),
        "{signed_in}"
    );
    assert_eq!(signed_in["stored"], serde_json::json!([token]));
    assert!(
        steps[2]["row"].as_str().unwrap().contains("video"),
        "{}",
        steps[2]
    );
    assert_eq!(
        steps[4]["events"],
        serde_json::json!(["accepted", "handed_over", "finished"])
    );
    let facts = steps[4]["facts"].as_str().unwrap();
    assert!(
        facts.contains("821012345678") && facts.contains("console-1"),
        "{facts}"
    );
    let facts = steps[7]["facts"].as_str().unwrap();
    assert!(
        facts.contains("report.pdf") && facts.contains("kim"),
        "{facts}"
    );
    assert!(steps[5]["qps"].as_f64() > Some(5.0), "{}", steps[5]);
    let seen = steps[8]["events"].as_array().unwrap();
    for e in ["room.opened", "participant.kicked", "message.accepted"] {
        assert!(seen.iter().any(|s| s == e), "{e} in {seen:?}");
    }
    the_charts_read_right(&steps[6]);
    // The identity provider's client secret is masked, and its data model wraps in its card.
    let adapter = &steps[7]["adapter"];
    assert_eq!(adapter["secret_shown"], false, "{adapter}");
    assert_eq!(adapter["masked"], true, "{adapter}");
    assert_eq!(adapter["endpoint_shown"], true, "{adapter}");
    assert!(
        adapter["card"]["scroll"].as_u64() <= adapter["card"]["client"].as_u64(),
        "{adapter}"
    );
    one_time_rule(&steps[9]);
}

/// A mirror's chart counts the calls copied to it; each y axis is as wide as its widest
/// label; each series is drawn in the colour its name says (`blue`, `green`), its legend's
/// marker in the same, the endpoint's total visible; legend figures have at most three
/// significant digits, with their unit.
fn the_charts_read_right(step: &Value) {
    let qps = step["qps"].as_array().unwrap();
    assert!(qps[2].as_f64() > Some(2.0), "the mirror's calls: {step}");
    let charts = step["charts"].as_object().unwrap();
    for (name, chart) in charts {
        for axis in chart["axes"].as_array().unwrap() {
            assert!(
                axis["room"].as_f64() >= axis["widest"].as_f64(),
                "{name}: a label wider than its axis: {axis}"
            );
        }
        let series = chart["series"].as_array().unwrap();
        let legend = chart["legend"].as_array().unwrap();
        assert_eq!(series.len(), legend.len(), "{name}: {chart}");
        for (s, l) in series.iter().zip(legend) {
            assert_eq!(s["label"], l["label"], "{name}: {chart}");
            assert_eq!(
                s["stroke"], l["marker"],
                "{name}: the legend's colour: {chart}"
            );
            assert!(
                s["show"] == true && s["width"].as_f64() > Some(0.0),
                "{name}: {s}"
            );
            assert_ne!(s["stroke"], "rgb(255, 255, 255)", "{name}: {s}");
        }
        let strokes: Vec<&Value> = series.iter().map(|s| &s["stroke"]).collect();
        let distinct: std::collections::BTreeSet<String> =
            strokes.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            distinct.len(),
            strokes.len(),
            "{name}: one colour each: {chart}"
        );
    }
    let stroke = |chart: &str, label: &str| {
        charts[chart]["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["label"] == label)
            .map(|s| s["stroke"].clone())
            .unwrap_or_else(|| panic!("{label} on {chart}: {step}"))
    };
    for chart in ["qps", "cpu", "memory"] {
        assert_eq!(
            stroke(chart, "blue"),
            "rgb(47, 111, 223)",
            "blue on {chart}"
        );
        assert_eq!(
            stroke(chart, "green"),
            "rgb(43, 138, 62)",
            "green on {chart}"
        );
    }
    assert!(stroke("qps", "endpoint").is_string());
    // Under the cursor at the latest calls: p50 and p99 to three digits, in ms.
    let figures: Vec<&str> = charts["latency"]["legend"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["value"].as_str())
        .collect();
    assert!(figures.iter().any(|f| *f != "–"), "{figures:?}");
    for f in figures.iter().filter(|f| **f != "–") {
        let number = f
            .strip_suffix(" ms")
            .unwrap_or_else(|| panic!("{f}: no unit"));
        let digits = number.trim_start_matches(['0', '.']).replace('.', "");
        assert!(
            number.parse::<f64>().is_ok() && digits.len() <= 3,
            "{f}: more than three digits"
        );
    }
}

/// Every time the messaging, adapter and activity pages show reads alike: the date, the
/// time and the browser's zone by name (the page ran in America/Los_Angeles); and the
/// message's acceptance (given by messaging in Seoul's wall time) is the activity's instant.
fn one_time_rule(step: &Value) {
    let shape = |text: &str| {
        let (date, rest) = text.split_once(' ').unwrap_or_default();
        let (clock, zone) = rest.split_once(' ').unwrap_or_default();
        let digits = |s: &str, n: usize, sep: char| {
            s.split(sep).all(|p| p.chars().all(|c| c.is_ascii_digit())) && s.len() == n
        };
        digits(date, 10, '-') && digits(clock, 8, ':') && ["PST", "PDT"].contains(&zone)
    };
    for page in ["messaging", "adapter", "activity"] {
        let times = step["times"][page].as_array().unwrap();
        assert!(!times.is_empty(), "{page}: {step}");
        for t in times {
            assert!(shape(t["text"].as_str().unwrap()), "{page}: {t}");
        }
    }
    let instant = |t: &Value| {
        let at = t["at"].as_str().unwrap();
        at.parse::<jiff::Timestamp>()
            .unwrap_or_else(|e| panic!("{at}: {e}"))
    };
    let listed = instant(&step["times"]["messaging"][0]);
    let accepted = instant(&step["accepted"][0]);
    let apart = (listed.as_millisecond() - accepted.as_millisecond()).abs();
    assert!(
        apart <= 2000,
        "the list's {listed}, the activity's {accepted}"
    );
}
