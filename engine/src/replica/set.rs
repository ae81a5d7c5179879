//! The gateway's replicas: a fixed list in this process, or the addresses its `--replica` names resolve to,
//! resolved again every `resolve_interval` so replicas can come and go (a Kubernetes headless Service's name
//! resolves to its ready pods); and the budget that bounds how many pieces are sent again.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::remote::{Expect, Remote, RemoteConfig};
use super::{Local, Replica};

type List = Arc<Vec<Arc<Replica>>>;

/// The replicas the gateway routes over. Dropping it stops the re-resolution.
pub struct Replicas {
    list: Arc<RwLock<List>>,
    resolver: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Replicas {
    fn drop(&mut self) {
        if let Some(task) = &self.resolver {
            task.abort();
        }
    }
}

impl Replicas {
    pub fn local(replicas: Vec<Local>) -> Replicas {
        let list = replicas
            .into_iter()
            .map(|l| Arc::new(Replica::Local(l)))
            .collect();
        Replicas {
            list: Arc::new(RwLock::new(Arc::new(list))),
            resolver: None,
        }
    }

    /// The replicas at `targets` (`HOST:PORT`, a host name may resolve to many addresses), resolved now and then
    /// every `config.resolve_interval` (on the current tokio runtime). A name that fails to resolve keeps the
    /// addresses it had.
    pub async fn remote(
        targets: Vec<String>,
        config: RemoteConfig,
        expect: Expect,
    ) -> crate::Result<Replicas> {
        if targets.is_empty() {
            return Err(crate::Error::Config {
                name: "replica",
                message: "a gateway needs at least one replica address".into(),
            });
        }
        let list = Arc::new(RwLock::new(List::default()));
        let mut resolved = HashMap::new();
        resolve(&targets, &mut resolved, &list, &config, &expect).await;
        let task = {
            let list = list.clone();
            async move {
                let mut ticks = tokio::time::interval(config.resolve_interval);
                ticks.tick().await;
                loop {
                    ticks.tick().await;
                    resolve(&targets, &mut resolved, &list, &config, &expect).await;
                }
            }
        };
        Ok(Replicas {
            list,
            resolver: Some(tokio::spawn(task)),
        })
    }

    /// The replicas now.
    pub fn snapshot(&self) -> List {
        self.list
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The up replica with the fewest outstanding tokens, preferring those not in `tried` (which already failed
    /// the piece at hand); `None` when none is up.
    pub fn choose(&self, tried: &[Arc<Replica>]) -> Option<Arc<Replica>> {
        let list = self.snapshot();
        let up = || list.iter().filter(|r| r.is_up());
        let fresh = up()
            .filter(|r| !tried.iter().any(|t| Arc::ptr_eq(t, r)))
            .min_by_key(|r| r.outstanding_tokens());
        fresh
            .or_else(|| up().min_by_key(|r| r.outstanding_tokens()))
            .cloned()
    }
}

/// Resolves every target, and makes the list the union of their addresses: a replica already known is kept (with
/// its connection and load), a new address gets a new one, one no longer listed is dropped from the list (pieces
/// waiting on it still finish).
async fn resolve(
    targets: &[String],
    resolved: &mut HashMap<String, Vec<SocketAddr>>,
    list: &RwLock<List>,
    config: &RemoteConfig,
    expect: &Expect,
) {
    for target in targets {
        match tokio::net::lookup_host(target.as_str()).await {
            Ok(addrs) => {
                let mut addrs: Vec<SocketAddr> = addrs.collect();
                addrs.sort();
                addrs.dedup();
                resolved.insert(target.clone(), addrs);
            }
            Err(e) => eprintln!("replica {target}: cannot resolve it ({e}); keeping what it had"),
        }
    }
    let mut wanted: Vec<SocketAddr> = resolved.values().flatten().copied().collect();
    wanted.sort();
    wanted.dedup();
    let current = list.read().unwrap_or_else(PoisonError::into_inner).clone();
    let known = |addr: &SocketAddr| {
        current
            .iter()
            .find(|r| matches!(r.as_ref(), Replica::Remote(remote) if remote.addr() == *addr))
            .cloned()
    };
    let next: Vec<Arc<Replica>> = wanted
        .iter()
        .map(|addr| {
            known(addr).unwrap_or_else(|| {
                eprintln!("replica {addr}: added");
                Arc::new(Replica::Remote(Remote::new(*addr, config, expect.clone())))
            })
        })
        .collect();
    for gone in current
        .iter()
        .filter(|r| !next.iter().any(|n| Arc::ptr_eq(n, r)))
    {
        eprintln!(
            "replica {}: removed (its name no longer lists it)",
            gone.name()
        );
    }
    *list.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
}

/// How many pieces may be sent again: each request answered adds `ratio` (up to `burst`), each re-send takes
/// one. When replicas fail faster than requests succeed, the budget runs out and requests are refused (503)
/// rather than multiplied across the replicas that are left.
pub struct RetryBudget {
    tokens: Mutex<f64>,
    ratio: f64,
    burst: f64,
}

impl RetryBudget {
    pub fn new(ratio: f64, burst: f64) -> RetryBudget {
        RetryBudget {
            tokens: Mutex::new(burst),
            ratio,
            burst,
        }
    }

    /// A request was answered.
    pub fn deposit(&self) {
        let mut t = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        *t = (*t + self.ratio).min(self.burst);
    }

    /// Takes one re-send from the budget; `false` when it is spent.
    pub fn withdraw(&self) -> bool {
        let mut t = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        if *t >= 1.0 {
            *t -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RetryBudget;

    #[test]
    fn the_retry_budget_allows_its_burst_then_only_its_ratio_of_answered_requests() {
        let budget = RetryBudget::new(0.25, 3.0);
        assert!((0..3).all(|_| budget.withdraw()));
        assert!(!budget.withdraw(), "the burst is spent");
        for _ in 0..3 {
            budget.deposit();
        }
        assert!(!budget.withdraw(), "three answers earn 0.75 of a re-send");
        budget.deposit();
        assert!(budget.withdraw());
        for _ in 0..100 {
            budget.deposit();
        }
        assert_eq!(
            (0..10).filter(|_| budget.withdraw()).count(),
            3,
            "capped at the burst"
        );
    }
}
