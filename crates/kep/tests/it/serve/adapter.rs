//! A DRM round trip through `kep serve`, the CLI playing the agent; after a restart, the
//! released bytes on `/metrics` go on from the store.

use crate::common::{Joiner, cli, http, port0, serve};

#[test]
fn the_adapter_round_trip_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[]);
    let (status, doc) = http(
        "GET",
        &format!("{}/openapi/adapter.json", srv.admin),
        None,
        None,
    );
    assert_eq!(status, 200);
    assert!(doc["paths"]["/api/trust/drm/v0/uploadDecrypted"]["post"].is_object());

    let agent_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let org = cli(
        &srv,
        &[
            "adapter",
            "org",
            "create",
            "--method",
            "OAUTH2",
            "--agent",
            &agent_addr,
        ],
    );
    let (id, key) = (
        org["id"].to_string(),
        org["secret_key"].as_str().unwrap().to_owned(),
    );
    assert_eq!(
        cli(&srv, &["adapter", "org", "show", &id])["adapter_agent"],
        agent_addr.as_str()
    );

    let released = dir.path().join("released.bin");
    let content: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&released, &content).unwrap();
    let agent = Joiner::command(
        &srv,
        &[
            "adapter",
            "agent",
            "--listen",
            &agent_addr,
            "--org",
            &id,
            "--secret-key",
            &key,
            "--file",
            released.to_str().unwrap(),
        ],
    );
    assert_eq!(agent.next()["step"], "getOrgLoginType");

    let session = cli(
        &srv,
        &[
            "adapter",
            "drm",
            "request",
            "--org",
            &id,
            "--file-id",
            "report.pdf",
        ],
    );
    let session = session["session_id"].as_str().unwrap().to_owned();
    assert_eq!(agent.next()["notice"]["session_id"], session.as_str());
    assert_eq!(agent.next()["result"], "SUCCESS");
    assert_eq!(agent.next()["answer"]["Ok"]["_code"], 200);
    let shown = cli(&srv, &["adapter", "drm", "show", &session]);
    assert_eq!(shown["status"], "RELEASED");
    let out = dir.path().join("fetched.bin");
    let fetched = cli(
        &srv,
        &[
            "adapter",
            "drm",
            "fetch",
            &session,
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(fetched["size"], content.len());
    assert_eq!(std::fs::read(&out).unwrap(), content);
    let mut agent = agent;
    let _ = agent.child.kill();
    let _ = agent.child.wait();

    drop(srv);
    let srv = serve(dir.path(), &port0(), &[]);
    let scrape = reqwest::blocking::get(format!("{}/metrics", srv.admin))
        .unwrap()
        .text()
        .unwrap();
    let series = format!("kep_adapter_released_bytes_total {}", content.len());
    assert!(
        scrape.lines().any(|l| l == series),
        "{series} after a restart, in\n{scrape}"
    );
}
