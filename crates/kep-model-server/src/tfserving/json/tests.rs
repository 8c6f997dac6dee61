use super::*;
use serde_json::json;

fn spec(name: &str, datatype: DataType, shape: &[i64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        datatype,
        shape: shape.to_vec(),
    }
}

fn error(specs: &[TensorSpec], body: &str) -> String {
    decode(specs, body.as_bytes()).expect_err("refused").message
}

/// Found writing the `tfserving_request` fuzz target: lists nested 40 deep, two items
/// each, made the reader reserve room for 2^40 leaves (the process aborted, out of
/// memory), and 64 deep overflowed the count (a panic where overflow is checked).
#[test]
fn deep_lists_are_a_bad_request() {
    let x = [spec("x", DataType::Fp32, &[-1, 2])];
    for (key, depth) in [("inputs", 40), ("instances", 64)] {
        let nested = format!("{}0{}", "[".repeat(depth), ",0]".repeat(depth));
        let body = match key {
            "inputs" => format!(r#"{{"inputs":{nested}}}"#),
            _ => format!(r#"{{"instances":[{nested}]}}"#),
        };
        let err = decode(&x, body.as_bytes()).expect_err("refused");
        assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST, "{key}");
        assert!(
            err.message.contains("found at incorrect level"),
            "{key}: {}",
            err.message
        );
    }
}

#[test]
fn documents_read_as_rapidjson_reads_them() {
    let x = [spec("x", DataType::Fp32, &[-1, 2])];
    assert_eq!(error(&x, ""), "JSON Parse error: The document is empty");
    assert_eq!(
        error(&x, "  "),
        "JSON Parse error: The document is empty. at offset: 2"
    );
    assert_eq!(
        error(&x, r#"{"a" 1}"#),
        "JSON Parse error: Missing a colon after a name of object member. at offset: 5"
    );
    assert_eq!(
        error(&x, "[1 2]"),
        "JSON Parse error: Missing a comma or ']' after an array element. at offset: 3"
    );
    assert_eq!(
        error(&x, r#"{"instances": [1"#),
        "JSON Parse error: Missing a comma or ']' after an array element. at offset: 16"
    );
    assert_eq!(error(&x, "[1]"), "JSON Value: [1] Is not object");
    // What follows the document is not read.
    let (format, _) = decode(&x, br#"{"instances": [[1, 2]]} trailing"#).unwrap();
    assert_eq!(format, Format::Rows);
}

#[test]
fn debug_strings_are_rapidjsons_pretty_ones() {
    assert_eq!(
        debug_string(&json!({"a": [1, 2.5, "x"], "b": {"c": null}, "d": {}})),
        "{\n    \"a\": [1, 2.5, \"x\"],\n    \"b\": {\n        \"c\": null\n    },\n    \"d\": {}\n}"
    );
    assert_eq!(
        debug_string(&json!([{"a": 1}])),
        "[{\n        \"a\": 1\n    }]"
    );
    // Cut at the first token past 256 bytes.
    let long = debug_string(&json!({"instances": vec![123456; 100]}));
    assert!(long.len() < 270 && long.ends_with(", 123456"), "{long}");
}

#[test]
fn row_errors_are_tf_servings() {
    let x = [spec("x", DataType::Fp32, &[-1, 2])];
    assert_eq!(
        error(&x, r#"{"instances": [[1, 2], [3]]}"#),
        "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: \
         Expecting tensor size: 2 but got: 1"
    );
    assert_eq!(
        error(&x, r#"{"instances": [[1, "a"]]}"#),
        "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: \
         JSON Value: \"a\" Type: String is not of expected type: float"
    );
    assert_eq!(
        error(&x, r#"{"instances": [[[1], 2]]}"#),
        "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: \
         JSON Value: 2 found at incorrect level: 2 in the JSON DOM. Expected at level: 2"
    );
    assert_eq!(
        error(&x, r#"{"instances": [[1, 2], {"x": [1, 2]}]}"#),
        "Expecting value/list but got object at item 1 of input list"
    );
    assert_eq!(
        error(&x, r#"{"instances": [{"y": [1, 2]}]}"#),
        "Failed to process element: 0 key: y of 'instances' list. Error: \
         INVALID_ARGUMENT: JSON object: does not have named input: y"
    );
    assert_eq!(
        error(&x, r#"{"instances": 1}"#),
        "JSON Value: {\n    \"instances\": 1\n} Expecting 'instances' to be an list/array"
    );
    assert_eq!(
        error(&x, r#"{"instances": []}"#),
        "JSON Value: {\n    \"instances\": []\n} No values in 'instances' array"
    );
    let two = [
        spec("a", DataType::Fp32, &[-1]),
        spec("b", DataType::Int64, &[-1]),
    ];
    assert_eq!(
        error(&two, r#"{"instances": [1, 2]}"#),
        "instances is a plain list, but expecting list of objects as multiple input \
         tensors required as per tensorinfo_map"
    );
    assert_eq!(
        error(&two, r#"{"instances": [{"a": 1, "b": 2}, {"a": 1}]}"#),
        "Failed to process element: 1 of 'instances' list. JSON object: {\n    \"a\": 1\n} \
         keys must be equal to: a,b"
    );
    assert_eq!(
        error(&two, r#"{"instances": [{"a": 1, "b": 2}, [1]]}"#),
        "Expecting object but got list at item 1 of input list"
    );
}

#[test]
fn instances_stack_along_a_new_first_dimension() {
    let two = [
        spec("a", DataType::Fp32, &[-1, 2]),
        spec("s", DataType::Bytes, &[-1]),
    ];
    let body = r#"{"instances": [{"a": [1, 2], "s": {"b64": "aGk="}}, {"s": "x", "a": [3, 4]}]}"#;
    let (format, tensors) = decode(&two, body.as_bytes()).unwrap();
    assert_eq!(format, Format::Rows);
    let a = &tensors.iter().find(|(n, _)| n == "a").unwrap().1;
    assert_eq!(a.shape(), [2, 2]);
    let s = &tensors.iter().find(|(n, _)| n == "s").unwrap().1;
    assert_eq!(
        tensor::to_data(s, DataType::Bytes).unwrap(),
        tensor::Data::Text(vec!["hi".into(), "x".into()])
    );
}

#[test]
fn columnar_inputs_keep_their_whole_shape() {
    let x = [spec("x", DataType::Fp32, &[-1, 2])];
    let (format, t) = decode(&x, br#"{"inputs": [[1, 2], [3, 4]]}"#).unwrap();
    assert_eq!((format, t[0].1.shape()), (Format::Columns, &[2, 2][..]));
    // Names the model lacks are ignored; a missing one is named.
    let (_, t) = decode(&x, br#"{"inputs": {"x": [[1, 2]], "y": 1}}"#).unwrap();
    assert_eq!(t[0].1.shape(), [1, 2]);
    assert_eq!(
        error(&x, r#"{"inputs": {"y": 1}}"#),
        "Missing named input: x in 'inputs' object."
    );
    assert_eq!(
        error(&x, r#"{"inputs": [[1, 2], 3]}"#),
        "JSON Value: 3 found at incorrect level: 2 in the JSON DOM. Expected at level: 2"
    );
    let two = [
        spec("a", DataType::Fp32, &[-1]),
        spec("b", DataType::Fp32, &[-1]),
    ];
    assert_eq!(
        error(&two, r#"{"inputs": [1]}"#),
        "inputs is a plain value/list, but expecting an object as multiple input tensors \
         required as per tensorinfo_map"
    );
}

#[test]
fn signatures_other_than_serving_default_are_not_found() {
    let x = [spec("x", DataType::Fp32, &[-1, 2])];
    assert_eq!(
        error(&x, r#"{"signature_name": "other", "instances": [[1, 2]]}"#),
        "Serving signature name: \"other\" not found in signature def"
    );
    assert!(
        error(&x, r#"{"signature_name": 1}"#)
            .ends_with("not formatted correctly. 'signature_name' key must be a string value.")
    );
    assert!(decode(&x, br#"{"signature_name": "", "inputs": [[1, 2]]}"#).is_ok());
}

#[test]
fn floats_are_written_as_write_decimal_writes_them() {
    assert_eq!(decimal_f32(1.0).to_string(), "1.0");
    assert_eq!(decimal_f32(0.1).to_string(), "0.1");
    // 169/1024 does not read back from six digits: nine are written, as `%.9g` does.
    assert_eq!(decimal_f32(0.165_039_06).to_string(), "0.165039062");
    assert_eq!(decimal_f64(0.1).to_string(), "0.1");
    assert_eq!(decimal_f32(f32::NAN), Value::Null);
}

#[test]
fn predictions_split_outputs_per_instance() {
    let one = predictions(vec![("y".into(), json!([[1, 2], [3, 4]]))]).unwrap();
    assert_eq!(one, json!([[1, 2], [3, 4]]));
    let two = predictions(vec![
        ("y".into(), json!([1, 2])),
        ("z".into(), json!([["a"], ["b"]])),
    ])
    .unwrap();
    assert_eq!(two, json!([{"y": 1, "z": ["a"]}, {"y": 2, "z": ["b"]}]));
    assert_eq!(
        predictions(vec![("y".into(), json!(1))])
            .unwrap_err()
            .message,
        "Tensor name: y has no shape information "
    );
    assert_eq!(
        predictions(vec![("y".into(), json!([1, 2])), ("z".into(), json!([1]))])
            .unwrap_err()
            .message,
        "Tensor name: z has inconsistent batch size: 1 expecting: 2"
    );
}
