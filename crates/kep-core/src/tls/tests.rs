use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use rcgen::{CertificateParams, KeyPair};

use super::*;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A certificate for 127.0.0.1 of its own key, valid between the dates given, into `dir`.
fn made(dir: &Path, from: (i32, u8, u8), to: (i32, u8, u8)) -> Files {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
    params.not_after = rcgen::date_time_ymd(to.0, to.1, to.2);
    let cert = params.self_signed(&key).unwrap();
    let files = Files {
        cert: dir.join("c.pem"),
        key: dir.join("k.pem"),
    };
    std::fs::write(&files.cert, cert.pem()).unwrap();
    crate::private::write(&files.key, key.serialize_pem().as_bytes()).unwrap();
    files
}

fn refusal(files: Files) -> String {
    format!("{:#}", ServerTls::load(files).unwrap_err())
}

#[test]
fn the_data_dirs_certificate_is_made_once_and_issued_again_for_a_new_host() {
    let dir = tempfile::tempdir().unwrap();
    let files = self_signed::ensure(dir.path(), &["kep.test".into()]).unwrap();
    let tls_dir = dir.path().join(self_signed::DIR);
    for f in ["ca.pem", "ca-key.pem", "cert.pem", "key.pem"] {
        assert_eq!(mode(&tls_dir.join(f)), 0o600, "{f}");
    }
    let (_, described) = ServerTls::load(files.clone()).unwrap();
    assert_eq!(
        described.names,
        ["localhost", "127.0.0.1", "::1", "kep.test"]
    );
    assert_eq!(described.subject, "CN=kep.test");
    let read = |f: &str| std::fs::read(tls_dir.join(f)).unwrap();
    let (ca, cert) = (read("ca.pem"), read("cert.pem"));

    // The next start with the same hosts reuses both.
    self_signed::ensure(dir.path(), &["kep.test".into()]).unwrap();
    assert_eq!(
        (read("ca.pem"), read("cert.pem")),
        (ca.clone(), cert.clone())
    );

    // A host the certificate lacks: a new one from the same CA.
    let files = self_signed::ensure(dir.path(), &["10.0.0.7".into()]).unwrap();
    assert_eq!(read("ca.pem"), ca);
    assert_ne!(read("cert.pem"), cert);
    let (_, described) = ServerTls::load(files).unwrap();
    assert!(described.names.contains(&"10.0.0.7".to_owned()));
}

#[test]
fn a_certificate_out_of_its_dates_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let expired = made(dir.path(), (2020, 1, 1), (2021, 1, 1));
    let why = refusal(expired.clone());
    assert!(why.contains(&expired.cert.display().to_string()), "{why}");
    assert!(why.contains("expired at 2021-01-01"), "{why}");

    let early = made(dir.path(), (2200, 1, 1), (2201, 1, 1));
    assert!(refusal(early).contains("valid only from 2200-01-01"));

    // Within its dates: taken.
    let now = jiff::Zoned::now().year() as i32;
    assert!(ServerTls::load(made(dir.path(), (now - 1, 1, 1), (now + 1, 12, 31))).is_ok());
}

#[test]
fn a_key_of_another_certificate_an_empty_file_and_a_missing_one_are_refused() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let now = jiff::Zoned::now().year() as i32;
    let one = made(a.path(), (now - 1, 1, 1), (now + 1, 1, 1));
    let other = made(b.path(), (now - 1, 1, 1), (now + 1, 1, 1));
    let why = refusal(Files {
        cert: one.cert.clone(),
        key: other.key.clone(),
    });
    assert!(why.contains("does not match the certificate"), "{why}");
    assert!(why.contains(&other.key.display().to_string()), "{why}");

    std::fs::write(&one.cert, "not PEM at all\n").unwrap();
    assert!(refusal(one.clone()).contains("no CERTIFICATE in it"));

    let missing = Files {
        cert: a.path().join("missing.pem"),
        key: one.key,
    };
    let why = refusal(missing);
    assert!(why.starts_with("tls.cert_file"), "{why}");
    assert!(why.contains("missing.pem"), "{why}");
}

#[test]
fn a_reload_takes_up_replaced_files_and_keeps_the_old_ones_on_a_bad_file() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let files = self_signed::ensure(a.path(), &[]).unwrap();
    let (tls, _) = ServerTls::load(files.clone()).unwrap();
    let before = tls.current.key.load_full();

    let other = self_signed::ensure(b.path(), &["replaced.test".into()]).unwrap();
    std::fs::copy(&other.cert, &files.cert).unwrap();
    std::fs::copy(&other.key, &files.key).unwrap();
    let described = tls.reload().unwrap();
    assert!(described.names.contains(&"replaced.test".to_owned()));
    let after = tls.current.key.load_full();
    assert_ne!(before.cert, after.cert);

    std::fs::write(&files.cert, "half written").unwrap();
    assert!(tls.reload().is_err());
    assert_eq!(tls.current.key.load_full().cert, after.cert);
}
