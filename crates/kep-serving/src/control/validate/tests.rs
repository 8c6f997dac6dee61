//! Each rule at, under and over its bound, with the field and message the API answers.

use std::fmt::Debug;

use serde_json::{Value, json};

use super::*;

/// The field and message of an invalid-field refusal.
fn refused<T: Debug>(result: Result<T, ServingError>) -> (String, String) {
    match result {
        Err(ServingError::InvalidField { field, message }) => (field, message),
        other => panic!("expected an invalid field, got {other:?}"),
    }
}

fn said(field: &str, message: &str) -> (String, String) {
    (field.to_owned(), message.to_owned())
}

fn request(body: Value) -> DeploymentRequest {
    serde_json::from_value(body).expect("a request")
}

/// A custom-image deployment with `key` set to `value`.
fn custom(key: &str, value: Value) -> DeploymentRequest {
    let mut body = json!({"name": "d1", "type": "custom-image", "image": "echo"});
    body[key] = value;
    request(body)
}

fn check(req: &DeploymentRequest) -> Result<(), ServingError> {
    deployment(req, &ServingSettings::default())
}

#[test]
fn deployment_names_are_2_to_63_of_a_z_0_9_and_hyphens() {
    assert!(check(&custom("name", json!("ab"))).is_ok());
    assert!(check(&custom("name", json!("a".repeat(63)))).is_ok());
    assert!(check(&custom("name", json!("model-v2"))).is_ok());
    for name in ["a".to_owned(), "a".repeat(64)] {
        assert_eq!(
            refused(check(&custom("name", json!(name)))),
            said("name", "name must be 2 to 63 characters")
        );
    }
    for (name, why) in [
        ("aB", "may hold only lowercase a-z, digits 0-9 and hyphens"),
        ("a_b", "may hold only lowercase a-z, digits 0-9 and hyphens"),
        ("9ab", "must start with a lowercase letter"),
        ("-ab", "must start with a lowercase letter"),
        ("ab-", "must end with a lowercase letter or digit"),
    ] {
        assert_eq!(
            refused(check(&custom("name", json!(name)))),
            said("name", &format!("name {why}")),
            "{name}"
        );
    }
}

#[test]
fn descriptions_are_at_most_1024_characters() {
    assert!(check(&custom("description", json!("x".repeat(1023)))).is_ok());
    assert!(check(&custom("description", json!("x".repeat(1024)))).is_ok());
    // Characters, not bytes.
    assert!(check(&custom("description", json!("é".repeat(1024)))).is_ok());
    assert_eq!(
        refused(check(&custom("description", json!("x".repeat(1025))))),
        said("description", "description is over 1024 characters")
    );
}

#[test]
fn env_holds_at_most_50_variables() {
    let vars = |n: usize| -> Value { (0..n).map(|i| (format!("V{i}"), json!(""))).collect() };
    assert!(check(&custom("env", vars(49))).is_ok());
    assert!(check(&custom("env", vars(50))).is_ok());
    assert_eq!(
        refused(check(&custom("env", vars(51)))),
        said("env", "at most 50 environment variables per deployment")
    );
}

#[test]
fn env_names_are_2_to_63_word_characters_not_starting_with_a_digit() {
    let one = |name: &str| check(&custom("env", json!({ name: "v" })));
    assert!(one("AB").is_ok());
    assert!(one("_x").is_ok());
    assert!(one(&"A".repeat(63)).is_ok());
    let long = "A".repeat(64);
    for name in ["A", long.as_str()] {
        assert_eq!(
            refused(one(name)),
            said(
                &format!("env.{name}"),
                "a variable name must be 2 to 63 characters"
            )
        );
    }
    assert_eq!(
        refused(one("A-B")),
        said(
            "env.A-B",
            "a variable name may hold only A-Z, a-z, 0-9 and _"
        )
    );
    assert_eq!(
        refused(one("1A")),
        said("env.1A", "a variable name must not start with a digit")
    );
    assert_eq!(
        refused(one("PORT")),
        said(
            "env.PORT",
            "PORT is set by the runtime to the instance's port"
        )
    );
    assert_eq!(
        refused(one("KEP_INSTANCE_OWNER")),
        said(
            "env.KEP_INSTANCE_OWNER",
            "KEP_INSTANCE_OWNER is set by the runtime to the kep that started the instance"
        )
    );
}

