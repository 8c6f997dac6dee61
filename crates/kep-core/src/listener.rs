//! Listeners: binding (port 0 included), the address book, the operator token file,
//! serving with graceful shutdown, and the process's stop signals.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context as _;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A bound listener and the address it got.
pub struct Bound {
    pub listener: TcpListener,
    pub addr: SocketAddr,
}

pub async fn bind(name: &str, addr: SocketAddr) -> anyhow::Result<Bound> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {name} listener to {addr}"))?;
    let addr = listener.local_addr()?;
    Ok(Bound { listener, addr })
}

/// The URL the server hands out for a listener: the configured one, else its own address.
pub fn public_url(configured: Option<&str>, addr: SocketAddr) -> String {
    match configured {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => format!("http://{addr}"),
    }
}

/// Writes `<data-dir>/addresses.json`: `{"admin": "127.0.0.1:8800", …}`.
pub fn write_addresses(data_dir: &Path, addrs: &BTreeMap<&str, SocketAddr>) -> anyhow::Result<()> {
    let path = data_dir.join("addresses.json");
    let tmp = data_dir.join("addresses.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(addrs)?)?;
    // A rename, so a reader polling for the file never sees half of it.
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}

/// The operator token: the configured one, else the one in `<data-dir>/admin-token`, else a
/// new one written there with mode 0600. The flag says whether it was just generated (and
/// so must be printed once).
pub fn operator_token(data_dir: &Path, configured: Option<&str>) -> anyhow::Result<(String, bool)> {
    if let Some(t) = configured.filter(|t| !t.is_empty()) {
        return Ok((t.to_owned(), false));
    }
    let path = data_dir.join("admin-token");
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let existing = existing.trim();
        if !existing.is_empty() {
            return Ok((existing.to_owned(), false));
        }
    }
    let token = crate::secret::new_secret();
    std::fs::create_dir_all(data_dir)?;
    write_private(&path, token.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok((token, true))
}

/// Writes a file only its owner may read (mode 0600): tokens and secrets.
pub fn write_private(path: &Path, content: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(content)
}

/// Serves `router` until `shutdown` fires, then lets in-flight requests finish.
pub async fn serve(
    bound: Bound,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    // Events and answers are small writes: Nagle's algorithm would hold them back.
    let listener = bound.listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// Resolves on SIGINT or SIGTERM.
pub async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_token_is_generated_once_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let (t1, generated) = operator_token(dir.path(), None).unwrap();
        assert!(generated);
        let mode = std::fs::metadata(dir.path().join("admin-token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let (t2, generated) = operator_token(dir.path(), None).unwrap();
        assert!(!generated);
        assert_eq!(t1, t2);
        let (t3, _) = operator_token(dir.path(), Some("configured")).unwrap();
        assert_eq!(t3, "configured");
    }

    #[test]
    fn public_url_defaults_to_the_listener() {
        let addr: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        assert_eq!(public_url(None, addr), "http://127.0.0.1:9000");
        assert_eq!(
            public_url(Some("https://live.example/"), addr),
            "https://live.example"
        );
    }
}
