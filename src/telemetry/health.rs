//! Health: the liveness answer for load balancers and the detailed report
//! for operators.
//!
//! Subsystems register a [`Component`] at start-up. `/health` (liveness)
//! stays cheap: two atomics and each component's [`Component::fatal`], a
//! check for a failure the process cannot recover from by itself (the audit
//! writer has stopped), which only a restart fixes and so is what a
//! liveness probe is for. A failure that heals by itself (a full disk, a
//! locked database) is not fatal: `/ready` and `/health/detailed` show it
//! and the pod keeps its held connections. `/health/detailed` asks every
//! component for its status and key facts. The overall status is the worst
//! of the components, so a failing audit log or a degraded policy set is
//! never hidden behind a green light.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

/// A component's condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Degraded,
    Failing,
}

/// What a component says about itself: a status plus facts for operators.
/// Facts never hold secrets.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub status: Status,
    #[serde(flatten)]
    pub facts: serde_json::Map<String, serde_json::Value>,
}

impl Report {
    pub fn new(status: Status) -> Report {
        Report {
            status,
            facts: serde_json::Map::new(),
        }
    }

    pub fn fact(mut self, key: &str, value: impl Into<serde_json::Value>) -> Report {
        self.facts.insert(key.to_string(), value.into());
        self
    }
}

/// A part of the sidecar that reports its own health.
pub trait Component: Send + Sync {
    fn name(&self) -> &'static str;
    fn report(&self) -> Report;
    /// Why this component can no longer work and cannot recover by itself,
    /// if so: `/health` answers 503 then, so that the orchestrator restarts
    /// the process. Called on every liveness probe, so it must be cheap.
    fn fatal(&self) -> Option<String> {
        None
    }
}

/// What `/health` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Serving: 200.
    Live,
    /// Before the end of start-up: 503.
    Starting,
    /// A graceful drain has begun: 503.
    Draining,
    /// A component failed for good ([`Component::fatal`]): 503 with the
    /// reasons, each prefixed with the component's name.
    Dead(Vec<String>),
}

/// The registry of components plus the process-wide flags.
pub struct Health {
    components: Vec<Arc<dyn Component>>,
    started: Instant,
    draining: AtomicBool,
    /// Flips to `true` with `draining`, for those who wait for it.
    drain: tokio::sync::watch::Sender<bool>,
    ready: AtomicBool,
}

#[derive(Serialize)]
pub struct Detailed {
    pub status: Status,
    pub version: &'static str,
    pub uptime_s: u64,
    pub draining: bool,
    pub components: serde_json::Map<String, serde_json::Value>,
}

impl Health {
    pub fn new(components: Vec<Arc<dyn Component>>) -> Health {
        Health {
            components,
            started: Instant::now(),
            draining: AtomicBool::new(false),
            drain: tokio::sync::watch::Sender::new(false),
            ready: AtomicBool::new(false),
        }
    }

    /// Marks the start of a graceful drain: `/health` answers 503 from now on.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.drain.send_replace(true);
    }

    /// Resolves once a drain has begun (at once if it has).
    pub async fn until_draining(&self) {
        let mut rx = self.drain.subscribe();
        // The sender lives as long as `self`: this never errs while borrowed.
        let _ = rx.wait_for(|d| *d).await;
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Marks the end of start-up (first policy load done).
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    /// Whether start-up is over and no drain has begun. A component can
    /// still be dead: see [`Health::liveness`].
    pub fn is_live(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && !self.is_draining()
    }

    /// The liveness answer: draining and starting first, then any
    /// component's [`Component::fatal`] failure.
    pub fn liveness(&self) -> Liveness {
        if self.is_draining() {
            return Liveness::Draining;
        }
        if !self.ready.load(Ordering::SeqCst) {
            return Liveness::Starting;
        }
        let dead: Vec<String> = self
            .components
            .iter()
            .filter_map(|c| c.fatal().map(|why| format!("{}: {why}", c.name())))
            .collect();
        if dead.is_empty() {
            Liveness::Live
        } else {
            Liveness::Dead(dead)
        }
    }

    pub fn detailed(&self) -> Detailed {
        let mut components = serde_json::Map::new();
        let mut worst = Status::Ok;
        for c in &self.components {
            let r = c.report();
            worst = worst.max(r.status);
            let value = serde_json::to_value(&r)
                .unwrap_or_else(|_| serde_json::json!({"status": "failing"}));
            components.insert(c.name().to_string(), value);
        }
        if !self.is_live() {
            worst = worst.max(Status::Degraded);
        }
        Detailed {
            status: worst,
            version: env!("CARGO_PKG_VERSION"),
            uptime_s: self.started.elapsed().as_secs(),
            draining: self.is_draining(),
            components,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(&'static str, Status);
    impl Component for Fixed {
        fn name(&self) -> &'static str {
            self.0
        }
        fn report(&self) -> Report {
            Report::new(self.1).fact("n", 1)
        }
    }

    #[test]
    fn worst_component_wins() {
        let h = Health::new(vec![
            Arc::new(Fixed("a", Status::Ok)),
            Arc::new(Fixed("b", Status::Degraded)),
        ]);
        h.set_ready();
        let d = h.detailed();
        assert_eq!(d.status, Status::Degraded);
        assert_eq!(d.components["b"]["status"], "degraded");
        assert_eq!(d.components["a"]["n"], 1);
        let h = Health::new(vec![
            Arc::new(Fixed("a", Status::Failing)),
            Arc::new(Fixed("b", Status::Degraded)),
        ]);
        h.set_ready();
        assert_eq!(h.detailed().status, Status::Failing);
    }

    struct Gone;
    impl Component for Gone {
        fn name(&self) -> &'static str {
            "audit"
        }
        fn report(&self) -> Report {
            Report::new(Status::Failing)
        }
        fn fatal(&self) -> Option<String> {
            Some("the writer has stopped".into())
        }
    }

    #[test]
    fn a_fatal_component_is_not_live_but_draining_and_starting_come_first() {
        let h = Health::new(vec![Arc::new(Fixed("a", Status::Failing))]);
        h.set_ready();
        // Failing but not fatal: still live (only /ready turns).
        assert_eq!(h.liveness(), Liveness::Live);
        let h = Health::new(vec![Arc::new(Fixed("a", Status::Ok)), Arc::new(Gone)]);
        assert_eq!(h.liveness(), Liveness::Starting);
        h.set_ready();
        assert_eq!(
            h.liveness(),
            Liveness::Dead(vec!["audit: the writer has stopped".into()])
        );
        h.set_draining();
        assert_eq!(h.liveness(), Liveness::Draining);
    }

    #[test]
    fn draining_is_not_live() {
        let h = Health::new(vec![]);
        assert!(!h.is_live());
        h.set_ready();
        assert!(h.is_live());
        assert_eq!(h.liveness(), Liveness::Live);
        h.set_draining();
        assert!(!h.is_live());
        assert_eq!(h.detailed().status, Status::Degraded);
    }
}
