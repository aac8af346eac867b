//! Background WAL checkpoints for the audit database, so that copying the
//! write-ahead log back into the database file mostly happens beside the
//! writer instead of inside one of its group commits.
//!
//! SQLite's auto-checkpoint runs in whichever commit makes the WAL cross its
//! threshold: that group, and every request waiting on it, pays for copying
//! thousands of pages and an fsync of the database file. Here a second
//! connection runs PASSIVE checkpoints a short while after the writer reports
//! commits. A PASSIVE checkpoint never takes the write lock, so the writer
//! keeps committing meanwhile. The writer keeps its own auto-checkpoint as
//! the backstop: when it fires it finds only the frames written since this
//! thread's last pass, and finishing those is what lets the next transaction
//! restart the WAL from its start, so the file stops growing.
//!
//! Durability does not depend on this thread: every commit is already
//! fsynced in the WAL, and a checkpoint cut short by a crash is redone by
//! SQLite on the next open.

use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use super::{sqlite, AuditError};

/// How long after the first reported commit a pass starts: frames written in
/// this window are copied together, and a page rewritten by many groups in a
/// row is copied once.
const DELAY: Duration = Duration::from_millis(20);

/// The writer's side: report commits, and stop the thread at the end.
pub(crate) struct Checkpointer {
    nudge: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Opens a second connection to `path` and starts the thread.
    pub fn start(path: &Path) -> Result<Checkpointer, AuditError> {
        let conn = sqlite::open_checkpointer(path)?;
        let (nudge, rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("audit-checkpoint".into())
            .spawn(move || run(&conn, &rx))
            .map_err(|e| AuditError::Unavailable(format!("cannot start the checkpointer: {e}")))?;
        Ok(Checkpointer {
            nudge: Some(nudge),
            thread: Some(thread),
        })
    }

    /// Says a group was committed. Never blocks: if a pass is already due,
    /// this one is folded into it.
    pub fn committed(&self) {
        if let Some(n) = &self.nudge {
            // Full: a pass is due anyway. Disconnected: the thread is gone and
            // the writer's auto-checkpoint does the work.
            let _ = n.try_send(());
        }
    }
}

impl Drop for Checkpointer {
    /// Stops the thread and waits for a pass in progress (at most one
    /// `DELAY` plus one checkpoint), so that no connection outlives the log.
    fn drop(&mut self) {
        self.nudge = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(conn: &Connection, rx: &Receiver<()>) {
    // Warn once per run of failures, not once per pass.
    let mut failing = false;
    while rx.recv().is_ok() {
        std::thread::sleep(DELAY);
        // Commits reported during the delay are covered by this pass.
        while rx.try_recv().is_ok() {}
        match sqlite::checkpoint_passive(conn) {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("background WAL checkpoints work again");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                // Not fatal: the writer's own auto-checkpoint still runs.
                tracing::warn!(error = %e, "background WAL checkpoint failed");
            }
            Err(_) => {}
        }
    }
}
