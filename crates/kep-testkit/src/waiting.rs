//! Waiting until a server has done something, and holding a request in flight.

use std::time::{Duration, Instant};

/// Retries `check` until it is `Ok`, then returns what it gave; past `timeout`, panics with
/// `what` and the last `Err`. Waits 10 ms between tries at first, twice as long each time
/// up to 200 ms. For waiting until something has happened; a test that must see that
/// nothing happens within a window sleeps through it instead.
pub async fn eventually<T, E: std::fmt::Display>(
    timeout: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    let (deadline, mut pause) = (Instant::now() + timeout, Duration::from_millis(10));
    loop {
        match check().await {
            Ok(done) => return done,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what}: not within {timeout:?}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(pause).await,
        }
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// A request on its way: its answer, once it comes, and the sender that lets the rest of
/// its body go.
pub type Held = (
    tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
    tokio::sync::oneshot::Sender<()>,
);

/// Sends `request` with a body that gives `head` at once and `rest` only when the returned
/// sender is used or dropped: a request the server holds in flight for as long as the
/// caller wants (how the tests reach a limit of requests in flight).
pub fn held(request: reqwest::RequestBuilder, head: Vec<u8>, rest: Vec<u8>) -> Held {
    use futures_util::StreamExt as _;
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let body = futures_util::stream::iter([Ok::<_, std::io::Error>(head)]).chain(
        futures_util::stream::once(async move {
            let _ = released.await;
            Ok(rest)
        }),
    );
    let call = request.body(reqwest::Body::wrap_stream(body)).send();
    (tokio::spawn(call), release)
}
