//! The fixed sets of words the service stores and shows: one enum each. The text of each
//! variant is the one stored before they were enums, so existing databases read back
//! unchanged (`store/sql/tests.rs` holds them to it), and the one the API shows. Each is
//! a text column on either backend (`type_name = "text"`: no PostgreSQL enum type).

/// An endpoint's protocol (`endpoints.protocol`): gRPC endpoints are proxied over HTTP/2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "text")]
#[sqlx(rename_all = "lowercase")]
pub enum Protocol {
    Http,
    Grpc,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
        }
    }
}

/// A deployment's state: Available once every instance of its current launch is ready and
/// no older one remains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeploymentState {
    Progressing,
    Available,
}

impl DeploymentState {
    pub const ALL: [DeploymentState; 2] =
        [DeploymentState::Progressing, DeploymentState::Available];

    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentState::Progressing => "Progressing",
            DeploymentState::Available => "Available",
        }
    }
}

/// An instance's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    Pending,
    Running,
    Terminating,
    Terminated,
    Failed,
    /// Waiting on its process failed: what it does cannot be told.
    Unknown,
}

impl InstanceState {
    pub const ALL: [InstanceState; 6] = [
        InstanceState::Pending,
        InstanceState::Running,
        InstanceState::Terminating,
        InstanceState::Terminated,
        InstanceState::Failed,
        InstanceState::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Pending => "Pending",
            InstanceState::Running => "Running",
            InstanceState::Terminating => "Terminating",
            InstanceState::Terminated => "Terminated",
            InstanceState::Failed => "Failed",
            InstanceState::Unknown => "Unknown",
        }
    }
}

/// What an event records (`events.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "text")]
#[sqlx(rename_all = "snake_case")]
pub enum EventKind {
    DeploymentState,
    InstanceState,
    Ready,
    Restart,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::DeploymentState => "deployment_state",
            EventKind::InstanceState => "instance_state",
            EventKind::Ready => "ready",
            EventKind::Restart => "restart",
        }
    }
}

/// An alert condition of the document's table (`alerts.condition`, and the keys of the
/// alert settings), by its CONTRACT name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, sqlx::Type)]
#[sqlx(type_name = "text")]
pub enum Condition {
    #[sqlx(rename = "qps")]
    Qps,
    #[sqlx(rename = "status_4xx")]
    Status4xx,
    #[sqlx(rename = "status_5xx")]
    Status5xx,
    #[sqlx(rename = "state_progressing")]
    StateProgressing,
    #[sqlx(rename = "state_available")]
    StateAvailable,
    #[sqlx(rename = "cpu_upper")]
    CpuUpper,
    #[sqlx(rename = "cpu_lower")]
    CpuLower,
    #[sqlx(rename = "memory_upper")]
    MemoryUpper,
    #[sqlx(rename = "memory_lower")]
    MemoryLower,
    #[sqlx(rename = "gpu_upper")]
    GpuUpper,
    #[sqlx(rename = "gpu_lower")]
    GpuLower,
    #[sqlx(rename = "monitoring_log")]
    MonitoringLog,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Qps => "qps",
            Condition::Status4xx => "status_4xx",
            Condition::Status5xx => "status_5xx",
            Condition::StateProgressing => "state_progressing",
            Condition::StateAvailable => "state_available",
            Condition::CpuUpper => "cpu_upper",
            Condition::CpuLower => "cpu_lower",
            Condition::MemoryUpper => "memory_upper",
            Condition::MemoryLower => "memory_lower",
            Condition::GpuUpper => "gpu_upper",
            Condition::GpuLower => "gpu_lower",
            Condition::MonitoringLog => "monitoring_log",
        }
    }
}

/// Where an alert's delivery stands (`alerts.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "text")]
#[sqlx(rename_all = "lowercase")]
pub enum AlertStatus {
    /// Not yet sent, retries left: queued again when kep starts.
    Pending,
    Sent,
    /// Given up on: the attempts ran out or the queue was full.
    Failed,
}

impl AlertStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Pending => "pending",
            AlertStatus::Sent => "sent",
            AlertStatus::Failed => "failed",
        }
    }
}

/// Where an engine image came from (`images.source`): registered by reference, or loaded
/// from an uploaded archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "text")]
#[sqlx(rename_all = "lowercase")]
pub enum ImageSource {
    Reference,
    Archive,
}

impl ImageSource {
    pub fn to_api(self) -> kep_api::serving::ImageSource {
        match self {
            ImageSource::Reference => kep_api::serving::ImageSource::Reference,
            ImageSource::Archive => kep_api::serving::ImageSource::Archive,
        }
    }
}
