//! What the steering commands (`pause`, `resume`, `stop`, `cancel`, `kill`, `enqueue`) share:
//! who is asking (recorded with the study's control state and a trial killed by hand), and
//! which daemons run the study now, so that each can say what will happen and who will do it.

use super::error::CliError;
use super::open::Opened;
use crate::store::{DaemonView, Engine};
use crate::study::DaemonState;
use crate::supervisor;

/// Who asks: the user name (else the uid) and this host's id in the study (`SWEEPD_HOST_ID`,
/// else the hostname, as `sweepd run` names its host).
pub(super) fn who() -> Result<(String, String), CliError> {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {uid}"), |u| u.name);
    let host = supervisor::host_id().map_err(|e| CliError::Usage(e.to_string()))?;
    Ok((user, host))
}

/// The study's daemons that run now, as far as their rows say: not stopped or gone, and a
/// heartbeat fresher than `status` requires (one host: a minute; several hosts: `[storage]
/// host_timeout`, from the config when there is one).
pub(super) async fn live_daemons(opened: &Opened) -> Result<Vec<DaemonView>, CliError> {
    let gone_after = if opened.store.engine() == Engine::Postgres {
        opened
            .config
            .as_ref()
            .map_or(crate::config::DEFAULT_HOST_TIMEOUT, |c| {
                c.storage.host_timeout
            })
    } else {
        supervisor::DAEMON_GONE_AFTER
    };
    Ok(opened
        .store
        .daemons(&opened.study)
        .await?
        .into_iter()
        .filter(|d| {
            !matches!(d.state, DaemonState::Stopped | DaemonState::Gone)
                && supervisor::heartbeat_fresh(d.age_s, gone_after)
        })
        .collect())
}

/// "the daemon on node1 (pid 4242)", "the 2 daemons on node1 (pid 1), node2 (pid 2)".
pub(super) fn daemons_text(daemons: &[DaemonView]) -> String {
    let each: Vec<String> = daemons
        .iter()
        .map(|d| format!("{} (pid {})", d.host, d.pid))
        .collect();
    match each.as_slice() {
        [] => "no daemon".to_owned(),
        [one] => format!("the daemon on {one}"),
        many => format!("the {} daemons on {}", many.len(), many.join(", ")),
    }
}

/// `--json`'s list of the daemons that run the study.
pub(super) fn daemons_json(daemons: &[DaemonView]) -> serde_json::Value {
    serde_json::Value::Array(
        daemons
            .iter()
            .map(|d| serde_json::json!({"host": d.host, "pid": d.pid}))
            .collect(),
    )
}
