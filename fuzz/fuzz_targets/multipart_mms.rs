//! `POST /v2/upload/message/mms/files` through the messaging service's real router: the
//! input's first line is the Content-Type (its boundary), the rest the multipart body, read
//! by axum's `Multipart` and `Uploads::mms` as the server reads them.
#![no_main]

use kep_fuzz::messaging::upload;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(json) = upload("/v2/upload/message/mms/files", data) else {
        return;
    };
    if json["code"] == "200" {
        assert!(
            json["content_group_id"]
                .as_str()
                .is_some_and(|g| !g.is_empty())
        );
    }
});
