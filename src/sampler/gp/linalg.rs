//! The dense linear algebra a Gaussian process needs, on small square matrices held row-major
//! in a `Vec<f64>`: the Cholesky factor of a covariance matrix, triangular solves with it, and
//! the inverse it gives. Nothing here allocates more than its result; sizes stay at the few
//! hundred trials a fit is bounded to (`super::MAX_FIT_TRIALS`), where a plain triple loop is
//! as fast as anything blocked.

/// A square matrix, row-major.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Matrix {
    pub(super) n: usize,
    pub(super) data: Vec<f64>,
}

impl Matrix {
    pub(super) fn zeros(n: usize) -> Matrix {
        Matrix {
            n,
            data: vec![0.0; n * n],
        }
    }

    pub(super) fn at(&self, i: usize, j: usize) -> f64 {
        self.data[i * self.n + j]
    }

    pub(super) fn set(&mut self, i: usize, j: usize, v: f64) {
        self.data[i * self.n + j] = v;
    }

    #[cfg(test)]
    pub(super) fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.n..(i + 1) * self.n]
    }

    /// The lower Cholesky factor `L` of this symmetric matrix (`A = L L^T`), or `None` when it
    /// is not positive definite (a pivot not above zero, or not finite).
    pub(super) fn cholesky(&self) -> Option<Matrix> {
        let n = self.n;
        let mut l = Matrix::zeros(n);
        for j in 0..n {
            let lj = j * n;
            let mut d = self.data[lj + j];
            for k in 0..j {
                d -= l.data[lj + k] * l.data[lj + k];
            }
            if !(d > 0.0 && d.is_finite()) {
                return None;
            }
            let djj = d.sqrt();
            l.data[lj + j] = djj;
            for i in j + 1..n {
                let li = i * n;
                let mut s = self.data[li + j];
                for k in 0..j {
                    s -= l.data[li + k] * l.data[lj + k];
                }
                l.data[li + j] = s / djj;
            }
        }
        Some(l)
    }

    /// `L^{-1} b` for this lower triangular `L`, in place.
    pub(super) fn solve_lower(&self, b: &mut [f64]) {
        let n = self.n;
        for i in 0..n {
            let row = &self.data[i * n..i * n + i];
            let s: f64 = row.iter().zip(&b[..i]).map(|(a, x)| a * x).sum();
            b[i] = (b[i] - s) / self.data[i * n + i];
        }
    }

    /// `L^{-T} b` for this lower triangular `L`, in place.
    pub(super) fn solve_upper_t(&self, b: &mut [f64]) {
        let n = self.n;
        for i in (0..n).rev() {
            let mut s = b[i];
            for (k, bk) in b.iter().enumerate().skip(i + 1) {
                s -= self.data[k * n + i] * bk;
            }
            b[i] = s / self.data[i * n + i];
        }
    }

    /// `A^{-1} b` where this is `A`'s Cholesky factor, in place.
    pub(super) fn cho_solve(&self, b: &mut [f64]) {
        self.solve_lower(b);
        self.solve_upper_t(b);
    }

    /// `A^{-1}` where this is `A`'s Cholesky factor: `L^{-T} L^{-1}`, by rows (the loops run
    /// along contiguous rows: this is the fit's costliest step).
    pub(super) fn cho_inverse(&self) -> Matrix {
        let n = self.n;
        // M = L^{-1}, lower triangular, row by row: M_i = (e_i - sum_k<i L_ik M_k) / L_ii.
        let mut m = Matrix::zeros(n);
        for i in 0..n {
            let (done, rest) = m.data.split_at_mut(i * n);
            let row = &mut rest[..n];
            row[i] = 1.0;
            for k in 0..i {
                let l = self.data[i * n + k];
                if l != 0.0 {
                    let mk = &done[k * n..k * n + k + 1];
                    for (r, v) in row[..=k].iter_mut().zip(mk) {
                        *r -= l * v;
                    }
                }
            }
            let d = self.data[i * n + i];
            row[..=i].iter_mut().for_each(|v| *v /= d);
        }
        // A^{-1} = M^T M: row k of M adds M_ki M_kj to (i, j), j <= i <= k.
        let mut inv = Matrix::zeros(n);
        for k in 0..n {
            let mk = &m.data[k * n..k * n + k + 1];
            for i in 0..=k {
                let a = mk[i];
                if a == 0.0 {
                    continue;
                }
                let out = &mut inv.data[i * n..i * n + i + 1];
                for (o, b) in out.iter_mut().zip(&mk[..=i]) {
                    *o += a * b;
                }
            }
        }
        for i in 0..n {
            for j in 0..i {
                inv.data[j * n + i] = inv.data[i * n + j];
            }
        }
        inv
    }
}

pub(super) fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spd(n: usize) -> Matrix {
        // B B^T + n I from a fixed B.
        let b: Vec<f64> = (0..n * n)
            .map(|k| ((k * 7919) % 13) as f64 / 13.0 - 0.4)
            .collect();
        let mut a = Matrix::zeros(n);
        for i in 0..n {
            for j in 0..n {
                let s: f64 = (0..n).map(|k| b[i * n + k] * b[j * n + k]).sum();
                a.set(i, j, s + if i == j { n as f64 } else { 0.0 });
            }
        }
        a
    }

    #[test]
    fn cholesky_solves_and_inverts() {
        let a = spd(7);
        let l = a.cholesky().unwrap();
        for i in 0..7 {
            for j in 0..7 {
                let s: f64 = (0..7).map(|k| l.at(i, k) * l.at(j, k)).sum();
                assert!((s - a.at(i, j)).abs() < 1e-12, "{i} {j}");
            }
        }
        let b: Vec<f64> = (0..7).map(|i| i as f64 - 3.0).collect();
        let mut x = b.clone();
        l.cho_solve(&mut x);
        for (i, bi) in b.iter().enumerate() {
            assert!((dot(a.row(i), &x) - bi).abs() < 1e-12);
        }
        let inv = l.cho_inverse();
        for i in 0..7 {
            for j in 0..7 {
                let s: f64 = (0..7).map(|k| a.at(i, k) * inv.at(k, j)).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((s - want).abs() < 1e-12, "{i} {j}: {s}");
            }
        }
    }

    #[test]
    fn a_matrix_that_is_not_positive_definite_has_no_factor() {
        let mut a = spd(3);
        a.set(2, 2, -1.0);
        assert!(a.cholesky().is_none());
        a.set(2, 2, f64::NAN);
        assert!(a.cholesky().is_none());
    }
}