#[test]
fn env_values_are_at_most_1024_characters() {
    let value = |v: String| check(&custom("env", json!({ "AB": v })));
    assert!(value(String::new()).is_ok());
    assert!(value("v".repeat(1024)).is_ok());
    assert!(value("é".repeat(1024)).is_ok());
    assert_eq!(
        refused(value("v".repeat(1025))),
        said("env.AB", "a variable value is over 1024 characters")
    );
}

#[test]
fn probes_are_exactly_one_of_http_and_tcp() {
    assert!(check(&custom("readiness", json!({"tcp": {}}))).is_ok());
    assert!(check(&custom("liveness", json!({"http": {"path": "/health"}}))).is_ok());
    for probe in [json!({"http": {"path": "/"}, "tcp": {}}), json!({})] {
        assert_eq!(
            refused(check(&custom("readiness", probe))),
            said("readiness", "a probe is exactly one of `http` and `tcp`")
        );
    }
    assert_eq!(
        refused(check(&custom(
            "liveness",
            json!({"http": {"path": "health"}})
        ))),
        said("liveness.http.path", "the probe path must start with /")
    );
}

#[test]
fn probe_timings_are_within_their_bounds() {
    let timing = |name: &str, v: f64| check(&custom("readiness", json!({"tcp": {}, name: v})));
    for name in ["interval_s", "timeout_s"] {
        assert!(timing(name, 0.05).is_ok());
        assert!(timing(name, 3600.0).is_ok());
        for v in [0.049, 3600.01, -1.0] {
            assert_eq!(
                refused(timing(name, v)),
                said(
                    &format!("readiness.{name}"),
                    &format!("{name} must be between 0.05 and 3600 seconds")
                ),
                "{name} {v}"
            );
        }
    }
    assert!(timing("initial_delay_s", 0.0).is_ok());
    assert!(timing("initial_delay_s", 3600.0).is_ok());
    for v in [-0.01, 3600.01] {
        assert_eq!(
            refused(timing("initial_delay_s", v)),
            said(
                "readiness.initial_delay_s",
                "initial_delay_s must be between 0 and 3600 seconds"
            )
        );
    }
}

#[test]
fn probes_fail_after_at_least_one_failure() {
    let threshold = |n: u32| {
        check(&custom(
            "liveness",
            json!({"tcp": {}, "failure_threshold": n}),
        ))
    };
    assert!(threshold(1).is_ok());
    assert_eq!(
        refused(threshold(0)),
        said(
            "liveness.failure_threshold",
            "failure_threshold must be at least 1"
        )
    );
}

#[test]
fn probes_and_ports_are_for_custom_images_only() {
    let triton = |key: &str, value: Value| {
        let mut body = json!({"name": "d1", "type": "triton", "model": "m"});
        body[key] = value;
        check(&request(body))
    };
    for field in ["readiness", "liveness"] {
        assert_eq!(
            refused(triton(field, json!({"tcp": {}}))),
            said(
                field,
                "health checks are set for custom-image deployments only; the platform manages the others"
            )
        );
    }
    assert_eq!(
        refused(triton("port", json!(9000))),
        said("port", "port is set for custom-image deployments only")
    );
}

#[test]
fn ports_are_1_to_65535() {
    assert!(check(&custom("port", json!(1))).is_ok());
    assert!(check(&custom("port", json!(65535))).is_ok());
    assert_eq!(
        refused(check(&custom("port", json!(0)))),
        said("port", "port is 1 to 65535")
    );
}

