//! Which https servers the client trusts: the system's roots, plus the CA certificates given
//! to [`trust`] (the `kep` CLI gives the data dir's `tls/ca.pem`, the CA of
//! `kep serve --tls-self-signed`). Every client built after a call trusts them, REST and
//! WebSocket alike.

use std::sync::RwLock;

use crate::ClientError;

/// The PEM certificates given so far.
static EXTRA: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Trusts the CA certificates of `pem` (one or more PEM blocks) beside the system's; how
/// many it held.
pub fn trust(pem: &str) -> Result<usize, ClientError> {
    let blocks = blocks(pem);
    for block in &blocks {
        reqwest::Certificate::from_pem(block.as_bytes())?;
    }
    if blocks.is_empty() {
        return Err(ClientError::Protocol("no PEM certificate to trust".into()));
    }
    let n = blocks.len();
    EXTRA
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .extend(blocks);
    Ok(n)
}

fn blocks(pem: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    pem.split_inclusive(END)
        .filter_map(|part| {
            let start = part.find("-----BEGIN CERTIFICATE-----")?;
            part.ends_with(END).then(|| part[start..].to_owned())
        })
        .collect()
}

fn extra() -> Vec<String> {
    EXTRA
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// An HTTP client trusting what [`trust`] was given (every client of this crate is one).
pub fn http() -> reqwest::Client {
    let roots = extra()
        .into_iter()
        .filter_map(|pem| reqwest::Certificate::from_pem(pem.as_bytes()).ok());
    reqwest::Client::builder()
        .tls_certs_merge(roots)
        .build()
        .unwrap_or_default()
}

/// What a `wss` connection is made with: `None`, the default (the system's roots alone).
pub(crate) fn ws_connector() -> Result<Option<tokio_tungstenite::Connector>, ClientError> {
    let extra = extra();
    if extra.is_empty() {
        return Ok(None);
    }
    let mut builder = native_tls::TlsConnector::builder();
    for pem in &extra {
        let cert = native_tls::Certificate::from_pem(pem.as_bytes())
            .map_err(|e| ClientError::Protocol(format!("a trusted certificate: {e}")))?;
        builder.add_root_certificate(cert);
    }
    let connector = builder
        .build()
        .map_err(|e| ClientError::Protocol(format!("TLS: {e}")))?;
    Ok(Some(tokio_tungstenite::Connector::NativeTls(connector)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bundle_is_read_block_by_block_and_anything_else_refused() {
        let one = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----";
        let text = format!("# a comment\n{one}\n\n{one}\ntrailing");
        assert_eq!(super::blocks(&text), vec![one.to_owned(), one.to_owned()]);
        assert!(super::blocks("no certificate").is_empty());
        assert!(super::trust("no certificate").is_err());
    }
}
