//! kep's outbound HTTP client: every call kep makes to a URL an operator or a customer set
//! (agent notices, alerts, live webhooks, the external verifier, HTTP carriers, probes) is
//! made with a client built here. An `https` peer's certificate is checked against the
//! system's roots (OpenSSL's, as the SFU's DTLS uses) and `tls.extra_roots`.

use std::error::Error as _;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context as _;

static EXTRA_ROOTS: OnceLock<Vec<reqwest::Certificate>> = OnceLock::new();

/// Trusts the CA certificates of the PEM file at `path` (`tls.extra_roots`) beside the
/// system's, for every client built after; how many it holds. A file that cannot be read
/// or holds no certificate is an error naming it.
pub fn use_extra_roots(path: &Path) -> anyhow::Result<usize> {
    let roots = read_roots(path)?;
    let n = roots.len();
    let _ = EXTRA_ROOTS.set(roots);
    Ok(n)
}

fn read_roots(path: &Path) -> anyhow::Result<Vec<reqwest::Certificate>> {
    let what = || format!("tls.extra_roots: {}", path.display());
    let pem = std::fs::read(path).with_context(what)?;
    let roots = reqwest::Certificate::from_pem_bundle(&pem).with_context(what)?;
    if roots.is_empty() {
        anyhow::bail!("{}: no PEM certificate in it", what());
    }
    Ok(roots)
}

/// A client whose calls end within `timeout`, connecting included.
pub fn client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    builder().timeout(timeout).connect_timeout(timeout).build()
}

/// What [`client`] is built from, for a caller that bounds each call itself. It follows no
/// redirect, so a 3xx is the answer: the peer is the URL that was set, and a redirect would
/// carry the call, its body and its headers to an address kep was never given (a loopback
/// or a cloud metadata one among them).
pub fn builder() -> reqwest::ClientBuilder {
    trusting(EXTRA_ROOTS.get().map_or(&[], Vec::as_slice))
}

/// [`builder`] trusting `roots` beside the system's.
fn trusting(roots: &[reqwest::Certificate]) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .tls_certs_merge(roots.iter().cloned())
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

    /// An `https` peer whose CA is not the system's is refused, and trusted once its CA is
    /// among the extra roots; a root file that is missing or holds no certificate is an
    /// error naming it.
    #[tokio::test]
    async fn an_https_peer_is_trusted_through_the_extra_roots() {
        let dir = tempfile::tempdir().unwrap();
        kep_testkit::tls::certificates(dir.path());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let peer = kep_testkit::tls::HttpsPeer::start(dir.path(), port);
        let url = format!("https://127.0.0.1:{port}/ca.pem");
        let call = |roots: Vec<reqwest::Certificate>| {
            let url = url.clone();
            async move {
                let client = trusting(&roots)
                    .timeout(Duration::from_secs(5))
                    .build()
                    .unwrap();
                client.get(url).send().await
            }
        };
        let mut trusted = None;
        for _ in 0..100 {
            match call(read_roots(&dir.path().join("ca.pem")).unwrap()).await {
                Ok(res) => {
                    trusted = Some(res.status());
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        assert_eq!(trusted, Some(reqwest::StatusCode::OK));
        for roots in [
            Vec::new(),
            read_roots(&dir.path().join("other-ca.pem")).unwrap(),
        ] {
            let text = error_text(call(roots).await.unwrap_err());
            assert!(text.contains("certificate"), "{text}");
        }
        drop(peer);

        let missing = dir.path().join("missing.pem");
        let e = use_extra_roots(&missing).unwrap_err();
        assert!(format!("{e:#}").starts_with(&format!("tls.extra_roots: {}", missing.display())));
        let e = use_extra_roots(&dir.path().join("san.ext")).unwrap_err();
        assert!(
            format!("{e:#}").ends_with("no PEM certificate in it"),
            "{e:#}"
        );
    }
}
