//! What the typed store writes is byte for byte what the untyped one wrote (the literals
//! below are its words and serde_json's text), so databases written before read back.

use std::collections::BTreeMap;

use kep_model_server::model::{DataType, TensorSpec};
use sqlx::SqlitePool;

use super::{SQLITE, SqliteStore};
use crate::deployment::DeploymentSpec;
use crate::ids::{DeploymentName, EndpointName, InstanceId};
use crate::kinds::{AlertStatus, Condition, DeploymentState, ImageSource, InstanceState, Protocol};
use crate::store::{
    AlertCondition, AlertSettings, Change, DeploymentRow, EndpointRow, ImageRow, Lifecycle,
    ModelRow, NewAlert, NewEvent, Store,
};

async fn open() -> (SqliteStore, SqlitePool, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let pool = kep_core::storage::open(dir.path(), "serving", &SQLITE)
        .await
        .unwrap();
    (SqliteStore::new(pool.clone()), pool, dir)
}

async fn text(pool: &SqlitePool, sql: &'static str) -> Vec<Option<String>> {
    sqlx::query_scalar(sql).fetch_all(pool).await.unwrap()
}

/// An event's kind, instance, from_state, to_state and reason.
type EventColumns = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn endpoint() -> EndpointRow {
    EndpointRow {
        name: "e1".into(),
        description: None,
        instance_type: "cpu-small".into(),
        instance_count: 1,
        protocol: Protocol::Grpc,
        key_hash: "00".repeat(32),
        mirroring: false,
        responder: None,
        created_at: 1,
    }
}

