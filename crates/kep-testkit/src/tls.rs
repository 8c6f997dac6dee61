//! Certificates for tests of TLS peers, made with the `openssl` command (`./test` installs
//! it): nothing here is trusted anywhere but where a test says so.

use std::path::Path;
use std::process::Command;

/// In `dir`: `ca.pem` (its key `ca.key`), the CA that signed `server.pem` for 127.0.0.1 and
/// localhost (its key `server.key`, mode 0600), and `other-ca.pem`, which signed nothing.
pub fn certificates(dir: &Path) {
    for ca in ["ca", "other-ca"] {
        openssl(
            dir,
            &format!(
                "req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=kep-test-{ca} -keyout {ca}.key -out {ca}.pem"
            ),
        );
    }
    openssl(
        dir,
        "req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr",
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(
        dir,
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out server.pem",
    );
    std::fs::set_permissions(
        dir.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
}

/// `openssl ARGS` in `dir`, which must succeed.
pub fn openssl(dir: &Path, args: &str) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args.split(' '))
        .output()
        .expect("openssl (./test installs it)");
    assert!(
        out.status.success(),
        "openssl {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An https server on 127.0.0.1:`port` with the certificate [`certificates`] wrote into
/// `dir`: a GET serves `dir`'s files, a POST is answered 200 with no body. Python's
/// `http.server` behind its `ssl`; killed when dropped.
pub struct HttpsPeer(std::process::Child);

impl HttpsPeer {
    pub fn start(dir: &Path, port: u16) -> HttpsPeer {
        let script = format!(
            "import http.server, ssl\n\
             class Peer(http.server.SimpleHTTPRequestHandler):\n\
             \x20   def do_POST(self):\n\
             \x20       self.rfile.read(int(self.headers.get('Content-Length', 0)))\n\
             \x20       self.send_response(200); self.send_header('Content-Length', '0'); self.end_headers()\n\
             s = http.server.HTTPServer(('127.0.0.1', {port}), Peer)\n\
             c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
             c.load_cert_chain('server.pem', 'server.key')\n\
             s.socket = c.wrap_socket(s.socket, server_side=True)\n\
             s.serve_forever()\n"
        );
        let child = Command::new("python3")
            .args(["-c", &script])
            .current_dir(dir)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3");
        HttpsPeer(child)
    }
}

impl Drop for HttpsPeer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
