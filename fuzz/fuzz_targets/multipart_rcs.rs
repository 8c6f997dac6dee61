//! `POST /v2/upload/rcs` through the messaging service's real router: the input's first line
//! is the Content-Type (its boundary), the rest the multipart body, read by axum's
//! `Multipart` and `Uploads::rcs` as the server reads them.
#![no_main]

use kep_fuzz::messaging::upload;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(json) = upload("/v2/upload/rcs", data) else {
        return;
    };
    // An accepted image is named by the URL a send's `media` takes.
    if json["code"] == "200" {
        let file_id = json["file_id"].as_str().expect("a file id");
        assert!(!file_id.is_empty());
        assert_eq!(json["url"], format!("maapfile://{file_id}"));
    }
});
