//! Activity: every state change of every service (a room opened, a message handed over, a
//! deployment's instance crashed …) is an [`ActivityEvent`]. Each is logged at info, with
//! its fields as structured fields, kept in a bounded backlog and streamed to operators as
//! Server-Sent Events (`GET /admin/v1/events`, in [`events`]). No event carries a secret.
//! A service names its object by its ids, top object first; the event carries them joined
//! as `object` and each under the name the service gives it ([`Service::OBJECT_IDS`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt::Display;
use std::sync::{Arc, Mutex};

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
pub use kep_api::activity::{ActivityEvent, ObjectIds};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::sync::broadcast;
use utoipa::IntoParams;

use crate::clock::Clock;
use crate::service::Service;

/// Where one of a service's ids goes in an event: `|i| &mut i.room_id`.
pub type IdField = fn(&mut ObjectIds) -> &mut Option<String>;

impl Filter {
    /// Whether `e` is what it asks for: of its service, its object or one under it, and
    /// its event or kind of object.
    fn admits(&self, e: &ActivityEvent) -> bool {
        let under = |of: &str| {
            e.object
                .strip_prefix(of)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        self.service.as_deref().is_none_or(|s| s == e.service)
            && self.object.as_deref().is_none_or(under)
            && self.event.as_deref().is_none_or(|k| {
                e.event
                    .strip_prefix(k)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
            })
    }
}

/// The platform's activity: one per platform, a handle per service.
#[derive(Clone)]
pub struct Activity(Arc<Inner>);

struct Inner {
    clock: Clock,
    capacity: usize,
    /// The last `capacity` events, and the id of the next.
    backlog: Mutex<(VecDeque<Arc<Recorded>>, u64)>,
    live: broadcast::Sender<Arc<Recorded>>,
}

/// An event, and its SSE frame once a watcher needed it: rendered once, whatever the
/// number of watchers.
struct Recorded {
    event: ActivityEvent,
    frame: OnceLock<Bytes>,
}

impl Recorded {
    fn frame(&self) -> &Bytes {
        self.frame.get_or_init(|| {
            let e = &self.event;
            let data = serde_json::to_string(e).expect("JSON serialises");
            Bytes::from(format!(
                "id: {}\nevent: {}\ndata: {data}\n\n",
                e.id, e.event
            ))
        })
    }
}

/// How many events a slow watcher may fall behind by before it is told it missed some:
/// well over what a busy platform makes while a stream gathers a write, and each slot
/// holds its event until overwritten (a few MB in all).
const WATCHER_QUEUE: usize = 8_192;

impl Activity {
    /// Keeps the last `capacity` events for watchers that connect later.
    pub fn new(clock: Clock, capacity: usize) -> Self {
        let (live, _) = broadcast::channel(WATCHER_QUEUE);
        Activity(Arc::new(Inner {
            clock,
            capacity,
            backlog: Mutex::new((VecDeque::with_capacity(capacity), 1)),
            live,
        }))
    }

    /// The handle service `S` records its events through.
    pub fn of<S: Service>(&self) -> ServiceActivity {
        self.service(S::NAME, S::OBJECT_IDS)
    }

    fn service(&self, service: &'static str, id_fields: &'static [IdField]) -> ServiceActivity {
        ServiceActivity {
            activity: self.clone(),
            service,
            id_fields,
        }
    }

    fn record(
        &self,
        service: &str,
        event: &str,
        object: String,
        ids: ObjectIds,
        detail: Map<String, Value>,
    ) {
        if tracing::enabled!(target: "kep::activity", tracing::Level::INFO) {
            let shown = serde_json::to_string(&detail).expect("JSON serialises");
            tracing::info!(
                target: "kep::activity",
                service,
                object = object.as_str(),
                detail = shown.as_str(),
                "{event}"
            );
        }
        let mut guard = self.0.backlog.lock().expect("activity backlog");
        let (backlog, next) = &mut *guard;
        let recorded = Arc::new(Recorded {
            event: ActivityEvent {
                id: *next,
                at: self.0.clock.unix_ms(),
                service: service.to_owned(),
                kind: event.to_owned(),
                event: event.to_owned(),
                object,
                ids,
                detail,
            },
            frame: OnceLock::new(),
        });
        *next += 1;
        if backlog.len() == self.0.capacity {
            backlog.pop_front();
        }
        if self.0.capacity > 0 {
            backlog.push_back(Arc::clone(&recorded));
        }
        // Sent under the lock, so that a watcher's backlog and its stream meet exactly.
        let _ = self.0.live.send(recorded);
    }

