//! An HTTP carrier: the sending API of common SMS gateways (Jasmin's `/send`). A send is
//! acknowledged with the gateway's message id; the gateway then POSTs the delivery receipt
//! to the dlr-url kep gave it, a route on the messaging listener
//! (`api::dlr`) that only a request carrying the carrier's token may use.

use std::sync::Arc;
use std::time::Duration;

use kep_smpp::DataCoding;
use sha2::{Digest, Sha256};

use crate::carriers::{CarrierSettings, Outgoing, Submitted};

/// The path of a carrier's receipts on the messaging listener.
pub const DLR_PATH: &str = "/carriers/{name}/dlr";

pub struct HttpCarrier {
    /// Its name: its receipts come to a dlr-url of its own, so it is an account alone.
    account: Arc<str>,
    client: reqwest::Client,
    url: String,
    username: String,
    password: String,
    data_coding: DataCoding,
    source_addr: String,
    /// What the gateway must send back with each receipt (the dlr-url's `token`).
    token: String,
    dlr_url: String,
}

impl HttpCarrier {
    pub fn new(s: &CarrierSettings, dlr_base: &str) -> anyhow::Result<HttpCarrier> {
        let url = s.required("url", s.url.as_deref())?;
        let username = s.required("username", s.username.as_deref())?;
        let password = s.required("password", s.password.as_deref())?;
        // The same on every node and after a restart, so a receipt for a message handed
        // over before finds its way; only one who knows the carrier's password can make it.
        let token = hex::encode(&Sha256::digest(format!("kep dlr\n{}\n{password}", s.name))[..16]);
        let path = DLR_PATH.replace("{name}", &percent(&s.name));
        let dlr_url = format!("{}{path}?token={token}", dlr_base.trim_end_matches('/'));
        Ok(HttpCarrier {
            account: Arc::from(s.name.as_str()),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
            url: url.to_owned(),
            username: username.to_owned(),
            password: password.to_owned(),
            data_coding: s.data_coding,
            source_addr: s.source_addr.clone(),
            token,
            dlr_url,
        })
    }

    pub fn token_matches(&self, token: &str) -> bool {
        use subtle::ConstantTimeEq as _;
        self.token.as_bytes().ct_eq(token.as_bytes()).into()
    }

    /// `Err` when the gateway cannot be reached or fails on its side (5xx).
    pub async fn submit(&self, o: &Outgoing<'_>) -> Result<Submitted, String> {
        let bytes = match kep_smpp::text::encode(&o.text, self.data_coding) {
            Ok(b) => b,
            Err(why) => return Ok(Submitted::Refused(format!("cannot encode the text: {why}"))),
        };
        let coding = match self.data_coding {
            DataCoding::Ucs2 => "8",
            DataCoding::Ksc5601 => "14",
        };
        let source = o.source.unwrap_or(&self.source_addr);
        let mut form = vec![
            ("username", self.username.as_str()),
            ("password", self.password.as_str()),
            ("to", o.phone_number),
            ("coding", coding),
            ("dlr", "yes"),
            ("dlr-url", self.dlr_url.as_str()),
            // Terminal level: the receipt that decides.
            ("dlr-level", "2"),
            ("dlr-method", "POST"),
        ];
        if !source.is_empty() {
            form.push(("from", source));
        }
        let hex_content = hex::encode(bytes);
        form.push(("hex-content", &hex_content));
        let answer = self
            .client
            .post(&self.url)
            .form(&form)
            .send()
            .await
            .map_err(|e| format!("{}: {e}", self.url))?;
        let status = answer.status();
        let body = answer.text().await.map_err(|e| e.to_string())?;
        if status.is_server_error() {
            return Err(format!("{status}: {}", body.trim()));
        }
        // `Success "<message id>"`.
        if status.is_success()
            && let Some(id) = body
                .trim()
                .strip_prefix("Success ")
                .map(|id| id.trim_matches('"'))
            && !id.is_empty()
        {
            return Ok(Submitted::Receipts {
                account: Arc::clone(&self.account),
                ids: vec![id.to_owned()],
            });
        }
        Ok(Submitted::Refused(format!("{status}: {}", body.trim())))
    }
}

fn percent(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}
