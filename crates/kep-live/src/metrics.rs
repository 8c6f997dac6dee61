//! The live service's series on `/metrics`: JSON-RPC calls by method and result, socket
//! messages each way, and (read at each scrape) its rooms, participants and streams. Each
//! is there from the start, at 0 (the calls of each method with result `ok`).

use std::borrow::Cow;
use std::sync::LazyLock;

use bytes::Bytes;
use metrics::Counter;

use crate::LiveError;

/// The methods of the API, the only values of the `method` label (any other is `other`).
const METHODS: [&str; 7] = [
    "Provision",
    "Room.ListRooms",
    "Room.ListParticipants",
    "Room.DestroyRoom",
    "Room.KickParticipant",
    "Room.InactiveStream",
    "Room.InactivateStream",
];

const RPC_CALLS: &str = "kep_live_rpc_calls_total";

/// Describes the series and makes those whose labels are known before the first call, at
/// 0: a dashboard or an alert on one sees 0, not "no data".
pub(crate) fn register() {
    metrics::describe_counter!(
        RPC_CALLS,
        "JSON-RPC calls by method and result (`ok` or the error's code)"
    );
    metrics::describe_counter!(
        "kep_live_socket_messages_total",
        "Participant socket messages, `in` (text frames read) and `out`"
    );
    metrics::describe_gauge!("kep_live_rooms", "Open rooms, of every live service");
    metrics::describe_gauge!("kep_live_participants", "Participants in the rooms");
    metrics::describe_gauge!("kep_live_streams", "Streams the participants publish");
    for method in METHODS {
        metrics::counter!(RPC_CALLS, "method" => method, "result" => "ok").increment(0);
    }
    LazyLock::force(&SOCKET_IN);
    LazyLock::force(&SOCKET_OUT);
}

/// Counts a JSON-RPC call: `result` is `ok` or the error's code.
pub(crate) fn rpc_call(method: Option<&str>, outcome: &Result<Bytes, LiveError>) {
    let method = method
        .and_then(|m| METHODS.iter().find(|known| **known == m).copied())
        .unwrap_or("other");
    let result: Cow<'static, str> = match outcome {
        Ok(_) => Cow::Borrowed("ok"),
        Err(e) => Cow::Owned(e.code().to_string()),
    };
    metrics::counter!(RPC_CALLS, "method" => method, "result" => result).increment(1);
}

/// Messages participants' sockets received (text frames).
pub(crate) static SOCKET_IN: LazyLock<Counter> =
    LazyLock::new(|| metrics::counter!("kep_live_socket_messages_total", "direction" => "in"));
/// Messages sent to participants' sockets (events, answers, closes).
pub(crate) static SOCKET_OUT: LazyLock<Counter> =
    LazyLock::new(|| metrics::counter!("kep_live_socket_messages_total", "direction" => "out"));

impl crate::LiveService {
    /// Sets the gauges of what the service holds now: called at each scrape.
    pub fn observe(&self) {
        let (rooms, participants, streams) = self.0.rooms.counts();
        metrics::gauge!("kep_live_rooms").set(rooms as f64);
        metrics::gauge!("kep_live_participants").set(participants as f64);
        metrics::gauge!("kep_live_streams").set(streams as f64);
    }
}