    /// The kept events after `after`, and the ones to come.
    fn watch(&self, after: u64) -> (Vec<Arc<Recorded>>, broadcast::Receiver<Arc<Recorded>>) {
        let guard = self.0.backlog.lock().expect("activity backlog");
        let kept = guard
            .0
            .iter()
            .filter(|r| r.event.id > after)
            .cloned()
            .collect();
        (kept, self.0.live.subscribe())
    }
}

/// A service's way to record its events.
#[derive(Clone)]
pub struct ServiceActivity {
    activity: Activity,
    service: &'static str,
    /// Where its ids go, its top object's first.
    id_fields: &'static [IdField],
}

impl ServiceActivity {
    /// Records that `event` happened to the object whose ids are `ids` (the service's top
    /// object's first), with `detail` (a JSON object; anything else is kept as
    /// `{"value": …}`).
    pub fn record(&self, event: &str, ids: &[&dyn Display], detail: Value) {
        debug_assert!(
            ids.len() <= self.id_fields.len(),
            "{event}: more ids than names"
        );
        let detail = match detail {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => Map::from_iter([("value".to_owned(), other)]),
        };
        let mut object = String::new();
        let mut named = ObjectIds::default();
        for (field, id) in self.id_fields.iter().zip(ids) {
            let id = id.to_string();
            if !object.is_empty() {
                object.push('/');
            }
            object.push_str(&id);
            *field(&mut named) = Some(id);
        }
        self.activity
            .record(self.service, event, object, named, detail);
    }
}

/// Which events a watcher wants.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Filter {
    /// Only this service's: `live`, `adapter`, `messaging`, `serving`.
    pub service: Option<String>,
    /// Only this object's and those under it (`demo` is live service demo, its rooms and
    /// their participants; `demo/lobby` one room).
    pub object: Option<String>,
    /// Only this event, or those of this kind of object (`room` is `room.opened`,
    /// `room.closed` …).
    pub event: Option<String>,
}

/// The platform's activity as Server-Sent Events: the kept events first (after the
/// `Last-Event-ID` header's, when given), then each as it happens. Each is an SSE event
/// named by its `event` with the [`ActivityEvent`] as JSON data; a watcher that falls
/// more than 8,192 events behind gets a `lagged` event `{"missed": n}` and goes on. A
/// comment every 15 s keeps an idle stream open through proxies.
#[utoipa::path(get, path = kep_api::activity::EVENTS, params(Filter,
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this event")),
    responses((status = 200, description = "A stream of activity events", content_type = "text/event-stream", body = ActivityEvent)),
    tag = "activity")]
pub async fn events(
    State(activity): State<Activity>,
    Query(filter): Query<Filter>,
    headers: HeaderMap,
) -> Response {
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok()?.trim().parse().ok())
        .unwrap_or(0);
    let (kept, live) = activity.watch(after);
    let last = kept.last().map_or(after, |r| r.event.id);
    let first = frames(&filter, kept.iter());
    let stream = futures_util::stream::unfold(
        (live, last, filter, Some(first)),
        |(mut live, last, filter, first)| async move {
            if let Some(first) = first {
                return Some((Ok(first), (live, last, filter, None)));
            }
            let chunk = next_chunk(&mut live, last, &filter).await?;
            Some((Ok::<_, Infallible>(chunk), (live, last, filter, None)))
        },
    );
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// How long an idle stream waits before a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The frames of the events a filter admits, as one chunk.
fn frames<'a>(filter: &Filter, events: impl Iterator<Item = &'a Arc<Recorded>>) -> Bytes {
    let mut out = BytesMut::new();
    for r in events.filter(|r| filter.admits(&r.event)) {
        out.extend_from_slice(r.frame());
    }
    out.freeze()
}

