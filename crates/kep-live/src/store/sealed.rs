//! The store as the service sees it: the values of every [`Column`] sealed on their way in
//! and opened on their way out, so that nothing above it knows they are sealed, and a copy
//! of the database without the seal key opens no service.

use std::sync::Arc;

use kep_core::seal::Sealer;

use super::{
    Column, NewWebhookEvent, ServiceRow, Store, TokenRow, WebhookAttempt, WebhookEventRow,
    WebhookRow,
};
use crate::ids::ServiceId;

pub struct Sealed {
    inner: Arc<dyn Store>,
    seal: Sealer,
}

impl Sealed {
    /// `inner`, once its database is known to be sealed under `seal` (a database sealed
    /// under another key is refused) and its values still in the clear are sealed.
    pub async fn over(inner: Arc<dyn Store>, seal: Sealer) -> anyhow::Result<Arc<dyn Store>> {
        seal.verify(&inner.seal_check(seal.check()).await?, "live's database")?;
        let store = Sealed { inner, seal };
        store.seal_the_clear().await?;
        Ok(Arc::new(store))
    }

    /// Seals the values an earlier kep stored in the clear. Each is replaced only if it is
    /// still what was read, so a value another node set meanwhile is kept.
    async fn seal_the_clear(&self) -> sqlx::Result<()> {
        let mut values = Vec::new();
        for s in self.inner.services().await? {
            values.push((Column::AdminHa, s.service_id.clone(), s.admin_ha));
            values.push((Column::ServiceHs, s.service_id, s.service_hs));
        }
        for w in self.inner.webhooks().await? {
            values.push((Column::WebhookSecret, w.service_id, w.secret));
        }
        values.retain(|(_, _, value)| !Sealer::is_sealed(value));
        for (column, service_id, value) in &values {
            let sealed = self.seal(*column, service_id, value);
            self.inner
                .reseal(*column, service_id, value, &sealed)
                .await?;
        }
        if !values.is_empty() {
            tracing::info!(
                values = values.len(),
                "sealed the live values stored in the clear"
            );
        }
        Ok(())
    }

    fn seal(&self, column: Column, service_id: &ServiceId, value: &str) -> String {
        self.seal.seal(&column.place(service_id.as_str()), value)
    }

    fn open(&self, column: Column, service_id: &ServiceId, stored: &str) -> sqlx::Result<String> {
        self.seal
            .open(&column.place(service_id.as_str()), stored)
            .map_err(|e| sqlx::Error::Decode(e.into()))
    }

    fn open_service(&self, mut row: ServiceRow) -> sqlx::Result<ServiceRow> {
        row.admin_ha = self.open(Column::AdminHa, &row.service_id, &row.admin_ha)?;
        row.service_hs = self.open(Column::ServiceHs, &row.service_id, &row.service_hs)?;
        Ok(row)
    }

    fn open_webhook(&self, mut row: WebhookRow) -> sqlx::Result<WebhookRow> {
        row.secret = self.open(Column::WebhookSecret, &row.service_id, &row.secret)?;
        Ok(row)
    }
}

#[async_trait::async_trait]
impl Store for Sealed {
    async fn services(&self) -> sqlx::Result<Vec<ServiceRow>> {
        let rows = self.inner.services().await?;
        rows.into_iter().map(|r| self.open_service(r)).collect()
    }

    async fn insert_service(&self, row: &ServiceRow, now: i64) -> sqlx::Result<bool> {
        let sealed = ServiceRow {
            admin_ha: self.seal(Column::AdminHa, &row.service_id, &row.admin_ha),
            service_hs: self.seal(Column::ServiceHs, &row.service_id, &row.service_hs),
            ..row.clone()
        };
        self.inner.insert_service(&sealed, now).await
    }

    async fn update_secrets(
        &self,
        service_id: &ServiceId,
        ha: &str,
        hs: &str,
    ) -> sqlx::Result<bool> {
        let ha = self.seal(Column::AdminHa, service_id, ha);
        let hs = self.seal(Column::ServiceHs, service_id, hs);
        self.inner.update_secrets(service_id, &ha, &hs).await
    }

    async fn update_verifier(
        &self,
        service_id: &ServiceId,
        url: Option<&str>,
    ) -> sqlx::Result<bool> {
        self.inner.update_verifier(service_id, url).await
    }

    async fn service(&self, service_id: &ServiceId) -> sqlx::Result<Option<ServiceRow>> {
        let row = self.inner.service(service_id).await?;
        row.map(|r| self.open_service(r)).transpose()
    }

    async fn token(&self, token_hash: &str) -> sqlx::Result<Option<TokenRow>> {
        self.inner.token(token_hash).await
    }

    async fn insert_nonce(
        &self,
        nonce: &str,
        service_id: &str,
        issued_at: i64,
        expired_at: i64,
    ) -> sqlx::Result<()> {
        (self.inner)
            .insert_nonce(nonce, service_id, issued_at, expired_at)
            .await
    }

    async fn take_nonce(&self, nonce: &str) -> sqlx::Result<Option<(String, i64)>> {
        self.inner.take_nonce(nonce).await
    }

    async fn live_tokens(&self, now: i64) -> sqlx::Result<Vec<TokenRow>> {
        self.inner.live_tokens(now).await
    }

    async fn insert_token(&self, row: &TokenRow, now: i64) -> sqlx::Result<()> {
        self.inner.insert_token(row, now).await
    }

    async fn webhooks(&self) -> sqlx::Result<Vec<WebhookRow>> {
        let rows = self.inner.webhooks().await?;
        rows.into_iter().map(|r| self.open_webhook(r)).collect()
    }

