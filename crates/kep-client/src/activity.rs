//! The platform's activity stream (`GET /admin/v1/events`, Server-Sent Events).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::{Stream, StreamExt as _};
use kep_api::activity::{ActivityEvent, EVENTS};

use crate::{AdminClient, ClientError};

/// Which events to watch: every one left out takes all.
#[derive(Debug, Default, Clone)]
pub struct Watch {
    pub service: Option<String>,
    /// An object and those under it: `demo`, `demo/lobby`.
    pub object: Option<String>,
    /// An event, or a kind of object (`room`).
    pub event: Option<String>,
    /// Resume after this event id (`Last-Event-ID`).
    pub after: Option<u64>,
}

/// What the stream brings.
#[derive(Debug, Clone, PartialEq)]
pub enum Watched {
    /// Boxed: an event is many times the size of the rare `Lagged`.
    Event(Box<ActivityEvent>),
    /// The watcher fell behind and missed this many events.
    Lagged(u64),
}

/// The activity stream as it comes: a [`Stream`], or `next` for one at a time.
pub struct Events(Pin<Box<dyn Stream<Item = Result<Watched, ClientError>> + Send>>);

impl Events {
    /// The next thing the stream brings; `None` once the server ended it.
    pub async fn next(&mut self) -> Option<Result<Watched, ClientError>> {
        self.0.next().await
    }
}

impl Stream for Events {
    type Item = Result<Watched, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

impl AdminClient {
    /// The activity: the kept events, then each as it happens, until the server stops.
    pub async fn events(&self, watch: &Watch) -> Result<Events, ClientError> {
        let query: Vec<(&str, &str)> = [
            ("service", &watch.service),
            ("object", &watch.object),
            ("event", &watch.event),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.as_deref()?)))
        .collect();
        let mut req = self.http.get(self.url(EVENTS)).query(&query);
        if let Some(after) = watch.after {
            req = req.header("last-event-id", after.to_string());
        }
        let bytes = self.send_raw(req).await?.bytes_stream();
        let events = futures_util::stream::unfold(
            (bytes, Vec::<u8>::new()),
            |(mut bytes, mut buf)| async move {
                loop {
                    // An SSE event ends at a blank line.
                    if let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
                        let block: Vec<u8> = buf.drain(..end + 2).collect();
                        match parse(&String::from_utf8_lossy(&block)) {
                            Some(item) => return Some((item, (bytes, buf))),
                            None => continue,
                        }
                    }
                    match bytes.next().await? {
                        Ok(chunk) => buf.extend_from_slice(&chunk),
                        Err(e) => return Some((Err(e.into()), (bytes, buf))),
                    }
                }
            },
        );
        Ok(Events(Box::pin(events)))
    }
}

/// One SSE event's block; none for a comment (the keep-alive).
fn parse(block: &str) -> Option<Result<Watched, ClientError>> {
    let (mut name, mut data) = (None, String::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            name = Some(v.trim());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    if data.is_empty() {
        return None;
    }
    let bad = |e: serde_json::Error| ClientError::Protocol(format!("an activity event: {e}"));
    Some(match name {
        Some("lagged") => serde_json::from_str::<serde_json::Value>(&data)
            .map_err(bad)
            .map(|v| Watched::Lagged(v["missed"].as_u64().unwrap_or(0))),
        _ => serde_json::from_str(&data)
            .map(|e| Watched::Event(Box::new(e)))
            .map_err(bad),
    })
}
