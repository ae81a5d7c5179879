//! Replicas: where the gateway sends the tokenized pieces of a request. A replica is either in this process (a
//! [`Scheduler`] in front of an [`Engine`]) or across the network (a client of the replica protocol,
//! `proto/embedding/v1/replica.proto`, served by `bench serve --role replica`); the gateway chooses, submits,
//! waits and re-sends through [`Replica`] alone, so there is one routing path for both.
//!
//! A remote replica can fail where a local one cannot: its process dies or stalls. Such a piece comes back as
//! [`Failure::Lost`] with its sequences, and the gateway sends it to another replica; a refusal (overload, a
//! deadline) is the replica's answer and comes back as [`Failure::Refused`], never re-sent.

pub mod proto;
mod remote;
mod server;
mod set;

use std::sync::Arc;

pub use remote::{Expect, Remote, RemoteConfig};
pub use server::grpc_routes;
pub use set::{Replicas, RetryBudget};

use crate::scheduler::{self, Embedded, Load, Scheduler, Ticket, Work};
use crate::Engine;

/// One engine and the scheduler in front of it, in this process.
pub struct Local {
    pub engine: Arc<Engine>,
    pub scheduler: Scheduler,
}

/// Where a piece of a request can go.
pub enum Replica {
    Local(Local),
    Remote(Remote),
}

/// Why a replica gave no embeddings for a piece.
#[derive(Debug)]
pub enum Failure {
    /// The replica's answer: refused (overloaded, expired), shut down, or the batch failed. Not re-sent.
    Refused(scheduler::Error),
    /// The replica failed (connection lost, taken out by health checks): the piece may go to another one.
    Lost { reason: String, seqs: Vec<Vec<u32>> },
}

/// A piece a replica has admitted; await [`Pending::wait`]. Dropping it abandons the piece.
pub enum Pending {
    Local(Ticket),
    /// Boxed: its open call is large beside a ticket.
    Remote(Box<remote::Pending>),
}

impl Pending {
    /// One answer per sequence, in order.
    pub async fn wait(self) -> Result<Vec<Embedded>, Failure> {
        match self {
            Pending::Local(ticket) => ticket.wait().await.map_err(Failure::Refused),
            Pending::Remote(pending) => pending.wait().await,
        }
    }
}

impl Replica {
    /// Submits `seqs`. A piece of a request not yet admitted is admitted or refused at once; one of a request
    /// already admitted (`admitted`) waits for room and is held to no deadline.
    pub async fn submit(
        &self,
        id: &str,
        seqs: Vec<Vec<u32>>,
        work: Work,
        admitted: bool,
    ) -> Result<Pending, Failure> {
        match self {
            Replica::Local(local) => {
                let ticket = if admitted {
                    local.scheduler.submit_waiting(seqs, work).await
                } else {
                    local.scheduler.submit(seqs, work)
                };
                ticket.map(Pending::Local).map_err(Failure::Refused)
            }
            Replica::Remote(remote) => remote
                .submit(id, seqs, work, admitted)
                .await
                .map(|p| Pending::Remote(Box::new(p))),
        }
    }

    /// Tokens sent to it and not yet answered: what the choice of replica balances.
    pub fn outstanding_tokens(&self) -> usize {
        match self {
            Replica::Local(local) => local.scheduler.load().outstanding_tokens(),
            Replica::Remote(remote) => remote.outstanding_tokens(),
        }
    }

    /// Whether it takes work now (a remote one that failed is out until its health check passes).
    pub fn is_up(&self) -> bool {
        match self {
            Replica::Local(_) => true,
            Replica::Remote(remote) => remote.is_up(),
        }
    }

    /// Its scheduler's load: read in place, or as last reported by its health check.
    pub fn load(&self) -> Load {
        match self {
            Replica::Local(local) => local.scheduler.load(),
            Replica::Remote(remote) => remote.load(),
        }
    }

    /// Where it is, for `/info` and logs.
    pub fn name(&self) -> String {
        match self {
            Replica::Local(_) => "local".into(),
            Replica::Remote(remote) => remote.addr().to_string(),
        }
    }

    /// Applies scheduling settings; a remote replica's are its own (set where it runs).
    pub fn reconfigure(&self, config: &crate::EngineConfig) -> crate::Result<()> {
        match self {
            Replica::Local(local) => local.scheduler.reconfigure(config),
            Replica::Remote(_) => Ok(()),
        }
    }

    /// Stops a local scheduler's admission; a remote replica shuts down on its own signal.
    pub fn close(&self) {
        if let Replica::Local(local) = self {
            local.scheduler.close();
        }
    }
}