#[test]
fn each_type_names_its_own_sources() {
    let refusal = |body: Value| refused(check(&request(body)));
    assert_eq!(
        refusal(json!({"name": "d1", "type": "custom-image"})),
        said("image", "a custom-image deployment needs an image")
    );
    assert_eq!(
        refusal(json!({"name": "d1", "type": "triton", "model": "m", "image": "echo"})),
        said("image", "a triton deployment takes no image")
    );
    assert_eq!(
        refusal(json!({"name": "d1", "type": "custom-image", "image": "echo", "model": "m"})),
        said(
            "model",
            "a custom-image deployment takes no separate model: the image holds it"
        )
    );
    assert_eq!(
        refusal(json!({"name": "d1", "type": "tensorflow-serving"})),
        said("model", "a tensorflow-serving deployment needs a model")
    );
    assert_eq!(
        refusal(json!({"name": "d1", "type": "triton", "model": "m", "script": "x"})),
        said("script", "a triton deployment takes no script")
    );
    assert_eq!(
        refusal(json!({"name": "d1", "type": "custom-image", "image": "echo", "script": "x"})),
        said("script", "a custom-image deployment takes no script")
    );
    assert_eq!(
        refusal(json!({"name": "d1", "type": "cosmos", "model": "m"})),
        said(
            "script",
            "a cosmos deployment needs a serving script (text or repository URL)"
        )
    );
    for kind in ["triton", "tensorflow-serving"] {
        assert!(check(&request(json!({"name": "d1", "type": kind, "model": "m"}))).is_ok());
    }
}

#[test]
fn cosmos_scripts_are_1_to_max_script_bytes() {
    let settings = ServingSettings {
        max_script_bytes: 16,
        ..ServingSettings::default()
    };
    let script = |s: &str| {
        deployment(
            &request(json!({"name": "d1", "type": "cosmos", "model": "m", "script": s})),
            &settings,
        )
    };
    assert!(script("x").is_ok());
    assert!(script(&"x".repeat(16)).is_ok());
    // Bytes, not characters.
    assert!(script(&"é".repeat(8)).is_ok());
    let over = "x".repeat(17);
    let over_in_bytes = "é".repeat(9);
    for s in ["", " \n\t", over.as_str(), over_in_bytes.as_str()] {
        assert_eq!(
            refused(script(s)),
            said("script", "the script is 1 to 16 bytes"),
            "{s:?}"
        );
    }
}

#[test]
fn tensorflow_serving_serves_tensorflow_models_only() {
    assert!(served_framework(DeploymentType::TensorflowServing, "tensorflow").is_ok());
    assert_eq!(
        refused(served_framework(
            DeploymentType::TensorflowServing,
            "pytorch"
        )),
        said(
            "model",
            "a tensorflow-serving deployment serves tensorflow models, not pytorch"
        )
    );
    for kind in [DeploymentType::Triton, DeploymentType::Cosmos] {
        for framework in FRAMEWORKS {
            assert!(served_framework(kind, framework).is_ok());
        }
    }
    assert_eq!(
        refused(served_framework(DeploymentType::Triton, "caffe")),
        said(
            "model",
            "a triton deployment serves tensorflow or pytorch or onnx models, not caffe"
        )
    );
}

#[test]
fn model_uploads_name_a_known_framework() {
    for framework in FRAMEWORKS {
        assert!(model("m1", framework).is_ok());
    }
    for framework in ["caffe", "ONNX", ""] {
        assert_eq!(
            refused(model("m1", framework)),
            said("framework", "framework is one of tensorflow, pytorch, onnx")
        );
    }
    assert_eq!(
        refused(model("m", "onnx")),
        said("name", "name must be 2 to 63 characters")
    );
}

fn endpoint_request(body: Value) -> EndpointRequest {
    serde_json::from_value(body).expect("a request")
}

#[test]
fn endpoints_take_the_defaults_and_any_protocol_case() {
    let settings = ServingSettings::default();
    assert_eq!(
        endpoint(&endpoint_request(json!({"name": "e1"})), &settings).unwrap(),
        EndpointShape {
            instance_type: "cpu-small".into(),
            instance_count: 1,
            protocol: Protocol::Http,
        }
    );
    let grpc = json!({"name": "e1", "instance_type": "gpu-small", "protocol": "GRPC"});
    assert_eq!(
        endpoint(&endpoint_request(grpc), &settings).unwrap(),
        EndpointShape {
            instance_type: "gpu-small".into(),
            instance_count: 1,
            protocol: Protocol::Grpc,
        }
    );
}

