//! The replicaset controller (see the module documentation of [`crate::kcm`]).

use crate::client::Client;

/// One reconcile pass over every object this controller owns.
pub async fn reconcile(_client: Client) {}
