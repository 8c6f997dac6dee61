//! The serving service's part of the platform's activity stream: what the operator changes
//! and what the runtime does with it, an instance's crash with its last log lines.

use std::time::Duration;

use kep_client::AdminClient;
use kep_client::activity::{Events, Watch, Watched};
use serde_json::{Value, json};

use crate::common::*;

/// The next `event` of `object` (or of one under it, for an object ending in `/`), the
/// events before it passed over.
async fn until(events: &mut Events, event: &str, object: &str) -> Value {
    let wait = async {
        loop {
            let next = events.next().await.unwrap().unwrap();
            if let Watched::Event(e) = &next {
                // Its ids, each by its name, are its object's.
                let ids = [&e.ids.endpoint, &e.ids.deployment, &e.ids.instance];
                let named: Vec<&str> = ids.iter().filter_map(|i| i.as_deref()).collect();
                assert_eq!((named.join("/"), &e.kind), (e.object.clone(), &e.event));
            }
            match next {
                Watched::Event(e)
                    if e.event == event
                        && (e.object == object
                            || object.ends_with('/') && e.object.starts_with(object)) =>
                {
                    return Value::Object(e.detail);
                }
                Watched::Event(_) => {}
                Watched::Lagged(n) => panic!("lagged by {n}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .unwrap_or_else(|_| panic!("no {event} of {object} within 30 s"))
}

#[tokio::test]
async fn deployments_and_their_instances_are_activity_events() {
    let srv = spawn(|_, _| {}).await;
    let admin = AdminClient::new(&srv.admin, OPERATOR_TOKEN);
    let watch = Watch {
        service: Some("serving".into()),
        ..Watch::default()
    };
    let mut events = admin.events(&watch).await.unwrap();
    srv.image("echo").await;
    srv.endpoint("ep", 1).await;
    let detail = until(&mut events, "endpoint.created", "ep").await;
    assert_eq!(detail["instanceCount"], 1);
    srv.deploy("ep", custom("good", json!({}))).await;
    until(&mut events, "deployment.created", "ep/good").await;
    let progressing = until(&mut events, "deployment.state", "ep/good").await;
    assert_eq!(progressing["to"], "progressing");
    until(&mut events, "instance.ready", "ep/good/").await;
    let available = until(&mut events, "deployment.state", "ep/good").await;
    assert_eq!(available["to"], "available");

    // One that exits at once: it fails, with what it wrote, and is restarted.
    srv.deploy("ep", custom("bad", json!({"MODE": "exit"})))
        .await;
    let restarted = until(&mut events, "instance.restarted", "ep/bad/").await;
    let log = restarted["log"].as_array().unwrap();
    assert!(
        log.iter().any(|l| l == "exiting as asked"),
        "the instance's last lines: {log:?}"
    );

    srv.delete("/endpoints/ep/deployments/bad").await;
    until(&mut events, "deployment.deleted", "ep/bad").await;
    srv.delete("/endpoints/ep").await;
    until(&mut events, "endpoint.deleted", "ep").await;
}