#[test]
fn endpoint_fields_within_their_bounds() {
    let settings = ServingSettings::default();
    let check = |body: Value| endpoint(&endpoint_request(body), &settings);
    for count in [0, 10] {
        let body = json!({"name": "e1", "instance_count": count});
        assert_eq!(check(body).unwrap().instance_count, count);
    }
    assert_eq!(
        refused(check(json!({"name": "e1", "instance_count": 11}))),
        said("instance_count", "instance_count is 0 to 10")
    );
    assert_eq!(
        refused(check(json!({"name": "e1", "instance_type": "huge"}))),
        said(
            "instance_type",
            "instance_type is one of cpu-large, cpu-medium, cpu-small, gpu-small"
        )
    );
    assert_eq!(
        refused(check(json!({"name": "e1", "protocol": "ftp"}))),
        said("protocol", "protocol is http or grpc")
    );
    assert!(check(json!({"name": "e1", "description": "x".repeat(1024)})).is_ok());
    assert_eq!(
        refused(check(
            json!({"name": "e1", "description": "x".repeat(1025)})
        )),
        said("description", "description is over 1024 characters")
    );
    assert_eq!(
        refused(check(json!({"name": "x"}))),
        said("name", "name must be 2 to 63 characters")
    );
}

#[test]
fn an_image_has_a_command_or_a_reference() {
    let check = |body: Value| image(&image_request(body));
    for reference in [
        "kep-test/httpd:1",
        "sha256:08cc53ee",
        "localhost/a/b@sha256:149d",
    ] {
        assert_eq!(
            check(json!({"name": "i1", "reference": reference})).unwrap(),
            ImageSpec::Reference(reference.into())
        );
    }
    assert_eq!(
        refused(check(
            json!({"name": "i1", "reference": "a", "command": "x"})
        )),
        said(
            "reference",
            "an image has a command or a reference, not both"
        )
    );
    assert_eq!(
        refused(check(json!({"name": "i1"}))),
        said("command", "an image needs a command or a reference")
    );
    for bad in ["", "a b", "../x", "a?b=1", "-x"] {
        assert_eq!(
            refused(check(json!({"name": "i1", "reference": bad}))),
            said(
                "reference",
                "reference is an image reference: repo:tag, repo@sha256:… or sha256:…"
            ),
            "{bad}"
        );
    }
}

fn image_request(body: Value) -> ImageRequest {
    serde_json::from_value(body).expect("a request")
}

#[test]
fn image_commands_split_as_a_shell_splits_them() {
    let command = |c: Value| image(&image_request(json!({"name": "i1", "command": c})));
    let words = |w: &[&str]| ImageSpec::Command(w.iter().map(|w| w.to_string()).collect());
    assert_eq!(
        command(json!("python3 -c 'print(1)' --port 80")).unwrap(),
        words(&["python3", "-c", "print(1)", "--port", "80"])
    );
    assert_eq!(command(json!(["a b", "c"])).unwrap(), words(&["a b", "c"]));
    assert_eq!(
        refused(command(json!("python3 'unclosed"))),
        said("command", "command: missing closing quote")
    );
    for empty in [
        json!(""),
        json!("  "),
        json!([]),
        json!([""]),
        json!(["", "x"]),
    ] {
        assert_eq!(
            refused(command(empty.clone())),
            said("command", "the command is empty"),
            "{empty}"
        );
    }
    assert_eq!(
        refused(image(&image_request(json!({"name": "I1", "command": "x"})))),
        said(
            "name",
            "name may hold only lowercase a-z, digits 0-9 and hyphens"
        )
    );
}

#[test]
fn an_edit_leaves_the_fixed_fields_alone() {
    assert!(patch_fields(&json!({"description": "x", "env": {}, "port": 80})).is_ok());
    for fixed in ["name", "type", "instance_type", "instance_count"] {
        for value in [json!("x"), Value::Null] {
            assert_eq!(
                refused(patch_fields(&json!({ fixed: value }))),
                said(fixed, &format!("{fixed} cannot be changed after creation"))
            );
        }
    }
}
