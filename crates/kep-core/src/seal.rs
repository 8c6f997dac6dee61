//! Sealing the stored values that open something by themselves: a hash the server checks a
//! challenge or signs with (live's `admin_ha` and `service_hs`), a webhook's signing secret.
//! Each is kept as ChaCha20-Poly1305 under a 256-bit key that lives in a file of its own
//! (`seal_key_file`, by default `<data-dir>/seal.key`, 0600), so a copied database alone
//! opens nothing. Its associated data names the value's place (`"<table>.<column>\n<row>"`),
//! so a sealed value moved to another row does not open.
//!
//! Several nodes on one database each need the same key: a check value of the key is kept
//! in the database, and a node whose key does not match refuses to start ([`Sealer::verify`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use hmac::{Hmac, Mac as _};
use rand::RngCore as _;

/// How a sealed value begins: what the upgrade of a database tells from a value still in
/// the clear (hex never has a `:`).
const PREFIX: &str = "sealed1:";
const NONCE_LEN: usize = 12;
/// What the key check value is the HMAC of.
const CHECK_LABEL: &[u8] = b"kep seal key check";

/// The key stored values are sealed under; cheap to clone.
#[derive(Clone)]
pub struct Sealer(Arc<Inner>);

struct Inner {
    cipher: ChaCha20Poly1305,
    check: String,
    /// Where the key came from, for the errors that name it.
    file: PathBuf,
}

/// A stored value that does not open under this key at its place (another key, another
/// row, altered or not sealed).
#[derive(Debug, thiserror::Error)]
#[error("{0}: the stored value does not open with the seal key")]
pub struct Unsealable(String);

impl Sealer {
    /// The key in `file` (64 hex digits), made there first (0600, 256 random bits) if the
    /// file is not there.
    pub fn load_or_create(file: &Path) -> anyhow::Result<Sealer> {
        let mut key = [0u8; 32];
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = file.parent() {
                    crate::private::dir(dir)
                        .with_context(|| format!("seal_key_file: making {}", dir.display()))?;
                }
                rand::rng().fill_bytes(&mut key);
                let text = hex::encode(key);
                write_new(file, &text)
                    .with_context(|| format!("seal_key_file: writing {}", file.display()))?;
                text
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("seal_key_file: reading {}", file.display()));
            }
        };
        hex::decode_to_slice(text.trim(), &mut key)
            .with_context(|| format!("seal_key_file: {} is not 64 hex digits", file.display()))?;
        Ok(Sealer::new(key, file.to_owned()))
    }

    /// A key of its own, kept nowhere: a unit test's.
    pub fn ephemeral() -> Sealer {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        Sealer::new(key, PathBuf::from("(a key kept nowhere)"))
    }

    /// A sealer over `key`; `file` is what its errors name.
    pub fn new(key: [u8; 32], file: PathBuf) -> Sealer {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).expect("any key length");
        mac.update(CHECK_LABEL);
        Sealer(Arc::new(Inner {
            cipher: ChaCha20Poly1305::new(&key.into()),
            check: hex::encode(mac.finalize().into_bytes()),
            file,
        }))
    }

    /// `plain` sealed at `place` (`"<table>.<column>\n<row id>"`), as stored text.
    pub fn seal(&self, place: &str, plain: &str) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let payload = Payload {
            msg: plain.as_bytes(),
            aad: place.as_bytes(),
        };
        let sealed = self
            .0
            .cipher
            .encrypt(&Nonce::from(nonce), payload)
            .expect("a value far under ChaCha20's limit");
        format!(
            "{PREFIX}{}",
            STANDARD_NO_PAD.encode([&nonce[..], &sealed].concat())
        )
    }

    /// The value [`Sealer::seal`] sealed at `place`.
    pub fn open(&self, place: &str, stored: &str) -> Result<String, Unsealable> {
        let fail = || Unsealable(place.replace('\n', " "));
        let raw = stored
            .strip_prefix(PREFIX)
            .and_then(|b| STANDARD_NO_PAD.decode(b).ok())
            .filter(|raw| raw.len() >= NONCE_LEN)
            .ok_or_else(fail)?;
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().expect("split at its length");
        let payload = Payload {
            msg: sealed,
            aad: place.as_bytes(),
        };
        let plain = self
            .0
            .cipher
            .decrypt(&Nonce::from(nonce), payload)
            .map_err(|_| fail())?;
        String::from_utf8(plain).map_err(|_| fail())
    }

    /// Whether `stored` is sealed, or a value still in the clear from before sealing.
    pub fn is_sealed(stored: &str) -> bool {
        stored.starts_with(PREFIX)
    }

    /// The key's check value, which the database keeps (an HMAC of a fixed label: it tells
    /// keys apart and gives nothing of the key away).
    pub fn check(&self) -> &str {
        &self.0.check
    }

    /// Fails, naming the setting, when `stored` (the check value `database` keeps) is not
    /// this key's.
    pub fn verify(&self, stored: &str, database: &str) -> anyhow::Result<()> {
        if crate::secret::constant_time_eq(stored, &self.0.check) {
            return Ok(());
        }
        anyhow::bail!(
            "seal_key_file: {} is not the key {database} was sealed with (every node of one \
             database needs the same key file)",
            self.0.file.display()
        )
    }
}

/// Writes a new key file, 0600; one that appeared meanwhile is not overwritten.
fn write_new(file: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = crate::private::options().create_new(true).open(file)?;
    writeln!(f, "{text}")?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer(byte: u8) -> Sealer {
        Sealer::new([byte; 32], PathBuf::from("seal.key"))
    }

    #[test]
    fn a_sealed_value_opens_at_its_place_only() {
        let s = sealer(1);
        let sealed = s.seal("t.c\nrow1", "8a545b17");
        assert!(Sealer::is_sealed(&sealed));
        assert!(!sealed.contains("8a545b17"));
        assert_eq!(s.open("t.c\nrow1", &sealed).unwrap(), "8a545b17");
        assert_ne!(
            sealed,
            s.seal("t.c\nrow1", "8a545b17"),
            "a nonce of its own"
        );
        assert!(s.open("t.c\nrow2", &sealed).is_err(), "another row");
        assert!(s.open("t.d\nrow1", &sealed).is_err(), "another column");
        assert!(sealer(2).open("t.c\nrow1", &sealed).is_err(), "another key");
        assert!(s.open("t.c\nrow1", "8a545b17").is_err(), "not sealed");
        let mut altered = sealed.into_bytes();
        let last = altered.len() - 2;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        assert!(
            s.open("t.c\nrow1", std::str::from_utf8(&altered).unwrap())
                .is_err()
        );
    }

    #[test]
    fn the_check_tells_keys_apart() {
        let s = sealer(1);
        assert!(s.verify(sealer(1).check(), "live").is_ok());
        let err = s.verify(sealer(2).check(), "live").unwrap_err().to_string();
        assert!(
            err.starts_with("seal_key_file: seal.key is not the key live"),
            "{err}"
        );
    }

    #[test]
    fn the_key_file_is_made_once_and_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("seal.key");
        let first = Sealer::load_or_create(&file).unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Sealer::load_or_create(&file).unwrap();
        assert_eq!(first.check(), again.check());
        std::fs::write(&file, "not hex").unwrap();
        assert!(Sealer::load_or_create(&file).is_err());
    }
}
