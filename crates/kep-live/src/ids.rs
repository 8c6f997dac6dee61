//! The live service's typed ids, and the rule of ids a client chooses.

use crate::LiveError;

kep_core::string_id!(ServiceId, "A live service's id (`serviceId` in seed 000).");
kep_core::string_id!(
    RoomId,
    "A room's id (`roomId`), chosen by the client that joins it."
);
kep_core::string_id!(
    ParticipantId,
    "A participant's id in its room (`participantId`), chosen by its client."
);

/// Checks an identifier chosen by a client: not blank, at most 128 characters, no control
/// characters.
pub(crate) fn check_id(field: &str, id: &str) -> Result<(), LiveError> {
    let blank = id.trim().is_empty();
    if blank || id.chars().count() > 128 || id.chars().any(char::is_control) {
        return Err(LiveError::invalid_params(
            field,
            "must be 1 to 128 characters, not all blank, none a control character",
        ));
    }
    Ok(())
}
