//! A running trial's questions: a `suggest` answered by Optuna's rules and the sampler and
//! written the moment it is new, a `report` recorded and answered with the pruner's decision,
//! a constraint recorded and kept for the samplers.

use super::Core;
use crate::store::ParamRefused;
use crate::study::{rules, Claimed};
use crate::supervisor::suggest::Answer;
use tracing::warn;

impl Core {
    /// The objective of running trial `c` asks for param `name` from `dist` (Optuna's JSON
    /// form, as the worker sent it): its value in external form, written to the trial the
    /// moment it is new, or why not. Optuna's rules (`suggest::Live::answer`, the study's
    /// earlier use of the name), then the sampler.
    pub(in crate::supervisor) async fn suggest(
        &mut self,
        c: &Claimed,
        name: &str,
        dist: &serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        // The rules `check` applies to [params], and Optuna's constructors.
        rules::param_name(name)?;
        let dist = rules::requested(dist)?;
        let Some(live) = self.live.get(&c.trial_id) else {
            return Err("the trial is not running".into());
        };
        let proposed = match live.answer(name, &dist) {
            Answer::Have(v) => {
                let ext = dist.external(&v);
                if let Some(l) = self.live.get_mut(&c.trial_id) {
                    l.asked(name, &dist, &v);
                }
                return Ok(ext);
            }
            Answer::Refuse(why) => return Err(why),
            Answer::New(v) => v,
        };
        let unreadable = |e: crate::store::StoreError| {
            warn!(trial = c.number, "could not record param `{name}`: {e}");
            format!("sweepd could not record the param: {e}")
        };
        if let Some(why) = self
            .store
            .param_conflict(&self.study, name, &dist)
            .await
            .map_err(unreadable)?
        {
            return Err(why);
        }
        let v = match proposed {
            Some(v) => v,
            None => self.sampler.suggest(name, &dist, c.number as u64)?,
        };
        match self
            .store
            .set_param(&self.study, c.trial_id, name, &dist, &v)
            .await
            .map_err(unreadable)?
        {
            Ok(()) => {}
            Err(ParamRefused::Conflict(why)) => return Err(why),
            Err(ParamRefused::NotRunning) => {
                return Err("the trial is no longer running (another process ended it)".into())
            }
        }
        let ext = dist.external(&v);
        if let Some(l) = self.live.get_mut(&c.trial_id) {
            l.asked(name, &dist, &v);
            let observed = l.observed();
            self.sampler.observe(c.number, &observed);
        }
        Ok(ext)
    }

    /// A constraint its objective set (Optuna 5's `trial.set_constraint`): recorded the first
    /// time its key is set (Optuna ignores a second), and kept for the samplers, who learn it
    /// with the trial's outcome. Why not, when refused.
    pub(in crate::supervisor) async fn constraint(
        &mut self,
        c: &Claimed,
        key: &str,
        value: f64,
    ) -> Result<(), String> {
        rules::constraint(key, value)?;
        let Some(live) = self.live.get(&c.trial_id) else {
            return Err("the trial is not running".into());
        };
        if live.constraints.contains_key(key) {
            return Ok(());
        }
        match self.store.set_constraint(c.trial_id, key, value).await {
            Ok(true) => {
                if let Some(l) = self.live.get_mut(&c.trial_id) {
                    l.constraints.insert(key.to_owned(), value);
                }
                Ok(())
            }
            Ok(false) => Err("the trial is no longer running, or set this key before".into()),
            Err(e) => {
                warn!(trial = c.number, "could not record constraint `{key}`: {e}");
                Err(format!("sweepd could not record the constraint: {e}"))
            }
        }
    }

    /// An intermediate value: recorded, and answered with the pruner's decision.
    pub(in crate::supervisor) async fn report(
        &mut self,
        c: &Claimed,
        step: i64,
        value: f64,
    ) -> bool {
        if let Err(e) = self.store.report(c.trial_id, step, value).await {
            warn!("could not record an intermediate value: {e}");
        }
        self.pruner.report(c.number, step, value)
    }
}
