//! Server-Side Apply and `managedFields` (fieldsV1) bookkeeping for Update operations, and the
//! non-apply patch types (JSON merge patch, JSON patch, strategic merge patch).
