use super::Jasmin;

/// The UCS-2 (UTF-16, big-endian) bytes of `text`.
pub fn ucs2(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

/// `tests/jasmin/esme.py` (smpplib): binds as the fixture's user, submits `text` to
/// `destination` in `coding` with a receipt requested, waits for `receipts` receipts and
/// answers its JSON line (`message_id`, `status`, `receipt`, the first, and `receipts`: each
/// `short_message`, `stat`, `receipted_message_id`, `message_state`, `esm_class`).
pub async fn esme_submit(
    jasmin: &Jasmin,
    destination: &str,
    text: &str,
    coding: u8,
    receipts: usize,
) -> serde_json::Value {
    let out = tokio::process::Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/jasmin/esme.py"))
        .args([
            "127.0.0.1",
            &jasmin.smpp_port.to_string(),
            &jasmin.username,
            &jasmin.password,
        ])
        .args([destination, text, "--coding", &coding.to_string()])
        .args(["--receipts", &receipts.to_string()])
        .output()
        .await
        .expect("python3 runs");
    if !out.status.success() {
        panic!(
            "esme.py failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            jasmin.logs()
        );
    }
    serde_json::from_slice(&out.stdout).expect("esme.py answers JSON")
}

/// A DLR listener for `dlr-url`: answers `ACK/Jasmin` (Jasmin retries otherwise) and hands
/// each callback's form fields over.
pub async fn dlr_listener() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<Vec<(String, String)>>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Vec<(String, String)>>();
    let app = axum::Router::new().route(
        "/dlr",
        axum::routing::post(move |axum::Form(form): axum::Form<Vec<(String, String)>>| {
            let _ = tx.send(form);
            async { "ACK/Jasmin" }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/dlr", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

/// Calls `/send` as the fixture's user with `form`; answers the id in `Success "<id>"`.
pub async fn http_send(jasmin: &Jasmin, form: &[(&str, &str)]) -> String {
    let mut form = form.to_vec();
    form.extend([
        ("username", jasmin.username.as_str()),
        ("password", jasmin.password.as_str()),
    ]);
    let res = reqwest::Client::new()
        .post(format!("{}/send", jasmin.http_url()))
        .form(&form)
        .send()
        .await
        .unwrap();
    let status = res.status();
    let body = res.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body.strip_prefix("Success \"")
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or_else(|| panic!("/send answered {body:?}"))
        .to_owned()
}

/// The value of `name` in a DLR's fields.
pub fn field<'a>(dlr: &'a [(String, String)], name: &str) -> Option<&'a str> {
    dlr.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}
