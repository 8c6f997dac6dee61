//! kep's outbound HTTP client: every call kep makes to a URL an operator or a customer set
//! (agent notices, alerts, live webhooks, the external verifier, HTTP carriers, probes) is
//! made with a client built here.

use std::error::Error as _;
use std::time::Duration;

/// A client whose calls end within `timeout`, connecting included.
pub fn client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    builder().timeout(timeout).connect_timeout(timeout).build()
}

/// What [`client`] is built from, for a caller that bounds each call itself. It follows no
/// redirect, so a 3xx is the answer: the peer is the URL that was set, and a redirect would
/// carry the call, its body and its headers to an address kep was never given (a loopback
/// or a cloud metadata one among them).
pub fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none())
}

/// Why a call failed, for a log or a stored error: the error and its causes, without the
/// URL, whose path or query may hold a credential.
pub fn error_text(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_error_names_its_cause_and_not_the_url() {
        // A port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/hook?token=secret-in-the-query");
        let e = client(Duration::from_secs(5))
            .unwrap()
            .get(&url)
            .send()
            .await
            .unwrap_err();
        let text = error_text(e);
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("error sending request: "), "{text}");
    }
}
