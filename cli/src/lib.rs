//! `ksync`, the command-line client of Kuvryn Sync: its [`commands`] and the terminal [`view`]s
//! only it prints. What it shares with the manager comes from the library: reading objects as
//! the user ([`kuvryn_sync::read`]), the shared text views ([`kuvryn_sync::view`]), the
//! dashboard `ksync ui` serves ([`kuvryn_sync::dashboard`]) and the rules of approvals and
//! rollbacks ([`kuvryn_sync::decisions`]).
#![forbid(unsafe_code)]

pub mod commands;
pub mod view;
