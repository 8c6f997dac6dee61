//! Access tokens: the three client authentications, and a new secret ending the old tokens.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn the_token_endpoint_takes_all_three_client_authentications() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let url = format!("{}/v2/oauth/token", srv.url);
    let grant = [("grant_type", "client_credentials")];

    let basic = srv
        .http
        .post(&url)
        .basic_auth(&id, Some(&secret))
        .form(&grant)
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), 200);
    assert_eq!(basic.headers()["cache-control"], "no-store");
    let v: Value = basic.json().await.unwrap();
    assert_eq!(
        (v["token_type"].as_str(), v["expires_in"].as_u64()),
        (Some("Bearer"), Some(21600))
    );
    let two_words = srv
        .http
        .post(&url)
        .header("Authorization", format!("Basic {id} {secret}"))
        .form(&grant)
        .send()
        .await
        .unwrap();
    assert_eq!(two_words.status(), 200);
    let form = srv
        .http
        .post(&url)
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", &id),
            ("client_secret", &secret),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 200);

    let wrong = srv
        .http
        .post(&url)
        .basic_auth(&id, Some("wrong"))
        .form(&grant)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().contains_key("www-authenticate"));
    assert_eq!(
        wrong.json::<Value>().await.unwrap()["error"],
        "invalid_client"
    );
    let nobody = srv.http.post(&url).form(&grant).send().await.unwrap();
    assert_eq!(
        nobody.json::<Value>().await.unwrap()["error"],
        "invalid_client"
    );
    let password = srv
        .http
        .post(&url)
        .basic_auth(&id, Some(&secret))
        .form(&[("grant_type", "password")])
        .send()
        .await
        .unwrap();
    assert_eq!(password.status(), 400);
    assert_eq!(
        password.json::<Value>().await.unwrap()["error"],
        "unsupported_grant_type"
    );
    let no_grant = srv
        .http
        .post(&url)
        .basic_auth(&id, Some(&secret))
        .form(&[("scope", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(
        no_grant.json::<Value>().await.unwrap()["error"],
        "invalid_request"
    );
    let both = srv
        .http
        .post(&url)
        .basic_auth(&id, Some(&secret))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", &id),
            ("client_secret", &secret),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(
        both.json::<Value>().await.unwrap()["error"],
        "invalid_request"
    );
    // Base64 of something that is not id:secret.
    let garbage = srv
        .http
        .post(&url)
        .header(
            "Authorization",
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode("nocolon")
            ),
        )
        .form(&grant)
        .send()
        .await
        .unwrap();
    assert_eq!(garbage.status(), 401);
}

#[tokio::test]
async fn a_new_secret_ends_the_old_tokens() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let (status, _) = srv
        .post(&token, "/v2/info/message/search", &json!({}))
        .await;
    assert_eq!(status, 200);
    let res = srv
        .http
        .post(format!(
            "{}/admin/v1/messaging/clients/{id}/secret",
            srv.admin
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    let new_secret = res.json::<Value>().await.unwrap()["client_secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = srv
        .post(&token, "/v2/info/message/search", &json!({}))
        .await;
    assert_eq!(status, 401, "the old token stopped working");
    let token = srv.token(&id, &new_secret).await;
    let (status, _) = srv
        .post(&token, "/v2/info/message/search", &json!({}))
        .await;
    assert_eq!(status, 200);
}
