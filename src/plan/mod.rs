//! The pure planning core: validate rendered objects (this module's [`validate`]); normalize,
//! diff and the deterministic plan come with the rest of the planning work. No kube client, no
//! network: table-tested from `testdata/plan/`.

pub mod validate;
