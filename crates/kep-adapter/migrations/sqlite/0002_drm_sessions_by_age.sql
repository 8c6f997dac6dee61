-- The operator's listing of DRM sessions, newest first (GET /admin/v1/adapter/drm-requests).
CREATE INDEX drm_sessions_newest ON drm_sessions(created_at DESC, session_id DESC);
