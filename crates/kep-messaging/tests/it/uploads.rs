//! RCS and MMS uploads: checked by their bytes, used by sends, refused once expired.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::*;

fn jpeg(len: usize) -> Vec<u8> {
    let mut b = vec![0xFF, 0xD8, 0xFF, 0xE0];
    b.resize(len, 0x11);
    b
}

fn png(len: usize) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    b.resize(len, 0x22);
    b
}

impl Server {
    async fn upload(
        &self,
        auth: &str,
        path: &str,
        form: reqwest::multipart::Form,
    ) -> (StatusCode, Value) {
        let res = self
            .http
            .post(format!("{}{path}", self.url))
            .header("Authorization", auth)
            .multipart(form)
            .send()
            .await
            .unwrap();
        (res.status(), res.json().await.unwrap_or(Value::Null))
    }
}

fn part(bytes: Vec<u8>, name: &str) -> reqwest::multipart::Part {
    reqwest::multipart::Part::bytes(bytes).file_name(name.to_owned())
}

#[tokio::test]
async fn uploads_are_checked_by_their_bytes_and_used_by_sends() {
    use reqwest::multipart::Form;
    let srv = spawn_with(|s| s.upload_ttl_s = 2).await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let bearer = format!("Bearer {token}");
    let rcs_form = |bytes: Vec<u8>, name: &str| {
        Form::new()
            .part("image", part(bytes, name))
            .text("description", "logo")
    };

    // RCS: JPEG or PNG by the bytes, at most 1 MB.
    let (status, v) = srv
        .upload(&bearer, "/v2/upload/rcs", rcs_form(png(2000), "logo.png"))
        .await;
    assert_eq!((status, v["code"].as_str()), (StatusCode::OK, Some("200")));
    let file_id = v["file_id"].as_str().unwrap().to_owned();
    assert_eq!(v["url"], format!("maapfile://{file_id}"));
    assert_eq!(v["expiry_date"].as_str().unwrap().len(), 19);
    let (status, _) = srv
        .upload(
            &bearer,
            "/v2/upload/rcs",
            rcs_form(jpeg(1024 * 1024), "big.jpg"),
        )
        .await;
    assert_eq!(status, 200, "exactly 1 MB");
    // One image per upload: a second is refused, as a fourth MMS file is.
    let two = rcs_form(png(2000), "a.png").part("image", part(jpeg(2000), "b.jpg"));
    let (status, v) = srv.upload(&bearer, "/v2/upload/rcs", two).await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420")),
        "{v}"
    );
    assert!(
        v["result"]["detail_message"]
            .as_str()
            .unwrap()
            .starts_with("image:"),
        "{v}"
    );
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/rcs",
            rcs_form(jpeg(1024 * 1024 + 1), "big.jpg"),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("420"))
    );
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/rcs",
            rcs_form(b"just text".to_vec(), "fake.png"),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420")),
        "a text file named .png"
    );
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/rcs",
            Form::new().text("description", "x"),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420"))
    );
    let res = srv
        .http
        .post(format!("{}/v2/upload/rcs", srv.url))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(
        res.json::<Value>().await.unwrap()["code"],
        "420",
        "not multipart"
    );

    // MMS: up to 3 JPEGs, 200 KB together; `files` or `images`; a bare token.
    let mms = |parts: Vec<(&'static str, Vec<u8>)>| {
        parts.into_iter().fold(Form::new(), |f, (name, bytes)| {
            f.part(name, part(bytes, "p.jpg"))
        })
    };
    let (status, v) = srv
        .upload(
            &token,
            "/v2/upload/message/mms/files",
            mms(vec![
                ("files", jpeg(100 * 1024)),
                ("images", jpeg(50 * 1024)),
                ("files", jpeg(50 * 1024)),
            ]),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::OK, Some("200")),
        "exactly 200 KB in 3 files: {v}"
    );
    let group = v["content_group_id"].as_str().unwrap().to_owned();
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/message/mms/files",
            mms(vec![("files", jpeg(1000)); 4]),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420")),
        "4 files"
    );
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/message/mms/files",
            mms(vec![
                ("files", jpeg(100 * 1024)),
                ("files", jpeg(100 * 1024 + 1)),
            ]),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("420")),
        "201 KB"
    );
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/message/mms/files",
            mms(vec![("files", png(1000))]),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420")),
        "a PNG named .jpg"
    );
    let (status, _) = srv
        .upload(
            "Bearer forged",
            "/v2/upload/message/mms/files",
            mms(vec![("files", jpeg(10))]),
        )
        .await;
    assert_eq!(status, 401);

    // Sends refer to them; unknown ones are a file error.
    let mut mm = sms("mm-1", "821012345678");
    mm["message_type"] = json!("MM");
    mm["content_group_id"] = json!(group);
    let (status, _) = srv.post(&token, "/v2/send/xms", &mm).await;
    assert_eq!(status, 200);
    mm["cid"] = json!("mm-2");
    mm["content_group_id"] = json!("nope");
    let (status, v) = srv.post(&token, "/v2/send/xms", &mm).await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420"))
    );
    let mut card = rcs("card-1", "821012345678");
    card["message_type"] = json!("RCSMMS");
    card["body"][0]["media"] = json!(format!("maapfile://{file_id}"));
    let (status, _) = srv.post(&token, "/v2/send/rcs", &card).await;
    assert_eq!(status, 200);

    // Expired uploads are refused at send time: a send compares their ttl (2 s) with the
    // clock.
    srv.clock.advance(Duration::from_secs(2));
    card["cid"] = json!("card-2");
    let (status, v) = srv.post(&token, "/v2/send/rcs", &card).await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420"))
    );
    mm["cid"] = json!("mm-3");
    mm["content_group_id"] = json!(group);
    let (status, _) = srv.post(&token, "/v2/send/xms", &mm).await;
    assert_eq!(status, 400);
}
