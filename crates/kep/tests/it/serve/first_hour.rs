//! What a new user meets in the first hour: where the console is, a second `kep` on busy
//! ports, the CLI's global flags, and output cut short by a pipe.

use std::process::Command;

use serde_json::Value;

use crate::common::{KEP, port0, serve, serve_refused};

#[test]
fn the_console_is_printed_and_a_second_kep_on_busy_ports_says_how_to_move_them() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(&dir.path().join("first"), &port0(), &[]);
    assert!(
        srv.stdout
            .contains(&format!("console: {}/console", srv.admin)),
        "{}",
        srv.stdout
    );

    // Another kep, its admin listener where the first one's is.
    let second = dir.path().join("second");
    let taken = srv.admin.trim_start_matches("http://");
    let err = serve_refused(&second, &["--port-base", "0", "--admin-addr", taken], &[]);
    assert!(err.contains("--port-base"), "{err}");
    assert!(err.contains(taken), "{err}");
    assert!(
        !second.join("admin-token").exists(),
        "a start that failed leaves no operator token"
    );
}

#[test]
fn the_data_dir_may_come_before_the_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let _srv = serve(dir.path(), &port0(), &[]);
    for args in [
        vec![
            "--data-dir",
            dir.path().to_str().unwrap(),
            "live",
            "service",
            "list",
        ],
        vec![
            "live",
            "service",
            "list",
            "--data-dir",
            dir.path().to_str().unwrap(),
        ],
    ] {
        let out = Command::new(KEP).args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(listed, serde_json::json!([]), "{args:?}");
    }
}

#[test]
fn output_cut_short_by_a_pipe_ends_quietly() {
    let out = Command::new("bash")
        .args(["-c", r#""$0" completions bash | head -1"#, KEP])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "nothing said of the pipe"
    );
}
