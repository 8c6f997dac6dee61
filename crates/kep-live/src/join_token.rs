//! Join tokens (CONTRACT §1 "Media"): a JWT, HS256, whose key is the service's
//! `sha256hex(serviceId:serviceSecret)`, the hash kep already keeps. A customer's server
//! mints one per participant; the socket, WHIP and WHEP take it in place of the secret.

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use kep_api::live::JoinClaims;

use crate::LiveError;
use crate::access::Access;
use crate::api::check_id;

/// Who a valid join token lets in, and what it may do.
#[derive(Debug, Clone)]
pub struct JoinGrant {
    pub service_id: String,
    pub room_id: String,
    pub participant_id: String,
    pub publish: bool,
    pub subscribe: bool,
}

impl Access {
    /// The grant of `token`, if it is a join token of a service, signed with its key and
    /// unexpired by the service's clock; a bad one is Unauthorized, saying why.
    pub fn join_grant(&self, token: &str) -> Result<JoinGrant, LiveError> {
        let refused = |why: &str| LiveError::InvalidToken(why.to_owned());
        // The issuer names the key: read it first, then check the signature with that key.
        let unverified = jsonwebtoken::dangerous::insecure_decode_claims::<JoinClaims>(token)
            .map_err(|e| refused(&format!("not a join token: {e}")))?;
        let service = self
            .service(&unverified.iss)
            .ok_or_else(|| refused("no such service"))?;
        let mut validation = Validation::new(Algorithm::HS256);
        // Expiry is checked by the service's clock below, not the system's.
        validation.validate_exp = false;
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        let key = DecodingKey::from_secret(service.service_hs.as_bytes());
        let claims = jsonwebtoken::decode::<JoinClaims>(token, &key, &validation)
            .map_err(|e| refused(&format!("not signed by the service: {e}")))?
            .claims;
        if claims.exp <= self.clock().unix_s() {
            return Err(refused("expired"));
        }
        check_id("room", &claims.room)?;
        check_id("sub", &claims.sub)?;
        Ok(JoinGrant {
            service_id: claims.iss,
            room_id: claims.room,
            participant_id: claims.sub,
            publish: claims.publish.unwrap_or(true),
            subscribe: claims.subscribe.unwrap_or(true),
        })
    }
}