/// How long a stream gathers events after the first of a write: a busy platform makes tens
/// of thousands a second, and one write each would cost more than making them.
const GATHER: Duration = Duration::from_millis(20);

/// What the stream writes next: the events that came within [`GATHER`] of the first (one
/// write for a burst), a `lagged` event, or a keep-alive; none once the platform stops.
async fn next_chunk(
    live: &mut broadcast::Receiver<Arc<Recorded>>,
    last: u64,
    filter: &Filter,
) -> Option<Bytes> {
    use broadcast::error::{RecvError, TryRecvError};
    let mut out = BytesMut::new();
    let add = |next: Result<Arc<Recorded>, RecvError>, out: &mut BytesMut| match next {
        // Already sent from the backlog.
        Ok(r) if r.event.id <= last => true,
        Ok(r) if filter.admits(&r.event) => {
            out.extend_from_slice(r.frame());
            true
        }
        Ok(_) => true,
        Err(RecvError::Lagged(missed)) => {
            let lagged = format!("event: lagged\ndata: {{\"missed\":{missed}}}\n\n");
            out.extend_from_slice(lagged.as_bytes());
            true
        }
        Err(RecvError::Closed) => false,
    };
    loop {
        let Ok(first) = tokio::time::timeout(KEEP_ALIVE, live.recv()).await else {
            return Some(Bytes::from_static(b": keep-alive\n\n"));
        };
        if !add(first, &mut out) {
            return None;
        }
        tokio::time::sleep(GATHER).await;
        loop {
            let next = match live.try_recv() {
                Ok(r) => Ok(r),
                Err(TryRecvError::Lagged(n)) => Err(RecvError::Lagged(n)),
                Err(TryRecvError::Closed) => Err(RecvError::Closed),
                Err(TryRecvError::Empty) => break,
            };
            if !add(next, &mut out) {
                break;
            }
        }
        if !out.is_empty() {
            return Some(out.freeze());
        }
    }
}

/// The activity stream's part of the operator document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(events), components(schemas(ActivityEvent, ObjectIds)))]
pub struct ActivityDoc;

#[cfg(test)]
mod tests {
    use super::*;

    fn event(service: &str, event: &str, object: &str) -> ActivityEvent {
        ActivityEvent {
            id: 1,
            at: 0,
            service: service.into(),
            kind: event.into(),
            event: event.into(),
            object: object.into(),
            ids: ObjectIds::default(),
            detail: Map::new(),
        }
    }

    const LIVE: &[IdField] = &[
        |i| &mut i.service_id,
        |i| &mut i.room_id,
        |i| &mut i.participant_id,
    ];
    const SERVING: &[IdField] = &[
        |i| &mut i.endpoint,
        |i| &mut i.deployment,
        |i| &mut i.instance,
    ];

    #[test]
    fn an_event_names_its_object_by_its_ids_joined_and_each_by_its_name() {
        let activity = Activity::new(Clock::system(), 3);
        let live = activity.service("live", LIVE);
        live.record("room.opened", &[&"demo", &"lobby"], Value::Null);
        live.record("participant.joined", &[&"demo", &"lobby", &7], Value::Null);
        let (kept, _) = activity.watch(0);
        let room = &kept[0].event;
        assert_eq!(
            (room.kind.as_str(), room.event.as_str()),
            ("room.opened", "room.opened")
        );
        assert_eq!(room.object, "demo/lobby");
        let ids = ObjectIds {
            service_id: Some("demo".into()),
            room_id: Some("lobby".into()),
            ..ObjectIds::default()
        };
        assert_eq!(room.ids, ids);
        let participant = &kept[1].event;
        assert_eq!(participant.object, "demo/lobby/7");
        // On the wire, each id is a field of the event beside the others.
        let json = serde_json::to_value(participant).unwrap();
        assert_eq!(
            (&json["serviceId"], &json["roomId"], &json["participantId"]),
            (&"demo".into(), &"lobby".into(), &"7".into())
        );
        assert_eq!(json["kind"], "participant.joined");
        assert!(json.get("endpoint").is_none(), "{json}");
        let back: ActivityEvent = serde_json::from_value(json).unwrap();
        assert_eq!(&back, participant);
    }

