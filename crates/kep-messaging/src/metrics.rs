//! The messaging service's series on `/metrics` that are there from the start: each counter
//! whose labels are known then at 0, every series described.

use crate::kinds::{Channel, Status};
use crate::store::MessageCount;

pub(crate) const ACCEPTED: &str = "kep_messaging_accepted_total";
pub(crate) const FINISHED: &str = "kep_messaging_finished_total";
pub(crate) const TOKENS_ISSUED: &str = "kep_messaging_tokens_issued_total";
pub(crate) const QUEUE_DEPTH: &str = "kep_messaging_queue_depth";
const CARRIER_SUBMITTED: &str = "kep_messaging_carrier_submitted_total";
const CARRIER_ACKNOWLEDGED: &str = "kep_messaging_carrier_acknowledged_total";

/// Describes the series and makes the counters of every channel, final status and carrier
/// (`carriers`, the default one too), at 0: a dashboard or an alert on one sees 0, not
/// "no data", before the first message.
pub(crate) fn register(carriers: &[String]) {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        ACCEPTED,
        "Messages accepted, by channel: those the store held at start, and those accepted since"
    );
    describe_counter!(
        FINISHED,
        "Messages at their final status: those the store held at start, and those finished since"
    );
    describe_counter!(TOKENS_ISSUED, "OAuth 2.0 access tokens issued");
    describe_gauge!(
        QUEUE_DEPTH,
        "Messages accepted and not yet at a final status"
    );
    describe_histogram!(
        "kep_messaging_handover_seconds",
        "How long the carrier took to take a message, by route"
    );
    describe_counter!(CARRIER_SUBMITTED, "Hand-overs to each carrier");
    describe_counter!(CARRIER_ACKNOWLEDGED, "Hand-overs each carrier acknowledged");
    describe_counter!(
        "kep_messaging_carrier_receipts_total",
        "Delivery receipts from each carrier, by state"
    );
    describe_counter!(
        "kep_messaging_carrier_receipts_unknown_total",
        "Delivery receipts for a message kep does not know, dropped"
    );
    describe_counter!(
        "kep_messaging_carrier_reconnects_total",
        "Times an SMPP carrier's session was bound again"
    );
    describe_gauge!(
        "kep_messaging_carrier_window_in_use",
        "Submissions an SMPP carrier has not answered yet"
    );
    describe_gauge!(
        "kep_messaging_carrier_bound",
        "1 while an SMPP carrier's session is bound"
    );
    for channel in [Channel::Xms, Channel::Rcs] {
        metrics::counter!(ACCEPTED, "channel" => channel.as_str()).increment(0);
    }
    for status in [Status::Delivered, Status::Failed, Status::Resendable] {
        metrics::counter!(FINISHED, "status" => status.as_str()).increment(0);
    }
    metrics::counter!(TOKENS_ISSUED).increment(0);
    for carrier in carriers {
        metrics::counter!(CARRIER_SUBMITTED, "carrier" => carrier.clone()).increment(0);
        metrics::counter!(CARRIER_ACKNOWLEDGED, "carrier" => carrier.clone()).increment(0);
    }
}

/// Starts the message counters from what the store holds, once at start: after a restart
/// they go on from the stored totals instead of 0 beside a full outbox. A message no longer
/// stored (deleted with its client) is no longer counted after a restart.
pub(crate) fn seed(counts: &[MessageCount]) {
    for channel in [Channel::Xms, Channel::Rcs] {
        let accepted = counts
            .iter()
            .filter(|c| c.channel == channel)
            .map(|c| c.messages)
            .sum::<i64>();
        metrics::counter!(ACCEPTED, "channel" => channel.as_str()).absolute(whole(accepted));
    }
    for status in [Status::Delivered, Status::Failed, Status::Resendable] {
        let finished = counts
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.messages)
            .sum::<i64>();
        metrics::counter!(FINISHED, "status" => status.as_str()).absolute(whole(finished));
    }
}

fn whole(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
