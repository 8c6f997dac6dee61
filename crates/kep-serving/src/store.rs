//! Persistence of images, models, endpoints, deployments, instance processes and events in
//! `serving.db`. Deployments keep their resolved spec as JSON.

use std::collections::BTreeMap;

use sqlx::SqlitePool;
use sqlx::migrate::Migrator;

pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// An alerts query: sqlx takes only static SQL, so the shared columns are pasted in.
macro_rules! select_alerts {
    ($rest:literal) => {
        concat!(
            "SELECT id, endpoint, deployment, condition, text, webhook_url, status, attempts, ",
            "error, at_ms, sent_at_ms FROM alerts ",
            $rest
        )
    };
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ImageRow {
    pub id: String,
    pub name: String,
    pub command: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ModelRow {
    pub id: String,
    pub name: String,
    pub framework: String,
    pub path: String,
    pub size: i64,
    pub sha256: String,
    pub created_at: i64,
    /// JSON: `[{name, datatype, shape}]`.
    pub inputs: String,
    pub outputs: String,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EndpointRow {
    pub name: String,
    pub description: Option<String>,
    pub instance_type: String,
    pub instance_count: i64,
    pub protocol: String,
    pub key_hash: String,
    pub mirroring: bool,
    pub responder: Option<String>,
    pub created_at: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeploymentRow {
    pub endpoint: String,
    pub name: String,
    pub spec: String,
    pub weight: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRow {
    pub id: i64,
    pub at_ms: i64,
    pub deployment: String,
    pub instance: Option<String>,
    pub kind: String,
    pub from_state: Option<String>,
    pub to_state: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AlertRow {
    pub id: i64,
    pub endpoint: String,
    pub deployment: Option<String>,
    pub condition: String,
    pub text: String,
    pub webhook_url: String,
    pub status: String,
    pub attempts: i64,
    pub error: Option<String>,
    pub at_ms: i64,
    pub sent_at_ms: Option<i64>,
}

/// An alert raised, before it is queued.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAlert {
    pub endpoint: String,
    pub deployment: Option<String>,
    pub condition: &'static str,
    pub text: String,
}

/// A recorded transition, as the runtime reports it.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub at_ms: i64,
    pub endpoint: String,
    pub deployment: String,
    pub instance: Option<String>,
    pub kind: &'static str,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: Option<String>,
}

/// Whether a failed insert hit a unique index (a name already taken).
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
}

impl Store {
    pub fn new(pool: SqlitePool) -> Self {
        Store { pool }
    }

    pub async fn insert_image(&self, row: &ImageRow) -> sqlx::Result<()> {
        sqlx::query("INSERT INTO images (id, name, command, created_at) VALUES (?, ?, ?, ?)")
            .bind(&row.id)
            .bind(&row.name)
            .bind(&row.command)
            .bind(row.created_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn images(&self) -> sqlx::Result<Vec<ImageRow>> {
        sqlx::query_as(
            "SELECT id, name, command, created_at FROM images WHERE deleted = 0 ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
    }

    pub async fn image(&self, name: &str) -> sqlx::Result<Option<ImageRow>> {
        sqlx::query_as(
            "SELECT id, name, command, created_at FROM images WHERE deleted = 0 AND name = ?",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await
    }

    /// Soft delete: deployments made from it keep running but can no longer be edited.
    pub async fn delete_image(&self, name: &str) -> sqlx::Result<bool> {
        let r = sqlx::query("UPDATE images SET deleted = 1 WHERE deleted = 0 AND name = ?")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    pub async fn insert_model(&self, row: &ModelRow) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO models (id, name, framework, path, size, sha256, created_at, inputs, outputs)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&row.id)
        .bind(&row.name)
        .bind(&row.framework)
        .bind(&row.path)
        .bind(row.size)
        .bind(&row.sha256)
        .bind(row.created_at)
        .bind(&row.inputs)
        .bind(&row.outputs)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn models(&self) -> sqlx::Result<Vec<ModelRow>> {
        sqlx::query_as(
            "SELECT id, name, framework, path, size, sha256, created_at, inputs, outputs FROM models
             WHERE deleted = 0 ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
    }

    pub async fn model(&self, name: &str) -> sqlx::Result<Option<ModelRow>> {
        sqlx::query_as(
            "SELECT id, name, framework, path, size, sha256, created_at, inputs, outputs FROM models
             WHERE deleted = 0 AND name = ?",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await
    }

    /// Soft delete; the file stays while a deployment may still serve it.
    pub async fn delete_model(&self, name: &str) -> sqlx::Result<bool> {
        let r = sqlx::query("UPDATE models SET deleted = 1 WHERE deleted = 0 AND name = ?")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    /// Which of these image or model ids are still registered.
    pub async fn live_sources(&self) -> sqlx::Result<Vec<String>> {
        sqlx::query_scalar(
            "SELECT id FROM images WHERE deleted = 0 UNION ALL SELECT id FROM models WHERE deleted = 0",
        )
        .fetch_all(&self.pool)
        .await
    }

    pub async fn insert_endpoint(&self, row: &EndpointRow) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO endpoints (name, description, instance_type, instance_count, protocol,
                                    key_hash, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&row.name)
        .bind(&row.description)
        .bind(&row.instance_type)
        .bind(row.instance_count)
        .bind(&row.protocol)
        .bind(&row.key_hash)
        .bind(row.created_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn endpoints(&self) -> sqlx::Result<Vec<EndpointRow>> {
        sqlx::query_as("SELECT * FROM endpoints ORDER BY name")
            .fetch_all(&self.pool)
            .await
    }

    pub async fn endpoint(&self, name: &str) -> sqlx::Result<Option<EndpointRow>> {
        sqlx::query_as("SELECT * FROM endpoints WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
    }

    /// Deletes the endpoint and, by cascade, its deployments.
    pub async fn delete_endpoint(&self, name: &str) -> sqlx::Result<bool> {
        let r = sqlx::query("DELETE FROM endpoints WHERE name = ?")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    pub async fn set_key_hash(&self, endpoint: &str, hash: &str) -> sqlx::Result<()> {
        sqlx::query("UPDATE endpoints SET key_hash = ? WHERE name = ?")
            .bind(hash)
            .bind(endpoint)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn set_mirroring(
        &self,
        endpoint: &str,
        enabled: bool,
        responder: Option<&str>,
    ) -> sqlx::Result<()> {
        sqlx::query("UPDATE endpoints SET mirroring = ?, responder = ? WHERE name = ?")
            .bind(enabled)
            .bind(responder)
            .bind(endpoint)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn insert_deployment(&self, row: &DeploymentRow) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO deployments (endpoint, name, position, spec, weight, created_at, updated_at)
             VALUES (?, ?, (SELECT COALESCE(MAX(position), 0) + 1 FROM deployments WHERE endpoint = ?),
                     ?, ?, ?, ?)",
        )
        .bind(&row.endpoint)
        .bind(&row.name)
        .bind(&row.endpoint)
        .bind(&row.spec)
        .bind(row.weight)
        .bind(row.created_at)
        .bind(row.updated_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// An endpoint's deployments in creation order; every endpoint's when `None`.
    pub async fn deployments(&self, endpoint: Option<&str>) -> sqlx::Result<Vec<DeploymentRow>> {
        sqlx::query_as(
            "SELECT endpoint, name, spec, weight, created_at, updated_at FROM deployments
             WHERE ?1 IS NULL OR endpoint = ?1 ORDER BY endpoint, position",
        )
        .bind(endpoint)
        .fetch_all(&self.pool)
        .await
    }

    pub async fn deployment(
        &self,
        endpoint: &str,
        name: &str,
    ) -> sqlx::Result<Option<DeploymentRow>> {
        sqlx::query_as(
            "SELECT endpoint, name, spec, weight, created_at, updated_at FROM deployments
             WHERE endpoint = ? AND name = ?",
        )
        .bind(endpoint)
        .bind(name)
        .fetch_optional(&self.pool)
        .await
    }

    pub async fn update_deployment(
        &self,
        endpoint: &str,
        name: &str,
        spec: &str,
        now: i64,
    ) -> sqlx::Result<()> {
        sqlx::query(
            "UPDATE deployments SET spec = ?, updated_at = ? WHERE endpoint = ? AND name = ?",
        )
        .bind(spec)
        .bind(now)
        .bind(endpoint)
        .bind(name)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn delete_deployment(&self, endpoint: &str, name: &str) -> sqlx::Result<()> {
        sqlx::query("DELETE FROM deployments WHERE endpoint = ? AND name = ?")
            .bind(endpoint)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Sets every deployment's weight at once.
    pub async fn set_weights(
        &self,
        endpoint: &str,
        weights: &BTreeMap<String, u32>,
    ) -> sqlx::Result<()> {
        let mut tx = self.pool.begin().await?;
        for (name, w) in weights {
            sqlx::query("UPDATE deployments SET weight = ? WHERE endpoint = ? AND name = ?")
                .bind(i64::from(*w))
                .bind(endpoint)
                .bind(name)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }

    pub async fn insert_event(&self, e: &NewEvent) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO events (at_ms, endpoint, deployment, instance, kind, from_state, to_state, reason)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(e.at_ms)
        .bind(&e.endpoint)
        .bind(&e.deployment)
        .bind(&e.instance)
        .bind(e.kind)
        .bind(&e.from)
        .bind(&e.to)
        .bind(&e.reason)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A deployment's events, newest first.
    pub async fn events(
        &self,
        endpoint: &str,
        deployment: &str,
        limit: i64,
    ) -> sqlx::Result<Vec<EventRow>> {
        sqlx::query_as(
            "SELECT id, at_ms, deployment, instance, kind, from_state, to_state, reason FROM events
             WHERE endpoint = ? AND deployment = ? ORDER BY id DESC LIMIT ?",
        )
        .bind(endpoint)
        .bind(deployment)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
    }

    pub async fn set_alert_settings(&self, endpoint: &str, json: &str) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO alert_settings (endpoint, settings) VALUES (?, ?)
             ON CONFLICT (endpoint) DO UPDATE SET settings = excluded.settings",
        )
        .bind(endpoint)
        .bind(json)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Every endpoint's alert settings, as stored JSON.
    pub async fn alert_settings(&self) -> sqlx::Result<Vec<(String, String)>> {
        sqlx::query_as("SELECT endpoint, settings FROM alert_settings")
            .fetch_all(&self.pool)
            .await
    }

    pub async fn insert_alert(
        &self,
        a: &NewAlert,
        webhook_url: &str,
        at_ms: i64,
    ) -> sqlx::Result<i64> {
        let r = sqlx::query(
            "INSERT INTO alerts (endpoint, deployment, condition, text, webhook_url, status, at_ms)
             VALUES (?, ?, ?, ?, ?, 'pending', ?)",
        )
        .bind(&a.endpoint)
        .bind(&a.deployment)
        .bind(a.condition)
        .bind(&a.text)
        .bind(webhook_url)
        .bind(at_ms)
        .execute(&self.pool)
        .await?;
        Ok(r.last_insert_rowid())
    }

    pub async fn alert(&self, id: i64) -> sqlx::Result<Option<AlertRow>> {
        sqlx::query_as(select_alerts!("WHERE id = ?"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
    }

    /// An endpoint's alerts, newest first.
    pub async fn alerts(&self, endpoint: &str, limit: i64) -> sqlx::Result<Vec<AlertRow>> {
        sqlx::query_as(select_alerts!(
            "WHERE endpoint = ? ORDER BY id DESC LIMIT ?"
        ))
        .bind(endpoint)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
    }

    /// Alerts not yet sent nor given up on, oldest first.
    pub async fn pending_alerts(&self) -> sqlx::Result<Vec<AlertRow>> {
        sqlx::query_as(select_alerts!("WHERE status = 'pending' ORDER BY id"))
            .fetch_all(&self.pool)
            .await
    }

    /// The outcome of a delivery attempt: `status` stays `pending` while retries remain.
    pub async fn alert_attempted(
        &self,
        id: i64,
        status: &str,
        attempts: i64,
        error: Option<&str>,
        sent_at_ms: Option<i64>,
    ) -> sqlx::Result<()> {
        sqlx::query(
            "UPDATE alerts SET status = ?, attempts = ?, error = ?, sent_at_ms = ? WHERE id = ?",
        )
        .bind(status)
        .bind(attempts)
        .bind(error)
        .bind(sent_at_ms)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