#[tokio::test]
async fn images_models_endpoints_and_deployments_are_stored_as_before() {
    let (store, pool, _dir) = open().await;
    let image = ImageRow {
        id: "i1".into(),
        name: "echo".into(),
        command: Some(vec!["python3".into(), "serve.py".into()]),
        reference: None,
        engine_id: None,
        size: None,
        source: None,
        created_at: 1,
    };
    assert!(store.insert_image(&image).await.unwrap());
    assert!(
        !store.insert_image(&image).await.unwrap(),
        "the name is taken"
    );
    let tensor = |name: &str| TensorSpec {
        name: name.into(),
        datatype: DataType::Fp32,
        shape: vec![-1, 3],
    };
    let model = ModelRow {
        id: "m1".into(),
        name: "iris".into(),
        framework: "onnx".into(),
        path: "/models/m1".into(),
        size: 10,
        sha256: "ab".into(),
        created_at: 1,
        inputs: vec![tensor("x")],
        outputs: vec![tensor("y")],
        format: "savedmodel".into(),
        versions: vec![1, 2],
        signatures: Some(vec![kep_model_server::framework::SignatureDef {
            name: "serving_default".into(),
            method: Some("tensorflow/serving/predict".into()),
            inputs: vec![tensor("x")],
            outputs: vec![tensor("y")],
        }]),
    };
    assert!(store.insert_model(&model).await.unwrap());
    let read = store.model(&model.name).await.unwrap().unwrap();
    assert_eq!(
        (read.format, read.versions, read.signatures),
        (
            model.format.clone(),
            model.versions.clone(),
            model.signatures.clone()
        )
    );
    assert!(store.insert_endpoint(&endpoint()).await.unwrap());
    assert!(!store.insert_endpoint(&endpoint()).await.unwrap());
    let spec = r#"{"type":"custom-image","image":{"id":"i1","name":"echo","command":["python3","serve.py"]},"env":{"A":"1"},"port":8080}"#;
    let spec: DeploymentSpec = serde_json::from_str(spec).unwrap();
    let deployment = DeploymentRow {
        endpoint: "e1".into(),
        name: "d1".into(),
        spec: spec.clone(),
        weight: 100,
        created_at: 1,
        updated_at: 1,
    };
    store.insert_deployment(&deployment).await.unwrap();

    assert_eq!(
        text(&pool, "SELECT command FROM images").await,
        [Some(r#"["python3","serve.py"]"#.into())]
    );
    assert_eq!(
        text(&pool, "SELECT inputs || ' ' || outputs FROM models").await,
        [Some(
            r#"[{"name":"x","datatype":"FP32","shape":[-1,3]}] [{"name":"y","datatype":"FP32","shape":[-1,3]}]"#
                .into()
        )]
    );
    assert_eq!(
        text(&pool, "SELECT protocol FROM endpoints").await,
        [Some("grpc".into())]
    );
    assert_eq!(
        text(&pool, "SELECT spec FROM deployments").await,
        [Some(
            r#"{"type":"custom-image","image":{"id":"i1","name":"echo","command":["python3","serve.py"]},"env":{"A":"1"},"port":8080}"#
                .into()
        )]
    );

    let read = store.image(&"echo".into()).await.unwrap().unwrap();
    assert_eq!(read.command, image.command);
    let engine = ImageRow {
        id: "i2".into(),
        name: "httpd".into(),
        command: None,
        reference: Some("kep-test/httpd:1".into()),
        engine_id: Some("sha256:08cc".into()),
        size: Some(2_000_000),
        source: Some(ImageSource::Archive),
        created_at: 1,
    };
    assert!(store.insert_image(&engine).await.unwrap());
    assert_eq!(
        text(&pool, "SELECT command || source FROM images ORDER BY name").await,
        [None, None],
        "an engine image has no command, a command image no source"
    );
    assert_eq!(
        text(&pool, "SELECT source FROM images WHERE name = 'httpd'").await,
        [Some("archive".into())]
    );
    let read = store.image(&"httpd".into()).await.unwrap().unwrap();
    assert_eq!(
        (
            read.command,
            read.reference,
            read.engine_id,
            read.size,
            read.source
        ),
        (
            None,
            engine.reference,
            engine.engine_id,
            engine.size,
            engine.source
        )
    );
    let read = store.model(&"iris".into()).await.unwrap().unwrap();
    assert_eq!((read.inputs, read.outputs), (model.inputs, model.outputs));
    let read = store.endpoint(&"e1".into()).await.unwrap().unwrap();
    assert_eq!(read.protocol, Protocol::Grpc);
    let read = store.deployments(None).await.unwrap();
    assert_eq!(read[0].spec, spec);
}

#[tokio::test]
async fn events_are_stored_in_the_words_of_their_kind() {
    let (store, pool, _dir) = open().await;
    let i = InstanceId::from("d1-abcde");
    let reason = Some("readiness probe failed: refused".to_owned());
    let changes = [
        Change::Deployment {
            from: None,
            to: DeploymentState::Progressing,
            lifecycle: Some(Lifecycle::Started),
        },
        Change::Deployment {
            from: Some(DeploymentState::Progressing),
            to: DeploymentState::Available,
            lifecycle: None,
        },
        Change::Instance {
            instance: i.clone(),
            from: InstanceState::Pending,
            to: InstanceState::Running,
            reason: None,
        },
        Change::Ready {
            instance: i.clone(),
            ready: true,
            reason: None,
        },
        Change::Ready {
            instance: i.clone(),
            ready: false,
            reason: reason.clone(),
        },
        Change::Restart {
            instance: i.clone(),
            reason: reason.clone(),
        },
    ];
    for change in changes {
        let event = NewEvent {
            at_ms: 1,
            endpoint: EndpointName::from("e1"),
            deployment: DeploymentName::from("d1"),
            change,
        };
        store.insert_event(&event).await.unwrap();
    }
    let rows: Vec<EventColumns> = sqlx::query_as(
        "SELECT kind, instance, from_state, to_state, reason FROM events ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let i = s("d1-abcde");
    assert_eq!(
        rows,
        [
            (
                "deployment_state".into(),
                None,
                None,
                s("Progressing"),
                s("kep started")
            ),
            (
                "deployment_state".into(),
                None,
                s("Progressing"),
                s("Available"),
                None
            ),
            (
                "instance_state".into(),
                i.clone(),
                s("Pending"),
                s("Running"),
                None
            ),
            ("ready".into(), i.clone(), s("not ready"), s("ready"), None),
            (
                "ready".into(),
                i.clone(),
                s("ready"),
                s("not ready"),
                reason.clone()
            ),
            ("restart".into(), i, None, None, reason),
        ]
    );
    let read = store.events(&"e1".into(), &"d1".into(), 10).await.unwrap();
    let kinds: Vec<&str> = read.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "restart",
            "ready",
            "ready",
            "instance_state",
            "deployment_state",
            "deployment_state"
        ]
    );
}

#[tokio::test]
async fn alerts_and_their_settings_are_stored_as_before() {
    let (store, pool, _dir) = open().await;
    store.insert_endpoint(&endpoint()).await.unwrap();
    let settings = AlertSettings {
        enabled: true,
        webhook_url: Some("http://127.0.0.1:9/hook".into()),
        conditions: BTreeMap::from([(
            "qps".to_owned(),
            AlertCondition {
                enabled: true,
                threshold: Some(1.5),
            },
        )]),
    };
    store
        .set_alert_settings(&"e1".into(), &settings)
        .await
        .unwrap();
    assert_eq!(
        text(&pool, "SELECT settings FROM alert_settings").await,
        [Some(serde_json::to_string(&settings).unwrap())]
    );
    // The API's type wrote the same text before the store had its own.
    assert_eq!(
        serde_json::to_string(&settings).unwrap(),
        serde_json::to_string(&kep_api::serving::AlertSettings::from(settings.clone())).unwrap()
    );
    assert_eq!(
        store.alert_settings().await.unwrap(),
        [(EndpointName::from("e1"), settings)]
    );

    let conditions = [
        (Condition::Qps, "qps"),
        (Condition::Status4xx, "status_4xx"),
        (Condition::Status5xx, "status_5xx"),
        (Condition::StateProgressing, "state_progressing"),
        (Condition::StateAvailable, "state_available"),
        (Condition::CpuUpper, "cpu_upper"),
        (Condition::CpuLower, "cpu_lower"),
        (Condition::MemoryUpper, "memory_upper"),
        (Condition::MemoryLower, "memory_lower"),
        (Condition::GpuUpper, "gpu_upper"),
        (Condition::GpuLower, "gpu_lower"),
        (Condition::MonitoringLog, "monitoring_log"),
    ];
    let mut ids = Vec::new();
    for (condition, _) in conditions {
        let alert = NewAlert {
            endpoint: "e1".into(),
            deployment: Some("d1".into()),
            condition,
            text: "t".into(),
        };
        ids.push(
            store
                .insert_alert(&alert, "http://h/", 1, None)
                .await
                .unwrap(),
        );
    }
    store
        .alert_attempted(ids[0], AlertStatus::Sent, 1, None, Some(2))
        .await
        .unwrap();
    store
        .alert_attempted(ids[1], AlertStatus::Failed, 6, Some("down"), None)
        .await
        .unwrap();
    assert_eq!(
        text(&pool, "SELECT condition FROM alerts ORDER BY id").await,
        conditions.map(|(_, word)| Some(word.to_owned()))
    );
    let statuses = text(&pool, "SELECT status FROM alerts ORDER BY id LIMIT 3").await;
    assert_eq!(statuses, [s("sent"), s("failed"), s("pending")]);
    let pending = store.adopt_alerts(None, &[]).await.unwrap();
    let pending: Vec<crate::ids::AlertId> = pending.into_iter().map(|(_, id)| id).collect();
    assert_eq!(pending, ids[2..], "the pending ones, oldest first");
    let read = store.alerts(&"e1".into(), 100).await.unwrap();
    let words: Vec<&str> = read.iter().rev().map(|a| a.condition.as_str()).collect();
    assert_eq!(words, conditions.map(|(_, word)| word));
}

fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}
