//! The words a message, a hand-over and an upload are described by, each an enum whose
//! values are stored as the exact text their column always held (existing databases keep
//! working), so no literal status is written outside this file and the SQL.

/// Declares an enum stored as text: its words once, for the answers (`as_str`, `Display`),
/// parsing (`parse`) and the database (a text column of any backend).
macro_rules! stored_as_text {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl<DB: sqlx::Database> sqlx::Type<DB> for $name
        where
            str: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <str as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <str as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $name
        where
            &'q str: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut DB::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<'q, DB>>::encode(self.as_str(), buf)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $name
        where
            &'r str: sqlx::Decode<'r, DB>,
        {
            fn decode(value: DB::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&str as sqlx::Decode<'r, DB>>::decode(value)?;
                Self::parse(text).ok_or_else(|| {
                    format!("{text:?} is no {}", stringify!($name)).into()
                })
            }
        }
    };
}

stored_as_text! {
    /// The API a message came by (`messages.channel`).
    Channel { Xms = "XMS", Rcs = "RCS" }
}

impl Channel {
    /// The route of a message's first hand-over.
    pub fn route(self) -> Route {
        match self {
            Channel::Xms => Route::Xms,
            Channel::Rcs => Route::Rcs,
        }
    }
}

stored_as_text! {
    /// `messages.message_type`: the document's types of each channel.
    MessageType {
        Sm = "SM",
        Lm = "LM",
        Mm = "MM",
        Ism = "ISM",
        Ilm = "ILM",
        RcsSms = "RCSSMS",
        RcsLms = "RCSLMS",
        RcsMms = "RCSMMS",
        RcsTmpl = "RCSTMPL",
    }
}

impl MessageType {
    pub fn is_rcs(self) -> bool {
        matches!(
            self,
            MessageType::RcsSms | MessageType::RcsLms | MessageType::RcsMms | MessageType::RcsTmpl
        )
    }
}

stored_as_text! {
    /// Where a message stands (`messages.status`); answers write it `API_<code>`.
    Status {
        /// Stored, not yet delivered: the dispatcher's queue.
        Accepted = "100",
        Delivered = "200",
        Failed = "510",
        /// Failed, but may be resent.
        Resendable = "520",
    }
}

stored_as_text! {
    /// What the carrier made of a hand-over, as answers write it
    /// (`messages.sms_status_code`, `outbox.outcome`).
    CarrierCode {
        Delivered = "API_200",
        Failed = "API_510",
        Resendable = "API_520",
    }
}

impl CarrierCode {
    /// The status of a message whose last hand-over ended so.
    pub fn status(self) -> Status {
        match self {
            CarrierCode::Delivered => Status::Delivered,
            CarrierCode::Failed => Status::Failed,
            CarrierCode::Resendable => Status::Resendable,
        }
    }
}

stored_as_text! {
    /// How an RCS message's own hand-over went (`messages.rcs_status`).
    RcsStatus { Processing = "processing", Success = "success", Fail = "fail" }
}

stored_as_text! {
    /// How an RCS message's SMS fallback went (`messages.fallback_status`).
    FallbackStatus { Success = "success", Fail = "fail" }
}

stored_as_text! {
    /// What a hand-over carried (`outbox.route`): the message itself, or its fallback.
    Route {
        Xms = "XMS",
        Rcs = "RCS",
        FallbackSm = "FALLBACK_SM",
        FallbackLm = "FALLBACK_LM",
    }
}

stored_as_text! {
    /// An uploaded file's use (`uploads.kind`).
    UploadKind { Rcs = "RCS", Mms = "MMS" }
}

#[cfg(test)]
mod tests {
    use std::fmt::Debug;

    use sqlx::{Decode, Encode, Sqlite, SqlitePool, Type};

    use super::*;

    /// `value` is stored as `text`, and `text` reads back as `value`.
    async fn stored_as<T>(pool: &SqlitePool, value: T, text: &str)
    where
        T: for<'q> Encode<'q, Sqlite> + for<'r> Decode<'r, Sqlite> + Type<Sqlite>,
        T: Debug + PartialEq + Send + Unpin + Copy + 'static,
    {
        let (stored, back): (String, T) = sqlx::query_as("SELECT ?1, ?1")
            .bind(value)
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!((stored.as_str(), back), (text, value));
    }

    #[tokio::test]
    async fn every_value_is_stored_as_the_text_its_column_always_held() {
        let pool = SqlitePool::connect("sqlite::memory:").await.unwrap();
        stored_as(&pool, Channel::Xms, "XMS").await;
        stored_as(&pool, Channel::Rcs, "RCS").await;
        for (t, text) in [
            (MessageType::Sm, "SM"),
            (MessageType::Lm, "LM"),
            (MessageType::Mm, "MM"),
            (MessageType::Ism, "ISM"),
            (MessageType::Ilm, "ILM"),
            (MessageType::RcsSms, "RCSSMS"),
            (MessageType::RcsLms, "RCSLMS"),
            (MessageType::RcsMms, "RCSMMS"),
            (MessageType::RcsTmpl, "RCSTMPL"),
        ] {
            stored_as(&pool, t, text).await;
        }
        stored_as(&pool, Status::Accepted, "100").await;
        stored_as(&pool, Status::Delivered, "200").await;
        stored_as(&pool, Status::Failed, "510").await;
        stored_as(&pool, Status::Resendable, "520").await;
        stored_as(&pool, CarrierCode::Delivered, "API_200").await;
        stored_as(&pool, CarrierCode::Failed, "API_510").await;
        stored_as(&pool, CarrierCode::Resendable, "API_520").await;
        stored_as(&pool, RcsStatus::Processing, "processing").await;
        stored_as(&pool, RcsStatus::Success, "success").await;
        stored_as(&pool, RcsStatus::Fail, "fail").await;
        stored_as(&pool, FallbackStatus::Success, "success").await;
        stored_as(&pool, FallbackStatus::Fail, "fail").await;
        stored_as(&pool, Route::Xms, "XMS").await;
        stored_as(&pool, Route::Rcs, "RCS").await;
        stored_as(&pool, Route::FallbackSm, "FALLBACK_SM").await;
        stored_as(&pool, Route::FallbackLm, "FALLBACK_LM").await;
        stored_as(&pool, UploadKind::Rcs, "RCS").await;
        stored_as(&pool, UploadKind::Mms, "MMS").await;

        let unknown: Result<(Status,), _> = sqlx::query_as("SELECT '300'").fetch_one(&pool).await;
        assert!(unknown.is_err(), "a word no value has does not read");
    }
}
