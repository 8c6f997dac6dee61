//! The machine's container engine: Docker, or Podman's Docker-compatible API, over its
//! unix socket (CONTRACT §3 "Container images"). Connected per call, so kep starts without
//! one and images run as commands need none.

use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as EngineError;
use bollard::query_parameters::ImportImageOptionsBuilder;
use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};

use crate::ServingError;

/// How long the engine may take to answer whether it runs: a refused or missing socket
/// fails at once, but Podman's service sets its runtime up at its first call, which takes
/// seconds on a loaded machine (seen over 5 s in CI).
const CONNECT_TIMEOUT_S: u64 = 30;
/// How long one call may take once connected.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// A load takes as long as its archive's upload, which the client paces.
const LOAD_TIMEOUT: Duration = Duration::from_secs(6 * 3600);

/// The engine of `serving.container_socket`, or the first usual one that answers.
#[derive(Debug, Clone)]
pub struct Engine {
    socket: Option<String>,
}

/// An image in the engine's local store, as the engine reports it.
#[derive(Debug)]
pub struct EngineImage {
    /// `sha256:…`
    pub id: String,
    pub size: u64,
}

impl Engine {
    pub fn new(socket: Option<String>) -> Self {
        Engine { socket }
    }

    /// The sockets tried, in order: the setting alone, else the usual Docker and Podman ones.
    fn sockets(&self) -> Vec<String> {
        if let Some(socket) = &self.socket {
            return vec![socket.clone()];
        }
        let mut sockets = Vec::new();
        if let Ok(host) = std::env::var("DOCKER_HOST")
            && host.starts_with("unix://")
        {
            sockets.push(host);
        }
        sockets.push("/var/run/docker.sock".into());
        if let Ok(dir) = std::env::var("XDG_RUNTIME_DIR") {
            sockets.push(format!("{dir}/podman/podman.sock"));
        }
        sockets.push("/run/podman/podman.sock".into());
        sockets
    }

    /// A client of the first socket whose engine answers, at the API version both speak
    /// (Podman's compatible API is older than the client's).
    pub(crate) async fn client(&self) -> Result<Docker, ServingError> {
        let sockets = self.sockets();
        for socket in &sockets {
            let path = socket.strip_prefix("unix://").unwrap_or(socket);
            let Ok(docker) =
                Docker::connect_with_unix(path, CONNECT_TIMEOUT_S, bollard::API_DEFAULT_VERSION)
            else {
                continue;
            };
            match docker.negotiate_version().await {
                Ok(docker) => return Ok(docker.with_timeout(CALL_TIMEOUT)),
                Err(e) => tracing::debug!(socket, error = %e, "no container engine answers"),
            }
        }
        let tried = sockets.join(", ");
        Err(ServingError::EngineUnavailable(match self.socket {
            Some(_) => format!(
                "the container engine is not running: nothing answers at {tried} (serving.container_socket)"
            ),
            None => format!(
                "the container engine is not running: nothing answers at {tried} (serving.container_socket is unset)"
            ),
        }))
    }

    /// The image of `reference` in the engine's local store; `None` when it has none (it
    /// is never pulled).
    pub async fn inspect(&self, reference: &str) -> Result<Option<EngineImage>, ServingError> {
        let docker = self.client().await?;
        match docker.inspect_image(reference).await {
            Ok(image) => Ok(Some(EngineImage {
                id: image.id.unwrap_or_default(),
                size: image.size.unwrap_or(0).max(0) as u64,
            })),
            Err(EngineError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(e) => Err(engine_failed("inspecting an image", e)),
        }
    }

    /// Streams an image archive (`docker save`, or an OCI layout tar) to the engine's
    /// `POST /images/load`; the reference it reports loaded. An archive the engine
    /// refuses is an error on `file` with its reason.
    pub async fn load<S, E>(&self, archive: S) -> Result<String, ServingError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let docker = self.client().await?.with_timeout(LOAD_TIMEOUT);
        let options = ImportImageOptionsBuilder::new().quiet(true).build();
        let mut answers = docker.import_image_stream(options, archive, None);
        let mut loaded = None;
        while let Some(answer) = answers.next().await {
            let answer = answer.map_err(|e| match e {
                EngineError::DockerResponseServerError { message, .. }
                | EngineError::DockerStreamError { error: message } => not_an_image(message.trim()),
                e => engine_failed("loading an archive", e),
            })?;
            if let Some(reference) = answer.stream.as_deref().and_then(loaded_reference) {
                loaded.get_or_insert(reference);
            }
        }
        loaded.ok_or_else(|| not_an_image("the engine loaded no image from it"))
    }
}

/// The reference in a load's `Loaded image: …` (the first, where Podman lists several) or
/// `Loaded image ID: sha256:…` (an archive without tags) line.
fn loaded_reference(line: &str) -> Option<String> {
    let line = line.trim();
    let named = line
        .strip_prefix("Loaded image ID: ")
        .or_else(|| line.strip_prefix("Loaded image: "))?;
    named
        .split(',')
        .map(str::trim)
        .find(|r| !r.is_empty())
        .map(str::to_owned)
}

fn not_an_image(reason: &str) -> ServingError {
    ServingError::field("file", format!("not an image archive: {reason}"))
}

fn engine_failed(doing: &str, e: EngineError) -> ServingError {
    ServingError::Internal(anyhow::anyhow!("container engine, {doing}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_reports_its_reference_in_dockers_words_and_podmans() {
        let read = |l: &str| loaded_reference(l);
        assert_eq!(
            read("Loaded image: localhost/kep-test/httpd:1\n").as_deref(),
            Some("localhost/kep-test/httpd:1")
        );
        assert_eq!(
            read("Loaded image ID: sha256:08cc").as_deref(),
            Some("sha256:08cc")
        );
        assert_eq!(read("Loaded image: a:1,b:2").as_deref(), Some("a:1"));
        assert_eq!(read("Loading layer 1/2"), None);
    }

    #[test]
    fn the_setting_alone_is_tried_when_set() {
        let engine = Engine::new(Some("unix:///tmp/x.sock".into()));
        assert_eq!(engine.sockets(), ["unix:///tmp/x.sock"]);
        let usual = Engine::new(None).sockets();
        assert!(usual.contains(&"/var/run/docker.sock".to_owned()));
        assert_eq!(usual.last().unwrap(), "/run/podman/podman.sock");
    }
}
