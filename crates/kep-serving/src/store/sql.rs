//! The serving store in SQL, one text for both backends: SQLite (`serving.db`) and
//! PostgreSQL (schema `kep_serving`). Deployments keep their resolved spec as JSON.

use std::collections::BTreeMap;

use sqlx::migrate::Migrator;
use sqlx::types::Json;

use super::{
    AlertRow, AlertSettings, DeploymentRow, EndpointRow, EventRow, ImageRow, LiveSources, ModelRow,
    NewAlert, NewEvent, Store,
};
use crate::deployment::DeploymentSpec;
use crate::ids::{AlertId, DeploymentName, EndpointName, ImageName, ModelName};
use crate::kinds::AlertStatus;

pub static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");
pub static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");

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

/// An images query, its columns pasted in as [`select_alerts`]'s are.
macro_rules! select_images {
    ($rest:literal) => {
        concat!(
            "SELECT id, name, command, reference, engine_id, size, source, created_at FROM images ",
            $rest
        )
    };
}

kep_core::sql_store! {
    impl Store {
        async fn insert_image(&self, row: &ImageRow) -> sqlx::Result<bool> {
            let done = sqlx::query(
                "INSERT INTO images (id, name, command, reference, engine_id, size, source, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(&row.id)
            .bind(&row.name)
            .bind(row.command.as_ref().map(Json))
            .bind(&row.reference)
            .bind(&row.engine_id)
            .bind(row.size)
            .bind(row.source)
            .bind(row.created_at)
            .execute(&self.pool)
            .await;
            inserted(done)
        }

        async fn images(&self) -> sqlx::Result<Vec<ImageRow>> {
            sqlx::query_as(select_images!("WHERE deleted = 0 ORDER BY name"))
            .fetch_all(&self.pool)
            .await
        }

        async fn image(&self, name: &ImageName) -> sqlx::Result<Option<ImageRow>> {
            sqlx::query_as(select_images!("WHERE deleted = 0 AND name = $1"))
            .bind(name)
            .fetch_optional(&self.pool)
            .await
        }

        async fn delete_image(&self, name: &ImageName) -> sqlx::Result<bool> {
            let r = sqlx::query("UPDATE images SET deleted = 1 WHERE deleted = 0 AND name = $1")
                .bind(name)
                .execute(&self.pool)
                .await?;
            Ok(r.rows_affected() > 0)
        }

        async fn insert_model(&self, row: &ModelRow) -> sqlx::Result<bool> {
            let done = sqlx::query(
                "INSERT INTO models (id, name, framework, path, size, sha256, created_at, inputs, outputs,
                                     format, versions, signatures)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            )
            .bind(&row.id)
            .bind(&row.name)
            .bind(&row.framework)
            .bind(&row.path)
            .bind(row.size)
            .bind(&row.sha256)
            .bind(row.created_at)
            .bind(Json(&row.inputs))
            .bind(Json(&row.outputs))
            .bind(&row.format)
            .bind(Json(&row.versions))
            .bind(row.signatures.as_ref().map(Json))
            .execute(&self.pool)
            .await;
            inserted(done)
        }

        async fn models(&self) -> sqlx::Result<Vec<ModelRow>> {
            sqlx::query_as(
                "SELECT id, name, framework, path, size, sha256, created_at, inputs, outputs, format,
                        versions, signatures FROM models
                 WHERE deleted = 0 ORDER BY name",
            )
            .fetch_all(&self.pool)
            .await
        }

        async fn model(&self, name: &ModelName) -> sqlx::Result<Option<ModelRow>> {
            sqlx::query_as(
                "SELECT id, name, framework, path, size, sha256, created_at, inputs, outputs, format,
                        versions, signatures FROM models
                 WHERE deleted = 0 AND name = $1",
            )
            .bind(name)
            .fetch_optional(&self.pool)
            .await
        }

        async fn delete_model(&self, name: &ModelName) -> sqlx::Result<bool> {
            let r = sqlx::query("UPDATE models SET deleted = 1 WHERE deleted = 0 AND name = $1")
                .bind(name)
                .execute(&self.pool)
                .await?;
            Ok(r.rows_affected() > 0)
        }

        async fn live_sources(&self) -> sqlx::Result<LiveSources> {
            let mut tx = self.pool.begin().await?;
            let images = sqlx::query_scalar("SELECT id FROM images WHERE deleted = 0")
                .fetch_all(&mut *tx)
                .await?;
            let models = sqlx::query_scalar("SELECT id FROM models WHERE deleted = 0")
                .fetch_all(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(LiveSources {
                images: images.into_iter().collect(),
                models: models.into_iter().collect(),
            })
        }

        async fn insert_endpoint(&self, row: &EndpointRow) -> sqlx::Result<bool> {
            let done = sqlx::query(
                "INSERT INTO endpoints (name, description, instance_type, instance_count, protocol,
                                        key_hash, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&row.name)
            .bind(&row.description)
            .bind(&row.instance_type)
            .bind(row.instance_count)
            .bind(row.protocol)
            .bind(&row.key_hash)
            .bind(row.created_at)
            .execute(&self.pool)
            .await;
            inserted(done)
        }

        async fn endpoints(&self) -> sqlx::Result<Vec<EndpointRow>> {
            sqlx::query_as("SELECT * FROM endpoints ORDER BY name")
                .fetch_all(&self.pool)
                .await
        }

        async fn endpoint(&self, name: &EndpointName) -> sqlx::Result<Option<EndpointRow>> {
            sqlx::query_as("SELECT * FROM endpoints WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await
        }

        async fn delete_endpoint(&self, name: &EndpointName) -> sqlx::Result<bool> {
            let r = sqlx::query("DELETE FROM endpoints WHERE name = $1")
                .bind(name)
                .execute(&self.pool)
                .await?;
            Ok(r.rows_affected() > 0)
        }

        async fn set_key_hash(&self, endpoint: &EndpointName, hash: &str) -> sqlx::Result<()> {
            sqlx::query("UPDATE endpoints SET key_hash = $1 WHERE name = $2")
                .bind(hash)
                .bind(endpoint)
                .execute(&self.pool)
                .await?;
            Ok(())
        }

        async fn set_mirroring(
            &self,
            endpoint: &EndpointName,
            enabled: bool,
            responder: Option<&DeploymentName>,
        ) -> sqlx::Result<()> {
            sqlx::query("UPDATE endpoints SET mirroring = $1, responder = $2 WHERE name = $3")
                .bind(enabled)
                .bind(responder)
                .bind(endpoint)
                .execute(&self.pool)
                .await?;
            Ok(())
        }

        async fn insert_deployment(&self, row: &DeploymentRow) -> sqlx::Result<()> {
            sqlx::query(
                "INSERT INTO deployments (endpoint, name, position, spec, weight, created_at, updated_at)
                 VALUES ($1, $2, (SELECT COALESCE(MAX(position), 0) + 1 FROM deployments WHERE endpoint = $3),
                         $4, $5, $6, $7)",
            )
            .bind(&row.endpoint)
            .bind(&row.name)
            .bind(&row.endpoint)
            .bind(Json(&row.spec))
            .bind(row.weight)
            .bind(row.created_at)
            .bind(row.updated_at)
            .execute(&self.pool)
            .await?;
            Ok(())
        }

        async fn deployments(
            &self,
            endpoint: Option<&EndpointName>,
        ) -> sqlx::Result<Vec<DeploymentRow>> {
            sqlx::query_as(
                "SELECT endpoint, name, spec, weight, created_at, updated_at FROM deployments
                 WHERE $1 IS NULL OR endpoint = $1 ORDER BY endpoint, position",
            )
            .bind(endpoint)
            .fetch_all(&self.pool)
            .await
        }

        async fn deployment(
            &self,
            endpoint: &EndpointName,
            name: &DeploymentName,
        ) -> sqlx::Result<Option<DeploymentRow>> {
            sqlx::query_as(
                "SELECT endpoint, name, spec, weight, created_at, updated_at FROM deployments
                 WHERE endpoint = $1 AND name = $2",
            )
            .bind(endpoint)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
        }

        async fn update_deployment(
            &self,
            endpoint: &EndpointName,
            name: &DeploymentName,
            spec: &DeploymentSpec,
            now: i64,
        ) -> sqlx::Result<()> {
            sqlx::query(
                "UPDATE deployments SET spec = $1, updated_at = $2 WHERE endpoint = $3 AND name = $4",
            )
            .bind(Json(spec))
            .bind(now)
            .bind(endpoint)
            .bind(name)
            .execute(&self.pool)
            .await?;
            Ok(())
        }

        async fn delete_deployment(
            &self,
            endpoint: &EndpointName,
            name: &DeploymentName,
        ) -> sqlx::Result<()> {
            sqlx::query("DELETE FROM deployments WHERE endpoint = $1 AND name = $2")
                .bind(endpoint)
                .bind(name)
                .execute(&self.pool)
                .await?;
            Ok(())
        }

        async fn set_weights(
            &self,
            endpoint: &EndpointName,
            weights: &BTreeMap<DeploymentName, u32>,
        ) -> sqlx::Result<()> {
            let mut tx = self.pool.begin().await?;
            for (name, w) in weights {
                sqlx::query("UPDATE deployments SET weight = $1 WHERE endpoint = $2 AND name = $3")
                    .bind(i64::from(*w))
                    .bind(endpoint)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await
        }

        async fn insert_event(&self, e: &NewEvent) -> sqlx::Result<()> {
            let (from, to) = e.change.states();
            sqlx::query(
                "INSERT INTO events (at_ms, endpoint, deployment, instance, kind, from_state, to_state, reason)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(e.at_ms)
            .bind(&e.endpoint)
            .bind(&e.deployment)
            .bind(e.change.instance())
            .bind(e.change.kind())
            .bind(from)
            .bind(to)
            .bind(e.change.reason())
            .execute(&self.pool)
            .await?;
            Ok(())
        }

        async fn events(
            &self,
            endpoint: &EndpointName,
            deployment: &DeploymentName,
            limit: i64,
        ) -> sqlx::Result<Vec<EventRow>> {
            sqlx::query_as(
                "SELECT id, at_ms, deployment, instance, kind, from_state, to_state, reason FROM events
                 WHERE endpoint = $1 AND deployment = $2 ORDER BY id DESC LIMIT $3",
            )
            .bind(endpoint)
            .bind(deployment)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
        }

        async fn set_alert_settings(
            &self,
            endpoint: &EndpointName,
            settings: &AlertSettings,
        ) -> sqlx::Result<()> {
            sqlx::query(
                "INSERT INTO alert_settings (endpoint, settings) VALUES ($1, $2)
                 ON CONFLICT (endpoint) DO UPDATE SET settings = excluded.settings",
            )
            .bind(endpoint)
            .bind(Json(settings))
            .execute(&self.pool)
            .await?;
            Ok(())
        }

        async fn alert_settings(&self) -> sqlx::Result<Vec<(EndpointName, AlertSettings)>> {
            let rows: Vec<(EndpointName, Json<AlertSettings>)> =
                sqlx::query_as("SELECT endpoint, settings FROM alert_settings")
                    .fetch_all(&self.pool)
                    .await?;
            Ok(rows.into_iter().map(|(e, s)| (e, s.0)).collect())
        }

        async fn insert_alert(
            &self,
            a: &NewAlert,
            webhook_url: &str,
            at_ms: i64,
            node: Option<&str>,
        ) -> sqlx::Result<AlertId> {
            sqlx::query_scalar(
                "INSERT INTO alerts (endpoint, deployment, condition, text, webhook_url, status, at_ms, node_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            )
            .bind(&a.endpoint)
            .bind(&a.deployment)
            .bind(a.condition)
            .bind(&a.text)
            .bind(webhook_url)
            .bind(AlertStatus::Pending)
            .bind(at_ms)
            .bind(node)
            .fetch_one(&self.pool)
            .await
        }

        async fn alert(&self, id: AlertId) -> sqlx::Result<Option<AlertRow>> {
            sqlx::query_as(select_alerts!("WHERE id = $1"))
                .bind(id)
                .fetch_optional(&self.pool)
                .await
        }

        async fn alerts(&self, endpoint: &EndpointName, limit: i64) -> sqlx::Result<Vec<AlertRow>> {
            sqlx::query_as(select_alerts!(
                "WHERE endpoint = $1 ORDER BY id DESC LIMIT $2"
            ))
            .bind(endpoint)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
        }

        async fn adopt_alerts(
            &self,
            node: Option<&str>,
            up: &[String],
        ) -> sqlx::Result<Vec<(EndpointName, AlertId)>> {
            // The status as a literal, so that SQLite reads the partial index `alerts_pending`.
            let mut b = sqlx::QueryBuilder::new("UPDATE alerts SET node_id = ");
            b.push_bind(node).push(" WHERE status = 'pending' AND ");
            kep_core::storage::push_unowned(&mut b, up);
            b.push(" RETURNING endpoint, id");
            let mut rows: Vec<(EndpointName, AlertId)> =
                b.build_query_as().fetch_all(&self.pool).await?;
            rows.sort_by_key(|r| r.1.0);
            Ok(rows)
        }

        async fn alert_attempted(
            &self,
            id: AlertId,
            status: AlertStatus,
            attempts: i64,
            error: Option<&str>,
            sent_at_ms: Option<i64>,
        ) -> sqlx::Result<()> {
            sqlx::query(
                "UPDATE alerts SET status = $1, attempts = $2, error = $3, sent_at_ms = $4 WHERE id = $5",
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

    /// An insert's outcome: `Ok(false)` where it hit a unique index (a name already taken).
    fn inserted(done: sqlx::Result<<Db as sqlx::Database>::QueryResult>) -> sqlx::Result<bool> {
        match done {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_database_error()
                    .is_some_and(|d| d.kind() == sqlx::error::ErrorKind::UniqueViolation) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
