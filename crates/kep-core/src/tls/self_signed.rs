//! `--tls-self-signed`: a CA of the data dir's own and a server certificate it signs, kept in
//! `<data-dir>/tls/` (`ca.pem`, `ca-key.pem`, `cert.pem`, `key.pem`, each 0600) and reused
//! at the next start. The certificate is issued again when it lacks a name the listeners
//! now need, or nears its end; the CA stays, so a client that trusts `ca.pem` keeps
//! trusting every certificate kep issues.

use std::path::Path;

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::Files;
use crate::private;

/// The folder under the data dir.
pub const DIR: &str = "tls";
/// The CA certificate that clients trust (the CLI reads it by itself).
pub const CA_FILE: &str = "ca.pem";
const CA_KEY_FILE: &str = "ca-key.pem";
const CERT_FILE: &str = "cert.pem";
const KEY_FILE: &str = "key.pem";

/// The names every self-signed certificate carries beside the listeners' public hosts.
const LOCAL_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
/// How long an issued certificate lasts, and how near its end it is issued again.
const CERT_DAYS: i64 = 397;
const RENEW_DAYS: i64 = 30;
const CA_DAYS: i64 = 3650;

/// The files of the data dir's certificate for `hosts` and the local names, made or
/// reused.
pub fn ensure(data_dir: &Path, hosts: &[String]) -> anyhow::Result<Files> {
    let dir = data_dir.join(DIR);
    private::dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut names: Vec<String> = LOCAL_NAMES.iter().map(|n| (*n).to_owned()).collect();
    for host in hosts {
        if !names.contains(host) {
            names.push(host.clone());
        }
    }
    let files = Files {
        cert: dir.join(CERT_FILE),
        key: dir.join(KEY_FILE),
    };
    let (ca_pem, ca_key, made) = ca(&dir)?;
    if !made && reusable(&files, &names) {
        return Ok(files);
    }
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).context("reading tls/ca.pem")?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.clone())?;
    // The first public host, else `localhost`: what a person reading the certificate knows.
    let common = hosts.first().map_or(LOCAL_NAMES[0], String::as_str);
    params.distinguished_name.push(DnType::CommonName, common);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    valid_for(&mut params, CERT_DAYS)?;
    let cert = params.signed_by(&key, &issuer)?;
    private::write(&files.key, key.serialize_pem().as_bytes())?;
    private::write(&files.cert, cert.pem().as_bytes())?;
    tracing::info!(file = %files.cert.display(), names = ?names, "issued a TLS certificate from the data dir's CA");
    Ok(files)
}

/// The CA's certificate and key, made when missing; whether it was made now.
fn ca(dir: &Path) -> anyhow::Result<(String, KeyPair, bool)> {
    let (cert, key) = (dir.join(CA_FILE), dir.join(CA_KEY_FILE));
    if cert.exists() && key.exists() {
        let pem = std::fs::read_to_string(&cert)
            .with_context(|| format!("reading {}", cert.display()))?;
        let key_pem =
            std::fs::read_to_string(&key).with_context(|| format!("reading {}", key.display()))?;
        let key = KeyPair::from_pem(&key_pem).with_context(|| format!("{}", key.display()))?;
        return Ok((pem, key, false));
    }
    let ca_key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "kep local CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    valid_for(&mut params, CA_DAYS)?;
    let pem = params.self_signed(&ca_key)?.pem();
    private::write(&key, ca_key.serialize_pem().as_bytes())?;
    private::write(&cert, pem.as_bytes())?;
    tracing::info!(file = %cert.display(), "made the data dir's CA: trust this file to reach kep over https");
    Ok((pem, ca_key, true))
}

/// Whether the certificate there names every one of `names` and lasts a while yet.
fn reusable(files: &Files, names: &[String]) -> bool {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let Ok(der) = CertificateDer::from_pem_file(&files.cert) else {
        return false;
    };
    let Ok(described) = super::describe(&der) else {
        return false;
    };
    let lasts = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_hours(24 * RENEW_DAYS))
        .is_ok_and(|soon| described.not_after > soon);
    files.key.exists() && lasts && names.iter().all(|n| described.names.contains(n))
}

/// Valid from yesterday (a client's clock a little behind) for `days` from today, at
/// midnight UTC.
fn valid_for(params: &mut CertificateParams, days: i64) -> anyhow::Result<()> {
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    let ymd = |d: jiff::civil::Date| {
        rcgen::date_time_ymd(d.year().into(), d.month() as u8, d.day() as u8)
    };
    params.not_before = ymd(today.yesterday()?);
    params.not_after = ymd(today.checked_add(jiff::Span::new().days(days))?);
    Ok(())
}
