//! An HTTP carrier: the sending API of common SMS gateways (Jasmin's `/send`). A send is
//! acknowledged with the gateway's message id; the gateway then POSTs the delivery receipt
//! to the dlr-url kep gave it, a route on the messaging listener
//! (`api::dlr`) that only a request carrying a token of the carrier's may use.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use kep_core::clock::Clock;
use kep_core::outbound::error_text;
use kep_smpp::DataCoding;
use sha2::Sha256;

use crate::carriers::{CarrierSettings, Outgoing, Submitted};

/// The path of a carrier's receipts on the messaging listener.
pub const DLR_PATH: &str = "/carriers/{name}/dlr";

/// A dlr-url's token changes each period (an hour); one is taken until its period's end
/// plus the time a receipt is awaited (`messaging.receipt_timeout_s`), then refused.
const TOKEN_PERIOD_S: i64 = 3600;

/// The most of a gateway's answer to `/send` that is read (a line is expected): one past
/// it is a failed submit, and no more of it is held.
pub const ANSWER_CAP: usize = 64 * 1024;

/// Where HTTP carriers' receipts come back, and for how long.
pub struct DlrSettings {
    /// The messaging listener's URL, the base of each dlr-url.
    pub base: String,
    /// The service's clock: the period a token is handed out in, and whether it expired.
    pub clock: Clock,
    /// How long a receipt is awaited after a hand-over.
    pub awaited: Duration,
}

pub struct HttpCarrier {
    /// Its name: its receipts come to a dlr-url of its own, so it is an account alone.
    account: Arc<str>,
    client: reqwest::Client,
    url: String,
    username: String,
    password: String,
    data_coding: DataCoding,
    source_addr: String,
    /// The dlr-url without its token.
    dlr_url: String,
    clock: Clock,
    awaited_s: i64,
}

impl HttpCarrier {
    pub fn new(s: &CarrierSettings, dlr: &DlrSettings) -> anyhow::Result<HttpCarrier> {
        let url = s.required("url", s.url.as_deref())?;
        let username = s.required("username", s.username.as_deref())?;
        let password = s.required("password", s.password.as_deref())?;
        let path = DLR_PATH.replace("{name}", &percent(&s.name));
        Ok(HttpCarrier {
            account: Arc::from(s.name.as_str()),
            client: kep_core::outbound::client(Duration::from_secs(10))?,
            url: url.to_owned(),
            username: username.to_owned(),
            password: password.to_owned(),
            data_coding: s.data_coding,
            source_addr: s.source_addr.clone(),
            dlr_url: format!("{}{path}", dlr.base.trim_end_matches('/')),
            clock: dlr.clock.clone(),
            awaited_s: i64::try_from(dlr.awaited.as_secs()).unwrap_or(i64::MAX / 2),
        })
    }

    /// The token of `period`: `<period>.<mac>`. Only one who knows the carrier's password
    /// can make it, and it is the same on every node and after a restart (they share the
    /// settings), so a receipt finds its way whichever node it comes to.
    fn token(&self, period: i64) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(self.password.as_bytes())
            .expect("HMAC takes a key of any length");
        mac.update(format!("kep dlr\n{}\n{period}", self.account).as_bytes());
        format!(
            "{period}.{}",
            hex::encode(&mac.finalize().into_bytes()[..16])
        )
    }

    /// `Err`: why the token of a receipt is refused (for the log).
    pub fn check_token(&self, token: &str) -> Result<(), &'static str> {
        use subtle::ConstantTimeEq as _;
        let period = token
            .split_once('.')
            .and_then(|(p, _)| p.parse::<i64>().ok())
            .ok_or("a malformed token")?;
        if !bool::from(self.token(period).as_bytes().ct_eq(token.as_bytes())) {
            return Err("a wrong token");
        }
        // Handed out before its period's end: a receipt is awaited until that time plus
        // the receipt timeout. A period ahead of this node's clock is another node's.
        let until = period
            .saturating_add(1)
            .saturating_mul(TOKEN_PERIOD_S)
            .saturating_add(self.awaited_s);
        if self.clock.unix_s() >= until {
            return Err("an expired token");
        }
        Ok(())
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
        let token = self.token(self.clock.unix_s().div_euclid(TOKEN_PERIOD_S));
        let dlr_url = format!("{}?token={token}", self.dlr_url);
        let mut form = vec![
            ("username", self.username.as_str()),
            ("password", self.password.as_str()),
            ("to", o.phone_number),
            ("coding", coding),
            ("dlr", "yes"),
            ("dlr-url", dlr_url.as_str()),
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
            .map_err(error_text)?;
        let status = answer.status();
        let Some(body) = read_capped(answer).await? else {
            let why = format!("{status}: an answer over {ANSWER_CAP} bytes, not read");
            return if status.is_server_error() {
                Err(why)
            } else {
                Ok(Submitted::Refused(why))
            };
        };
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

/// The answer's body, read by chunks: `None` once it passes [`ANSWER_CAP`].
async fn read_capped(mut answer: reqwest::Response) -> Result<Option<String>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.map_err(error_text)? {
        if body.len() + chunk.len() > ANSWER_CAP {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(String::from_utf8_lossy(&body).into_owned()))
}

fn percent(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}
