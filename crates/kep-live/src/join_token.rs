//! Join tokens (CONTRACT §1 "Media"): a JWT, HS256, whose key is the service's
//! `sha256hex(serviceId:serviceSecret)`, the hash kep already keeps. A customer's server
//! mints one per participant; the socket, WHIP and WHEP take it in place of the secret.

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use kep_api::live::JoinClaims;

use crate::LiveError;
use crate::access::Access;
use crate::ids::{ParticipantId, RoomId, check_id};

/// Who a valid join token lets in, and what it may do.
#[derive(Debug, Clone)]
pub struct JoinGrant {
    pub service_id: String,
    pub room_id: RoomId,
    pub participant_id: ParticipantId,
    pub publish: bool,
    pub subscribe: bool,
}

/// The one answer to a token whose signature was not verified, whatever was wrong with it:
/// no answer tells whether the service it names exists (SECURITY.md).
const NOT_VALID: &str = "not a valid join token";

impl Access {
    /// The grant of `token`, if it is a join token of a service, signed with its key and
    /// unexpired by the service's clock; a bad one is Unauthorized. The precise reason is
    /// given only once the signature holds; before, it goes to the log alone.
    pub fn join_grant(&self, token: &str) -> Result<JoinGrant, LiveError> {
        let claims = self.verified_claims(token).map_err(|why| {
            tracing::info!(reason = %why, "join token refused");
            LiveError::InvalidToken(NOT_VALID.to_owned())
        })?;
        if claims.exp <= self.clock().unix_s() {
            return Err(LiveError::InvalidToken("expired".to_owned()));
        }
        check_id("room", &claims.room)?;
        check_id("sub", &claims.sub)?;
        Ok(JoinGrant {
            service_id: claims.iss,
            room_id: claims.room.into(),
            participant_id: claims.sub.into(),
            publish: claims.publish.unwrap_or(true),
            subscribe: claims.subscribe.unwrap_or(true),
        })
    }

    /// The token's claims once its service's key verifies it, else why not.
    fn verified_claims(&self, token: &str) -> Result<JoinClaims, String> {
        // The issuer names the key: read it first, then check the signature with that key.
        let unverified = jsonwebtoken::dangerous::insecure_decode_claims::<JoinClaims>(token)
            .map_err(|e| format!("not a join token: {e}"))?;
        let service = self.service(&unverified.iss);
        // An unknown service's token is checked against a key no token is signed with, so
        // that it costs what a known one's does.
        let key = service
            .as_ref()
            .map_or(UNKNOWN_SERVICE_KEY, |s| s.service_hs.as_bytes());
        let mut validation = Validation::new(Algorithm::HS256);
        // Expiry is checked by the service's clock, not the system's.
        validation.validate_exp = false;
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        let verified =
            jsonwebtoken::decode::<JoinClaims>(token, &DecodingKey::from_secret(key), &validation);
        match (service, verified) {
            (None, _) => Err(format!("no such service: {:?}", unverified.iss)),
            (Some(_), Err(e)) => Err(format!("not signed by the service: {e}")),
            (Some(_), Ok(data)) => Ok(data.claims),
        }
    }
}

const UNKNOWN_SERVICE_KEY: &[u8] = &[0; 64];
