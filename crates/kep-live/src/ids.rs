//! The live service's typed ids.

kep_core::string_id!(ServiceId, "A live service's id (`serviceId` in seed 000).");
