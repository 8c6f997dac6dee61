//! Declared resources: a declaration's sections go to the services that read them, each
//! plans its part against what is stored (checking every field, comparing secrets by their
//! hashes), and only once every part planned is anything applied. A declaration refused
//! leaves everything as it was.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use kep_api::declared::{Applied, ApplyAnswer, ApplyRequest, Outcome};
use serde_json::{Map, Value};

use crate::http::{AdminJson, ApiError};

/// Why a declaration is not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The declaration's own fault, naming the object and field: nothing was done.
    #[error("{0}")]
    Refused(String),
    /// The platform's (a store that failed): what was applied before it stays.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl ApplyError {
    pub fn refused(why: impl Into<String>) -> Self {
        ApplyError::Refused(why.into())
    }
}

impl From<sqlx::Error> for ApplyError {
    fn from(e: sqlx::Error) -> Self {
        ApplyError::Failed(e.into())
    }
}

/// A service's part of declared resources.
#[async_trait::async_trait]
pub trait Declares: Send + Sync + 'static {
    /// The section of a declaration it reads (`live`, …).
    fn section(&self) -> &'static str;

    /// What applying `section` would do, changing nothing; with `prune`, deleting what it
    /// does not name of the kinds it names.
    async fn plan(&self, section: Value, prune: bool) -> Result<Box<dyn Planned>, ApplyError>;
}

/// A service's part of a declaration, planned.
#[async_trait::async_trait]
pub trait Planned: Send {
    /// Each object and what applying does to it.
    fn outcomes(&self) -> Vec<Applied>;

    async fn apply(self: Box<Self>) -> Result<(), ApplyError>;
}

/// Every started service's part.
#[derive(Clone, Default)]
pub struct Declarations(Arc<Vec<Arc<dyn Declares>>>);

impl Declarations {
    pub fn new(parts: Vec<Arc<dyn Declares>>) -> Self {
        Declarations(Arc::new(parts))
    }

    /// Plans every section, then applies them all, in the platform's order of services
    /// (live, adapter, messaging): what was done, object by object.
    pub async fn apply(
        &self,
        mut declaration: Map<String, Value>,
        prune: bool,
    ) -> Result<Vec<Applied>, ApplyError> {
        if let Some(unknown) = declaration
            .keys()
            .find(|s| !self.0.iter().any(|p| p.section() == s.as_str()))
        {
            let known: Vec<&str> = self.0.iter().map(|p| p.section()).collect();
            return Err(ApplyError::refused(format!(
                "{unknown}: not a section this server reads (it reads {})",
                known.join(", ")
            )));
        }
        let mut planned = Vec::new();
        for part in self.0.iter() {
            if let Some(section) = declaration.remove(part.section()) {
                planned.push(part.plan(section, prune).await?);
            }
        }
        let outcomes = planned.iter().flat_map(|p| p.outcomes()).collect();
        for part in planned {
            part.apply().await?;
        }
        Ok(outcomes)
    }
}

/// `POST /admin/v1/apply`.
#[utoipa::path(post, path = kep_api::declared::APPLY, request_body = ApplyRequest,
    responses((status = 200, body = ApplyAnswer),
              (status = 400, description = "Refused: nothing applied", body = kep_api::operator::ErrorBody)),
    security(("operator" = [])), tag = "platform")]
pub async fn apply(
    State(declarations): State<Declarations>,
    AdminJson(req): AdminJson<ApplyRequest>,
) -> Result<Json<ApplyAnswer>, ApiError> {
    match declarations.apply(req.declaration, req.prune).await {
        Ok(objects) => Ok(Json(ApplyAnswer { objects })),
        Err(ApplyError::Refused(why)) => {
            Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid", why))
        }
        Err(ApplyError::Failed(e)) => Err(ApiError::internal(format!("{e:#}"))),
    }
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(apply),
    components(schemas(ApplyRequest, ApplyAnswer, Applied, Outcome))
)]
pub struct DeclaredDoc;

/// A section read as `T`, refused naming the field that does not fit: `live.services[0].
/// adminSecret: missing field`.
pub fn read_section<T: serde::de::DeserializeOwned>(
    section: &str,
    value: Value,
) -> Result<T, ApplyError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            section.to_owned()
        } else {
            format!("{section}.{path}")
        };
        ApplyError::refused(format!("{at}: {}", e.inner()))
    })
}

/// The objects of one kind, in the declaration's order, with what happens to each.
pub struct Steps<S> {
    kind: &'static str,
    pub steps: Vec<(Applied, Option<S>)>,
}

impl<S> Steps<S> {
    pub fn new(kind: &'static str) -> Self {
        Steps {
            kind,
            steps: Vec::new(),
        }
    }

    /// `id` gets `outcome`, by `step` (`None` when nothing is to be done).
    pub fn push(&mut self, id: impl Into<String>, outcome: Outcome, step: Option<S>) {
        let applied = Applied {
            kind: self.kind.to_owned(),
            id: id.into(),
            outcome,
        };
        self.steps.push((applied, step));
    }

    /// Refuses an id the declaration names twice.
    pub fn once(&self, id: &str) -> Result<(), ApplyError> {
        if self.steps.iter().any(|(a, _)| a.id == id) {
            return Err(ApplyError::refused(format!(
                "{} {id}: declared twice",
                self.kind
            )));
        }
        Ok(())
    }

    pub fn outcomes(&self) -> Vec<Applied> {
        self.steps.iter().map(|(a, _)| a.clone()).collect()
    }

    /// The steps to take, in order.
    pub fn take(self) -> impl Iterator<Item = S> {
        self.steps.into_iter().filter_map(|(_, s)| s)
    }
}

/// A declared secret, checked as the operator API checks a given one; refused naming
/// `kind`, `id` and `field`.
pub fn secret(kind: &str, id: &str, field: &str, given: String) -> Result<String, ApplyError> {
    crate::secret::given_or_new(Some(given))
        .map_err(|why| ApplyError::refused(format!("{kind} {id}: {field}: {why}")))
}
