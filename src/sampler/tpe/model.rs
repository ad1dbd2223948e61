//! How TPE models one param: its kernel domain in model space (the value, or its log), the grid
//! of a stepped param, and the coordinate a trial's value becomes in the history.

use crate::study::space::{last_grid_index, last_int_index};
use crate::study::{Distribution, ParamValue};

/// How one param is modelled.
#[derive(Debug, Clone)]
pub(super) enum Model {
    /// Only one legal value: proposed as is.
    Single(ParamValue),
    /// A distribution no sampler can draw from; left to the random sampler (which refuses it).
    Invalid,
    Numeric(Numeric),
    Categorical {
        n: usize,
    },
}

/// A float or int param. Kernels live in model space: the value, or its log for log params.
#[derive(Debug, Clone, Copy)]
pub(super) struct Numeric {
    /// Kernel domain in model space.
    pub(super) lo: f64,
    pub(super) hi: f64,
    pub(super) log: bool,
    /// Raw bounds of a continuous param, to clamp draws against rounding in `exp`.
    pub(super) low: f64,
    pub(super) high: f64,
    pub(super) grid: Option<Grid>,
}

/// The legal values `low + k * step`, `k = 0..=last`, of a stepped param.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grid {
    pub(super) low: f64,
    pub(super) step: f64,
    pub(super) last: u64,
    /// Raw edges of the first and last cells.
    pub(super) edge_lo: f64,
    pub(super) edge_hi: f64,
    /// `Some((low, step))` for an int param.
    pub(super) int: Option<(i64, i64)>,
    /// A float grid's `high`, which the last point must not pass.
    pub(super) high: f64,
}

impl Model {
    pub(super) fn new(dist: &Distribution) -> Model {
        if dist.check().is_err() {
            return Model::Invalid;
        }
        match *dist {
            Distribution::Float {
                low,
                high,
                step,
                log,
            } => match step {
                Some(s) => {
                    if (high - low) / s > 1e15 {
                        return Model::Invalid;
                    }
                    let last = last_grid_index(low, high, s);
                    if last == 0 {
                        return Model::Single(ParamValue::Float(low));
                    }
                    let grid = Grid {
                        low,
                        step: s,
                        last,
                        edge_lo: low - s / 2.0,
                        edge_hi: low + s * last as f64 + s / 2.0,
                        int: None,
                        high,
                    };
                    Model::Numeric(Numeric {
                        lo: grid.edge_lo,
                        hi: grid.edge_hi,
                        log: false,
                        low,
                        high,
                        grid: Some(grid),
                    })
                }
                None => {
                    if low == high {
                        return Model::Single(ParamValue::Float(low));
                    }
                    let (lo, hi) = if log {
                        (low.ln(), high.ln())
                    } else {
                        (low, high)
                    };
                    Model::Numeric(Numeric {
                        lo,
                        hi,
                        log,
                        low,
                        high,
                        grid: None,
                    })
                }
            },
            Distribution::Int {
                low,
                high,
                step,
                log,
            } => {
                let last = last_int_index(low, high, step);
                if last == 0 {
                    return Model::Single(ParamValue::Int(low));
                }
                let (lowf, stepf) = (low as f64, step as f64);
                let top = lowf + stepf * last as f64;
                // Optuna's log ints have step 1, where the first cell starts at low - 0.5;
                // a wider step must not take the cell's edge to zero or below.
                let half_lo = if log {
                    stepf.min(lowf) / 2.0
                } else {
                    stepf / 2.0
                };
                let grid = Grid {
                    low: lowf,
                    step: stepf,
                    last,
                    edge_lo: lowf - half_lo,
                    edge_hi: top + stepf / 2.0,
                    int: Some((low, step)),
                    high: top,
                };
                let to = |x: f64| if log { x.ln() } else { x };
                Model::Numeric(Numeric {
                    lo: to(grid.edge_lo),
                    hi: to(grid.edge_hi),
                    log,
                    low: lowf,
                    high: top,
                    grid: Some(grid),
                })
            }
            Distribution::Categorical { ref choices } => match choices.len() {
                0 => Model::Invalid,
                1 => Model::Single(ParamValue::Choice(0)),
                n => Model::Categorical { n },
            },
        }
    }

    /// The coordinate the estimators use for `v`: NaN if `v` does not fit this param.
    pub(super) fn coord(&self, v: &ParamValue) -> f64 {
        match (self, v) {
            (Model::Numeric(m), ParamValue::Float(x)) if m.grid.is_none_or(|g| g.int.is_none()) => {
                m.coord(*x)
            }
            (Model::Numeric(m), ParamValue::Int(i)) if m.grid.is_some_and(|g| g.int.is_some()) => {
                m.coord(*i as f64)
            }
            (Model::Categorical { n }, ParamValue::Choice(c)) if c < n => *c as f64,
            _ => f64::NAN,
        }
    }
}

impl Numeric {
    fn model_of(&self, raw: f64) -> f64 {
        if self.log {
            raw.ln()
        } else {
            raw
        }
    }

    pub(super) fn coord(&self, x: f64) -> f64 {
        if !x.is_finite() {
            return f64::NAN;
        }
        match self.grid {
            Some(g) => {
                let k = ((x - g.low) / g.step).round();
                if k < -1e-9 || k > g.last as f64 + 1e-9 {
                    return f64::NAN;
                }
                self.model_of(g.raw(k as u64))
            }
            None if x >= self.low && x <= self.high => self.model_of(x),
            None => f64::NAN,
        }
    }

    /// A draw in model space, as a candidate: the model coordinate, or the grid index.
    pub(super) fn candidate(&self, x: f64) -> f64 {
        match self.grid {
            Some(g) => {
                let raw = if self.log { x.exp() } else { x };
                let k = ((raw - g.low) / g.step).round();
                k.clamp(0.0, g.last as f64)
            }
            None => x.clamp(self.lo, self.hi),
        }
    }

    /// The cell `[left, right]` (model space) of the grid point a candidate names.
    pub(super) fn cell(&self, g: &Grid, k: u64) -> (f64, f64) {
        let v = g.raw(k);
        let left = (v - g.step / 2.0).max(g.edge_lo);
        let right = (v + g.step / 2.0).min(g.edge_hi);
        (self.model_of(left), self.model_of(right))
    }

    pub(super) fn value(&self, cand: f64) -> ParamValue {
        match self.grid {
            Some(g) => {
                let k = cand as u64;
                match g.int {
                    Some((low, step)) => {
                        ParamValue::Int((low as i128 + step as i128 * k as i128) as i64)
                    }
                    None => ParamValue::Float(g.raw(k)),
                }
            }
            None => {
                let raw = if self.log { cand.exp() } else { cand };
                ParamValue::Float(raw.clamp(self.low, self.high))
            }
        }
    }
}

impl Grid {
    fn raw(&self, k: u64) -> f64 {
        match self.int {
            Some((low, step)) => (low as i128 + step as i128 * k as i128) as f64,
            // low + step * k can overshoot high by an ulp.
            None => (self.low + self.step * k as f64).min(self.high),
        }
    }
}
