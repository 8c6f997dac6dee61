//! The messaging service's typed ids.

kep_core::string_id!(
    ClientId,
    "An API client's id (`client_id`, the seed's Customer ID)."
);
kep_core::string_id!(
    MessageUid,
    "A message's key (`uid`): twenty digits that sort in issue order."
);
kep_core::string_id!(FileId, "An uploaded file's id (`file_id`).");
kep_core::string_id!(
    ContentGroupId,
    "The group of an MMS upload's files (`content_group_id`)."
);
kep_core::string_id!(
    ReportGroupId,
    "A group of handed-out RCS results (`report_group_id`)."
);
