//! Which trees htbd starts with: the saved live state, or the config file's.
//!
//! One rule, stated in the book (`docs/control.md`, "Restart and reload"): live changes (the snapshot and journal in `state_dir`)
//! survive a restart while the config file's trees are unchanged. When they changed since the
//! state was saved — the snapshot records a hash of the file's trees in canonical form, so a
//! comment or a log level does not count — the file wins and the old state is set aside in
//! `state_dir/set-aside-TIME/`, with a warning naming it. `--fresh-state` sets it aside always.
//! `htbd --check` prints which one a start would use.

use crate::DaemonConfig;
use crate::DaemonError;
use crate::config::parse_state;
use crate::model::Model;
use crate::persist::{Saved, trees_hash};

/// The TX queues of interface `name` (an `mq` root has a class for each).
fn tx_queues(name: &str) -> u16 {
    u16::try_from(htb_xdp::tx_queue_count(name)).unwrap_or(u16::MAX)
}

/// Where the trees come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The config file's (nothing saved, or the saved state is set aside).
    File {
        /// Why, for the log and `--check`.
        reason: String,
        /// Whether a saved state exists and will be set aside.
        set_aside: bool,
    },
    /// The snapshot and the journal's batches after it.
    Saved {
        /// Journal batches to replay.
        batches: usize,
    },
}

impl Source {
    /// One line for the log and `--check`.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::File { reason, set_aside } => format!(
                "the config file's trees ({reason}){}",
                if *set_aside {
                    "; the saved state will be set aside"
                } else {
                    ""
                }
            ),
            Self::Saved { batches } => format!(
                "the saved live state and {batches} later change batch(es) (the config file's \
                 trees are unchanged since it was saved)"
            ),
        }
    }
}

/// The model of `config`'s trees, with their hash in canonical form (as the saved state
/// writes them): what a start from the file uses, built once.
///
/// # Errors
/// A tree the model refuses (the config parser validated it, so only a bug).
pub fn file_model(config: &DaemonConfig) -> Result<(Model, String), DaemonError> {
    let model = Model::from_trees(config.interfaces.clone(), &tx_queues).map_err(|e| {
        DaemonError::State {
            dir: config.state_dir.clone(),
            message: e.to_string(),
        }
    })?;
    let hash = trees_hash(&model.to_toml());
    Ok((model, hash))
}

/// The hash of `config`'s trees in canonical form.
///
/// # Errors
/// As [`file_model`].
pub fn config_hash(config: &DaemonConfig) -> Result<String, DaemonError> {
    file_model(config).map(|(_, hash)| hash)
}

/// `htbd --check`: where a start would take the trees from, read without the lock and
/// without changing anything.
///
/// # Errors
/// The saved state cannot be read, is damaged, or does not load.
pub fn check(config: &DaemonConfig, fresh_state: bool) -> Result<String, DaemonError> {
    let (saved, _) = Saved::read(&config.state_dir)?;
    let source = choose(&saved, &config_hash(config)?, fresh_state);
    if matches!(source, Source::Saved { .. }) {
        load_saved(config, &saved)?;
    }
    Ok(format!(
        "a start would use {} (state_dir {})",
        source.describe(),
        config.state_dir.display()
    ))
}

/// Decides where the trees come from.
#[must_use]
pub fn choose(saved: &Saved, config_hash: &str, fresh_state: bool) -> Source {
    let has_state = saved.snapshot.is_some() || !saved.journal.is_empty();
    if !has_state {
        return Source::File {
            reason: "no saved state".into(),
            set_aside: false,
        };
    }
    if fresh_state {
        return Source::File {
            reason: "--fresh-state".into(),
            set_aside: true,
        };
    }
    if saved.snapshot.is_none() {
        // A journal without its snapshot: state.toml was removed by hand.
        return Source::File {
            reason: "journal.jsonl without state.toml".into(),
            set_aside: true,
        };
    }
    match saved.meta.config_hash.as_deref() {
        Some(hash) if hash == config_hash => Source::Saved {
            batches: saved.journal.len(),
        },
        Some(_) => Source::File {
            reason: "its trees changed since the live state was saved".into(),
            set_aside: true,
        },
        // A snapshot from before the hash was recorded: keep the old rule (it wins).
        None => Source::Saved {
            batches: saved.journal.len(),
        },
    }
}

/// The model of the saved state: the snapshot's trees for the config's ports, then every
/// journal batch, which must all apply (they did when they were acknowledged).
///
/// # Errors
/// The snapshot cannot be parsed, or a batch no longer applies.
pub fn load_saved(config: &DaemonConfig, saved: &Saved) -> Result<Model, DaemonError> {
    let state_error = |message: String| DaemonError::State {
        dir: config.state_dir.clone(),
        message,
    };
    let snapshot = saved.snapshot.as_deref().unwrap_or_default();
    let saved_trees = parse_state(snapshot).map_err(|e| {
        state_error(format!(
            "state.toml: {e} (fix it, or start with --fresh-state)"
        ))
    })?;
    for extra in saved_trees
        .iter()
        .filter(|s| !config.interfaces.iter().any(|c| c.name == s.name))
    {
        tracing::warn!(
            "saved state has interface {}, which the config no longer lists: ignored",
            extra.name
        );
    }
    let trees = config
        .interfaces
        .iter()
        .map(|c| {
            saved_trees
                .iter()
                .find(|s| s.name == c.name)
                .cloned()
                .unwrap_or_else(|| c.clone())
        })
        .collect();
    let mut model = Model::from_trees(trees, &tx_queues).map_err(|e| state_error(e.to_string()))?;
    for (seq, batch) in &saved.journal {
        model.apply(batch).map_err(|e| {
            state_error(format!(
                "journal.jsonl batch {seq} no longer applies ({e}); htbd will not start from a \
                 state that differs from what was acknowledged (start with --fresh-state to set \
                 it aside)"
            ))
        })?;
    }
    Ok(model)
}