    #[test]
    fn a_filter_takes_a_service_an_object_and_what_is_under_it() {
        let e = event("live", "participant.joined", "demo/lobby/alice");
        let f = |service: Option<&str>, object: Option<&str>, event: Option<&str>| Filter {
            service: service.map(Into::into),
            object: object.map(Into::into),
            event: event.map(Into::into),
        };
        assert!(Filter::default().admits(&e));
        assert!(f(Some("live"), Some("demo"), None).admits(&e));
        assert!(f(None, Some("demo/lobby"), Some("participant")).admits(&e));
        assert!(f(None, Some("demo/lobby/alice"), Some("participant.joined")).admits(&e));
        assert!(!f(Some("messaging"), None, None).admits(&e));
        // A prefix of an id is another object.
        assert!(!f(None, Some("dem"), None).admits(&e));
        assert!(!f(None, Some("demo/lob"), None).admits(&e));
        assert!(!f(None, None, Some("part")).admits(&e));
        assert!(!f(None, None, Some("participant.left")).admits(&e));
    }

    #[test]
    fn the_backlog_keeps_the_last_events_and_resumes_after_an_id() {
        let activity = Activity::new(Clock::system(), 3);
        let live = activity.service("live", LIVE);
        for room in ["a", "b", "c", "d"] {
            live.record("room.opened", &[&"demo", &room], Value::Null);
        }
        let (kept, _) = activity.watch(0);
        let ids: Vec<u64> = kept.iter().map(|r| r.event.id).collect();
        assert_eq!(ids, [2, 3, 4]);
        let (kept, mut rx) = activity.watch(3);
        assert_eq!(kept.len(), 1);
        live.record(
            "room.closed",
            &[&"demo", &"a"],
            serde_json::json!({"reason": "empty"}),
        );
        let next = &rx.try_recv().unwrap().event;
        assert_eq!((next.id, next.event.as_str()), (5, "room.closed"));
        assert_eq!(next.detail["reason"], "empty");
    }

    #[tokio::test]
    async fn a_watcher_that_fell_behind_is_told_how_many_it_missed_and_goes_on() {
        let activity = Activity::new(Clock::system(), 10);
        let (_, mut live) = activity.watch(0);
        let serving = activity.service("serving", SERVING);
        let behind = WATCHER_QUEUE + 5;
        for i in 0..behind {
            serving.record("instance.ready", &[&"ep", &"d", &i], Value::Null);
        }
        let all = Filter::default();
        let chunk = next_chunk(&mut live, 0, &all).await.unwrap();
        let text = std::str::from_utf8(&chunk).unwrap();
        assert!(
            text.starts_with("event: lagged\ndata: {\"missed\":5}\n\n"),
            "{}",
            &text[..80]
        );
        // The rest, each once, in order, in the same write.
        assert_eq!(
            text.matches("event: instance.ready\n").count(),
            WATCHER_QUEUE
        );
        assert!(text.contains(&format!("id: {behind}\n")));
        // A filter leaves out what it does not admit.
        serving.record("alert.sent", &[&"ep"], Value::Null);
        serving.record("instance.ready", &[&"other", &"d", &1], Value::Null);
        let only_ep = Filter {
            object: Some("ep".into()),
            ..Filter::default()
        };
        let chunk = next_chunk(&mut live, 0, &only_ep).await.unwrap();
        let text = std::str::from_utf8(&chunk).unwrap();
        assert!(
            text.contains("event: alert.sent") && !text.contains("other/d/1"),
            "{text}"
        );
    }
}
