//! Learning-rate schedules, stepped once per epoch, with torch's semantics: `step` is
//! `StepLR` (the rate times `gamma` every `step_size` epochs), `cosine` is
//! `CosineAnnealingLR` with `T_max` = the run's epochs and `eta_min` = 0.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How the learning rate changes over the epochs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LrSchedule {
    /// The configured rate throughout.
    #[default]
    None,
    /// The rate times `gamma` every `step_size` epochs.
    Step {
        /// Epochs between two decays.
        step_size: usize,
        /// Factor applied at each decay.
        gamma: f64,
    },
    /// From the configured rate down to 0 along a half cosine over the run's epochs.
    Cosine,
}

impl LrSchedule {
    /// Parses `none`, `step` or `cosine`; `step` takes `step_size` and `gamma`.
    pub fn parse(name: &str, step_size: usize, gamma: f64) -> Result<LrSchedule> {
        let s = match name {
            "none" => LrSchedule::None,
            "step" => LrSchedule::Step { step_size, gamma },
            "cosine" => LrSchedule::Cosine,
            _ => {
                return Err(Error::invalid(format!(
                    "unknown learning-rate schedule `{name}`: expected none, step or cosine"
                )))
            }
        };
        s.validate()?;
        Ok(s)
    }

    /// Checks the values a user can get wrong.
    pub fn validate(&self) -> Result<()> {
        if let LrSchedule::Step { step_size, gamma } = *self {
            if step_size == 0 {
                return Err(Error::invalid("the lr step size must be at least 1 epoch"));
            }
            if !(gamma.is_finite() && gamma > 0.0) {
                return Err(Error::invalid(format!(
                    "lr gamma {gamma} must be a positive number"
                )));
            }
        }
        Ok(())
    }

    /// The rate of 0-based `epoch` in a run of `epochs` epochs starting at `base`.
    pub fn lr_at(&self, base: f64, epoch: usize, epochs: usize) -> f64 {
        match *self {
            LrSchedule::None => base,
            LrSchedule::Step { step_size, gamma } => {
                base * gamma.powi((epoch / step_size.max(1)).min(i32::MAX as usize) as i32)
            }
            LrSchedule::Cosine => {
                let t = epoch.min(epochs) as f64 / epochs.max(1) as f64;
                base * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_multiplies_by_gamma_every_step_size_epochs() {
        let s = LrSchedule::parse("step", 2, 0.5).unwrap();
        let lrs: Vec<f64> = (0..5).map(|e| s.lr_at(0.1, e, 5)).collect();
        assert_eq!(lrs, vec![0.1, 0.1, 0.05, 0.05, 0.025]);
    }

    #[test]
    fn cosine_matches_torch_cosine_annealing() {
        // torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4), lr 1.0: epochs 0..4.
        let s = LrSchedule::Cosine;
        let want = [1.0, 0.853_553_390_593_273_8, 0.5, 0.146_446_609_406_726_2];
        for (e, w) in want.iter().enumerate() {
            assert!((s.lr_at(1.0, e, 4) - w).abs() < 1e-12, "epoch {e}");
        }
    }

    #[test]
    fn bad_names_and_values_are_errors() {
        assert!(LrSchedule::parse("linear", 1, 0.1).is_err());
        assert!(LrSchedule::parse("step", 0, 0.1).is_err());
        assert!(LrSchedule::parse("step", 1, f64::NAN).is_err());
    }
}