    async fn webhook(&self, service_id: &ServiceId) -> sqlx::Result<Option<WebhookRow>> {
        let row = self.inner.webhook(service_id).await?;
        row.map(|r| self.open_webhook(r)).transpose()
    }

    async fn put_webhook(&self, row: &WebhookRow, now: i64) -> sqlx::Result<()> {
        let sealed = WebhookRow {
            secret: self.seal(Column::WebhookSecret, &row.service_id, &row.secret),
            ..row.clone()
        };
        self.inner.put_webhook(&sealed, now).await
    }

    async fn room_part(
        &self,
        service_id: &str,
        room_id: &str,
        node: &str,
        open: bool,
    ) -> sqlx::Result<bool> {
        self.inner.room_part(service_id, room_id, node, open).await
    }

    async fn insert_webhook_events(
        &self,
        events: &mut [NewWebhookEvent],
        node: Option<&str>,
    ) -> sqlx::Result<()> {
        self.inner.insert_webhook_events(events, node).await
    }

    async fn adopt_webhook_events(
        &self,
        node: Option<&str>,
        up: &[String],
    ) -> sqlx::Result<Vec<(ServiceId, String, i64)>> {
        self.inner.adopt_webhook_events(node, up).await
    }

    async fn webhook_event(&self, seq: i64) -> sqlx::Result<Option<WebhookEventRow>> {
        self.inner.webhook_event(seq).await
    }

    async fn webhook_attempted(&self, outcomes: &[WebhookAttempt]) -> sqlx::Result<()> {
        self.inner.webhook_attempted(outcomes).await
    }

    async fn webhook_events(
        &self,
        service_id: &ServiceId,
        limit: i64,
    ) -> sqlx::Result<Vec<WebhookEventRow>> {
        self.inner.webhook_events(service_id, limit).await
    }

    async fn seal_check(&self, check: &str) -> sqlx::Result<String> {
        self.inner.seal_check(check).await
    }

    async fn reseal(
        &self,
        column: Column,
        service_id: &ServiceId,
        old: &str,
        new: &str,
    ) -> sqlx::Result<()> {
        self.inner.reseal(column, service_id, old, new).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store as kept in `dir`, with nothing sealed or opened on the way.
    async fn raw(dir: &std::path::Path) -> Arc<dyn Store> {
        let pool = kep_core::storage::open(dir, "live", &super::super::sql::SQLITE)
            .await
            .unwrap();
        Arc::new(super::super::sql::SqliteStore::new(pool))
    }

    fn service(id: &str) -> ServiceRow {
        ServiceRow {
            service_id: ServiceId::from(id.to_owned()),
            admin_ha: "aa".repeat(32),
            service_hs: "bb".repeat(32),
            admin_uuid: "u".into(),
            external_verifier_url: None,
        }
    }

    #[tokio::test]
    async fn values_in_the_clear_are_sealed_at_open_and_read_back_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let raw = raw(dir.path()).await;
        assert!(raw.insert_service(&service("old"), 1).await.unwrap());
        let hook = WebhookRow {
            service_id: ServiceId::from("old".to_owned()),
            url: "http://127.0.0.1:9/".into(),
            enabled: true,
            secret: "whsec".into(),
            disabled_reason: None,
        };
        raw.put_webhook(&hook, 1).await.unwrap();
        let seal = Sealer::ephemeral();

        let sealed = Sealed::over(Arc::clone(&raw), seal.clone()).await.unwrap();
        let kept = &raw.services().await.unwrap()[0];
        assert!(Sealer::is_sealed(&kept.admin_ha) && Sealer::is_sealed(&kept.service_hs));
        assert!(Sealer::is_sealed(&raw.webhooks().await.unwrap()[0].secret));
        let read = &sealed.services().await.unwrap()[0];
        assert_eq!(
            (read.admin_ha.as_str(), read.service_hs.as_str()),
            (&*"aa".repeat(32), &*"bb".repeat(32))
        );
        assert_eq!(sealed.webhooks().await.unwrap()[0].secret, "whsec");

        // Once more changes nothing; what is written now is sealed too.
        let again = Sealed::over(Arc::clone(&raw), seal).await.unwrap();
        assert_eq!(raw.services().await.unwrap()[0].admin_ha, kept.admin_ha);
        assert!(again.insert_service(&service("new"), 2).await.unwrap());
        let new = raw
            .service(&ServiceId::from("new".to_owned()))
            .await
            .unwrap()
            .unwrap();
        assert!(Sealer::is_sealed(&new.service_hs));
        assert_eq!(
            again
                .service(&new.service_id)
                .await
                .unwrap()
                .unwrap()
                .service_hs,
            "bb".repeat(32)
        );
    }

    #[tokio::test]
    async fn another_key_is_refused_and_a_value_moved_to_another_row_does_not_open() {
        let dir = tempfile::tempdir().unwrap();
        let raw = raw(dir.path()).await;
        let sealed = Sealed::over(Arc::clone(&raw), Sealer::ephemeral())
            .await
            .unwrap();
        for id in ["a", "b"] {
            sealed.insert_service(&service(id), 1).await.unwrap();
        }
        let err = Sealed::over(Arc::clone(&raw), Sealer::ephemeral())
            .await
            .err()
            .unwrap();
        assert!(err.to_string().starts_with("seal_key_file: "), "{err}");

        let a = raw
            .service(&ServiceId::from("a".to_owned()))
            .await
            .unwrap()
            .unwrap();
        let b = ServiceId::from("b".to_owned());
        raw.update_secrets(&b, &a.admin_ha, &a.service_hs)
            .await
            .unwrap();
        assert!(sealed.service(&b).await.is_err());
    }
}
