//! The OpenAPI documents against what schema fuzzing (fuzz/schema.sh) met: every answer a
//! call can give is described.

use serde_json::Value;

use crate::common::{http, port0, serve};

/// What schema fuzzing (fuzz/schema.sh) met that the documents did not say: the operator
/// API's 401 on every call and 400/413/415 on every JSON body, the message calls' 401 and
/// their error bodies, the RCS results' POST, a JSON-RPC `id` of `null` and a Provision
/// without a token, the adapter's header values.
#[test]
fn the_documents_describe_every_answer_the_schema_fuzzing_met() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[]);
    let doc = |name: &str| {
        let (status, doc) = http(
            "GET",
            &format!("{}/openapi/{name}.json", srv.admin),
            None,
            None,
        );
        assert_eq!(status, 200, "{name}");
        doc
    };
    let operations = |doc: &Value| -> Vec<(String, String, Value)> {
        let mut ops = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                ops.push((path.clone(), method.clone(), op.clone()));
            }
        }
        ops
    };

    let admin = doc("admin");
    let ops = operations(&admin);
    assert!(ops.len() >= 40, "{} operator calls", ops.len());
    for (path, method, op) in &ops {
        let answers = &op["responses"];
        // Health and readiness take no token; every operator call may be refused one.
        let open = ["/healthz", "/readyz"].contains(&path.as_str());
        assert_eq!(answers["401"].is_object(), !open, "{method} {path}: 401");
        if op["requestBody"]["content"]["application/json"].is_object() {
            for status in ["400", "413", "415"] {
                assert!(answers[status].is_object(), "{method} {path}: {status}");
            }
        }
        if op["parameters"].as_array().is_some_and(|p| !p.is_empty()) {
            assert!(answers["400"].is_object(), "{method} {path}: 400");
        }
        // One tag, its service's, so that Swagger UI groups the calls by service.
        let tags = op["tags"].as_array().map(Vec::as_slice).unwrap_or_default();
        let [tag] = tags else {
            panic!("{method} {path}: one tag, not {tags:?}")
        };
        let tag = tag.as_str().unwrap_or_default();
        let service = path
            .strip_prefix("/admin/v1/")
            .and_then(|p| Some(p.split_once('/')?.0))
            .unwrap_or("platform");
        assert!(
            !tag.is_empty() && tag != "default",
            "{method} {path}: {tag}"
        );
        assert_eq!(tag, service, "{method} {path}");
    }
    let tagged: Vec<&str> = admin["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        tagged,
        ["adapter", "live", "messaging", "platform", "serving"]
    );

    let messaging = doc("messaging");
    for (path, method, op) in operations(&messaging) {
        // The token call, and a carrier's receipt callback (a token of its own in the URL).
        if path == "/v2/oauth/token" || path == "/carriers/{name}/dlr" {
            continue;
        }
        let unauthorized = &op["responses"]["401"];
        assert!(
            unauthorized["content"]["application/json"]["schema"].is_object(),
            "{method} {path}: 401 and its body"
        );
    }
    assert!(messaging["paths"]["/v2/info/rcs/results"]["post"].is_object());

    let live = doc("live");
    let rpc = &live["paths"]["/api/rpc"]["post"];
    assert!(
        rpc["security"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!({})),
        "Provision needs no token: {}",
        rpc["security"]
    );
    let id_types = &live["components"]["schemas"]["RpcResponse"]["properties"]["id"]["type"];
    assert!(
        id_types
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("null")),
        "{id_types}"
    );

    // Every call of every document may be over its listener's limits: 429, with
    // `Retry-After` and the call's refusal shape.
    for (name, doc) in [
        ("admin", &admin),
        ("live", &live),
        ("messaging", &messaging),
        ("adapter", &doc("adapter")),
    ] {
        for (path, method, op) in operations(doc) {
            let limited = &op["responses"]["429"];
            assert!(
                limited["headers"]["Retry-After"].is_object(),
                "{name}: {method} {path}: 429 and Retry-After"
            );
            assert!(
                limited["content"]["application/json"]["schema"]["$ref"].is_string(),
                "{name}: {method} {path}: 429's body"
            );
        }
    }

    let adapter = doc("adapter");
    let upload = &adapter["paths"]["/api/trust/drm/v0/uploadResult"]["post"];
    let file_type = upload["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "Kep-File-Type")
        .unwrap();
    assert_eq!(file_type["schema"]["$ref"], "#/components/schemas/FileType");
    let decrypted = &adapter["paths"]["/api/trust/drm/v0/uploadDecrypted"]["post"];
    assert_eq!(
        decrypted["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"],
        "#/components/schemas/ReleasedFileForm"
    );
    assert_eq!(
        adapter["components"]["schemas"]["ReleasedFileForm"]["required"],
        serde_json::json!(["file"])
    );
}
