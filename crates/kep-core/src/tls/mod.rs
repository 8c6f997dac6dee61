//! TLS on the listeners (CONTRACT §0 "Running kep anywhere"): a certificate and key from PEM
//! files, checked before any listener serves them (the key matches, the certificate is
//! within its dates, the key file is not readable by others), or the data dir's own CA and
//! certificate ([`self_signed`]). Every listener shares one [`ServerTls`]; [`ServerTls::reload`]
//! takes up files replaced on disk, and the next handshake shows them.

pub mod self_signed;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The certificate chain and key files a server presents.
#[derive(Debug, Clone)]
pub struct Files {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What the listeners' handshakes present: one certificate for all, replaced in place.
#[derive(Clone)]
pub struct ServerTls {
    current: Arc<Current>,
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.current.files)
            .finish()
    }
}

/// The certificate the next handshake gets.
#[derive(Debug)]
struct Current {
    files: Files,
    key: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.key.load_full())
    }
}

/// What a certificate file holds, for the log and for a reuse decision.
#[derive(Debug, Clone)]
pub struct Described {
    pub subject: String,
    /// Its names: DNS names and IP addresses, as written.
    pub names: Vec<String>,
    pub not_after: jiff::Timestamp,
}

impl ServerTls {
    /// Loads and checks `files`: the listeners speak TLS 1.2 and 1.3 with them, offering
    /// HTTP/2 and HTTP/1.1 by ALPN.
    pub fn load(files: Files) -> anyhow::Result<(ServerTls, Described)> {
        let (key, described) = certified_key(&files)?;
        let current = Arc::new(Current {
            files,
            key: ArcSwap::from_pointee(key),
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .context("TLS versions")?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&current) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok((
            ServerTls {
                current,
                config: Arc::new(config),
            },
            described,
        ))
    }

    /// Reads the files again: the next handshake presents what they now hold. A file that
    /// does not pass the checks leaves the certificate in use as it was.
    pub fn reload(&self) -> anyhow::Result<Described> {
        let (key, described) = certified_key(&self.current.files)?;
        self.current.key.store(Arc::new(key));
        Ok(described)
    }

    /// Reloads on every SIGHUP until `shutdown` fires, logging what the listeners now
    /// present, or why the files were not taken up.
    pub fn reload_on_hangup(
        &self,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> anyhow::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
        let tls = self.clone();
        tokio::spawn(async move {
            while shutdown
                .run_until_cancelled(hangup.recv())
                .await
                .flatten()
                .is_some()
            {
                match tls.reload() {
                    Ok(d) => {
                        tracing::info!(subject = %d.subject, names = ?d.names, not_after = %d.not_after, "SIGHUP: took up the TLS certificate")
                    }
                    Err(e) => tracing::error!(
                        error = format!("{e:#}"),
                        "SIGHUP: the TLS certificate in use stays"
                    ),
                }
            }
        });
        Ok(())
    }

    /// What accepts a listener's TLS connections.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::clone(&self.config))
    }
}

#[expect(
    deprecated,
    reason = "ring, the provider sqlx's rustls already builds; aws-lc-rs would build C with cmake. \
              The deprecation is for ring's lack of post-quantum key exchange"
)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The chain and key of `files`, checked: each error names the file and what is wrong.
fn certified_key(files: &Files) -> anyhow::Result<(CertifiedKey, Described)> {
    let (cert, key) = (&files.cert, &files.key);
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("tls.cert_file {}: {e}", cert.display()))?;
    let Some(leaf) = chain.first() else {
        anyhow::bail!("tls.cert_file {}: no CERTIFICATE in it", cert.display());
    };
    let described = describe(leaf).with_context(|| format!("tls.cert_file {}", cert.display()))?;
    let now = jiff::Timestamp::now();
    if described.not_after < now {
        anyhow::bail!(
            "tls.cert_file {}: the certificate expired at {}",
            cert.display(),
            described.not_after
        );
    }
    warn_if_readable_by_others(key);
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("tls.key_file {}: {e}", key.display()))?;
    let certified = CertifiedKey::from_der(chain, private, &provider()).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => anyhow::anyhow!(
            "tls.key_file {} does not match the certificate of tls.cert_file {}",
            key.display(),
            cert.display()
        ),
        e => anyhow::anyhow!("tls.key_file {}: {e}", key.display()),
    })?;
    Ok((certified, described))
}

/// The subject, names and end of validity of a DER certificate; one not yet valid is an
/// error.
pub fn describe(der: &CertificateDer<'_>) -> anyhow::Result<Described> {
    use x509_parser::extensions::GeneralName;
    let (_, x509) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| anyhow::anyhow!("not a certificate: {e}"))?;
    let validity = x509.validity();
    let not_before = jiff::Timestamp::from_second(validity.not_before.timestamp())?;
    if not_before > jiff::Timestamp::now() {
        anyhow::bail!("the certificate is valid only from {not_before}");
    }
    let names = match x509.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(d) => Some((*d).to_owned()),
                GeneralName::IPAddress(b) => ip(b).map(|ip| ip.to_string()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    Ok(Described {
        subject: x509.subject().to_string(),
        names,
        not_after: jiff::Timestamp::from_second(validity.not_after.timestamp())?,
    })
}

fn ip(bytes: &[u8]) -> Option<std::net::IpAddr> {
    match bytes.len() {
        4 => Some(<[u8; 4]>::try_from(bytes).ok()?.into()),
        16 => Some(<[u8; 16]>::try_from(bytes).ok()?.into()),
        _ => None,
    }
}

/// A private key others may read is no longer private: said, not refused, since the file
/// may be a mount kep cannot change (a Kubernetes secret's 0644, say).
fn warn_if_readable_by_others(key: &Path) {
    if let Ok(meta) = std::fs::metadata(key)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            file = %key.display(),
            mode = format!("{:o}", meta.permissions().mode() & 0o777),
            "tls.key_file may be read by other users: chmod 600 it"
        );
    }
}

#[cfg(test)]
mod tests;
