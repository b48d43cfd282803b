//! Gemm and MatMul.
//!
//! With constant right-hand weights (the common case) both become FULLY_CONNECTED, whose
//! weights the runtime pre-packs once; otherwise BATCH_MATMUL, with batch dimensions
//! broadcast explicitly (the NN operation requires equal batch dimensions).

use nnc_formats::nn::OperationType;
use nnc_formats::tensor::DataType;

use super::super::constant::{self, ConstTensor};
use super::{Lowerer, NResult, Node, TensorValue, Value, invalid, unsupported};

impl Lowerer<'_> {
    /// FULLY_CONNECTED of a [rows, K] operand with weights [N, K] and a bias of N values.
    pub(super) fn fully_connected(
        &mut self,
        n: &Node,
        x: u32,
        weights: ConstTensor,
        bias: &[f32],
    ) -> NResult<u32> {
        let weights = if weights.dtype == DataType::F32 {
            weights
        } else {
            constant::cast(&weights, DataType::F32)
        };
        let w = self.const_operand_owned(weights)?.operand;
        let b = self.model.add_f32_tensor(vec![bias.len() as u32], bias);
        let act = self.i32_const(0);
        self.emit(n, OperationType::FullyConnected, vec![x, w, b, act])
    }

    pub(super) fn gemm(&mut self, n: &Node) -> NResult<()> {
        let a = self.tensor(n, 0)?;
        self.require_float(n, a)?;
        let alpha = n.attrs.float_or("alpha", 1.0)?;
        let beta = n.attrs.float_or("beta", 1.0)?;
        let trans_a = n.attrs.int_or("transA", 0)? != 0;
        let trans_b = n.attrs.int_or("transB", 0)? != 0;
        if self.rank(a) != 2 {
            return invalid("Gemm needs a rank-2 A");
        }
        let a_op = if trans_a {
            self.transpose_op(n, a.operand, &[1, 0])?
        } else {
            a.operand
        };
        let c = self.input(n, 2)?;
        let b_value = self.required(n, 1)?;
        let mut y = match &b_value {
            Value::Const(b) => {
                if b.shape.len() != 2 {
                    return invalid("Gemm needs a rank-2 B");
                }
                // Weights [N, K] = (transB ? B : B^T) * alpha.
                let w = if trans_b {
                    (**b).clone()
                } else {
                    constant::transpose(b, &[1, 0])?
                };
                let w = if alpha != 1.0 {
                    constant::unary(&constant::cast(&w, DataType::F32), |v| v * f64::from(alpha))
                } else {
                    w
                };
                let units = w.shape[0];
                // A constant C that broadcasts along rows folds into the bias.
                let folded_bias = match &c {
                    // Only a C that broadcasts along rows by itself ([N], [1, N], [1] or a
                    // scalar) is a bias; [M, 1] or [M, N] is added afterwards.
                    Some(Value::Const(c))
                        if c.element_count() == 1
                            || (c.shape.last() == Some(&units)
                                && c.shape.iter().rev().skip(1).all(|&d| d == 1)) =>
                    {
                        let cb = constant::broadcast_to(c, &[units], &self.budget)?;
                        Some(
                            constant::to_f32s(&cb)
                                .into_iter()
                                .map(|v| v * beta)
                                .collect::<Vec<f32>>(),
                        )
                    }
                    None => Some(vec![0.0; units]),
                    _ => None,
                };
                let bias = folded_bias.clone().unwrap_or(vec![0.0; units]);
                let out = self.fully_connected(n, a_op, w, &bias)?;
                if folded_bias.is_some() {
                    self.set_tensor(n, 0, out, DataType::F32, false);
                    return Ok(());
                }
                out
            }
            Value::Tensor(_) => {
                let b = self.tensor(n, 1)?;
                self.require_float(n, b)?;
                let adj_a = self.bool_const(false);
                let adj_b = self.bool_const(trans_b);
                let mut out = self.emit(
                    n,
                    OperationType::BatchMatmul,
                    vec![a_op, b.operand, adj_a, adj_b],
                )?;
                if alpha != 1.0 {
                    out = self
                        .with_scalar(
                            n,
                            OperationType::Mul,
                            TensorValue { operand: out, ..a },
                            f64::from(alpha),
                        )?
                        .operand;
                }
                if c.is_none() {
                    self.set_tensor(n, 0, out, DataType::F32, false);
                    return Ok(());
                }
                out
            }
        };
        // Add beta * C.
        let cv = match c {
            Some(Value::Const(c)) => {
                let scaled =
                    constant::unary(&constant::cast(&c, DataType::F32), |v| v * f64::from(beta));
                self.const_operand(&scaled)?
            }
            Some(Value::Tensor(_)) => {
                let ct = self.tensor(n, 2)?;
                if beta != 1.0 {
                    self.with_scalar(n, OperationType::Mul, ct, f64::from(beta))?
                } else {
                    ct
                }
            }
            None => return invalid("unreachable"),
        };
        let act = self.i32_const(0);
        y = self.emit(n, OperationType::Add, vec![y, cv.operand, act])?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }

    /// `[..., M, K] x [K, N] -> [..., M, N]` (N dropped when `vector_b`, B then being
    /// `[K]`), where `product` emits an operation that reads its operand as rows of K
    /// values and writes `[rows, N]` (FULLY_CONNECTED, DYNAMIC_FULLY_CONNECTED): A is
    /// given that operation's rank >= 2 and the result A's leading dimensions. Returns
    /// the result and whether ONNX sees it as rank 0.
    pub(super) fn rows_product(
        &mut self,
        n: &Node,
        a: TensorValue,
        units: usize,
        vector_b: bool,
        product: impl FnOnce(&mut Self, u32) -> NResult<u32>,
    ) -> NResult<(u32, bool)> {
        let a_dims = self.dims(a);
        // The operation needs rank >= 2: a vector A is one row.
        let rows = if a_dims.len() == 1 {
            self.reshape_to(n, a.operand, &[1, a_dims[0]])?
        } else {
            a.operand
        };
        let y = product(self, rows)?;
        // Restore the batch dimensions: A's leading dims, then N (dropped for a 1-D B).
        let mut out_dims: Vec<u32> = a_dims[..a_dims.len().saturating_sub(1)].to_vec();
        if !vector_b {
            out_dims.push(units as u32);
        }
        let scalar = out_dims.is_empty();
        let y = self.reshape_to(n, y, if scalar { &[1] } else { &out_dims })?;
        Ok((y, scalar))
    }

    pub(super) fn matmul(&mut self, n: &Node) -> NResult<()> {
        let a = self.tensor(n, 0)?;
        self.require_float(n, a)?;
        let a_dims = self.dims(a);
        let b_value = self.required(n, 1)?;
        if let Value::Const(b) = &b_value
            && (1..=2).contains(&b.shape.len())
        {
            // [..., M, K] x [K, N]: FULLY_CONNECTED on the flattened rows.
            let k = b.shape[0];
            let (w, n_out) = if b.shape.len() == 2 {
                (constant::transpose(b, &[1, 0])?, b.shape[1])
            } else {
                (
                    ConstTensor {
                        shape: vec![1, k],
                        ..(**b).clone()
                    },
                    1,
                )
            };
            let last = a_dims.last().copied().unwrap_or(0);
            if last != 0 && last as usize != k {
                return invalid(format!("MatMul inner dimensions differ: {last} vs {k}"));
            }
            let (y, scalar) =
                self.rows_product(n, a, n_out, b.shape.len() == 1, |this, rows| {
                    this.fully_connected(n, rows, w, &vec![0.0; n_out])
                })?;
            self.set_tensor(n, 0, y, DataType::F32, scalar);
            return Ok(());
        }
        let b = self.tensor(n, 1)?;
        self.require_float(n, b)?;
        let (out, scalar) = self.batch_matmul(n, a, b)?;
        self.set_tensor(n, 0, out, DataType::F32, scalar);
        Ok(())
    }

    /// ONNX MatMul of two run-time float operands as BATCH_MATMUL (vectors made
    /// matrices, batch dimensions broadcast): the result and whether it is rank 0.
    pub(super) fn batch_matmul(
        &mut self,
        n: &Node,
        a: TensorValue,
        b: TensorValue,
    ) -> NResult<(u32, bool)> {
        let (mut ad, mut bd) = (self.known_dims(a)?, self.known_dims(b)?);
        let (mut x, mut y) = (a.operand, b.operand);
        // Vectors become matrices (and lose that dimension again at the end).
        let (a_vec, b_vec) = (ad.len() == 1, bd.len() == 1);
        if a_vec {
            ad.insert(0, 1);
            x = self.reshape_to(n, x, &ad)?;
        }
        if b_vec {
            bd.push(1);
            y = self.reshape_to(n, y, &bd)?;
        }
        let rank = ad.len().max(bd.len());
        if rank > 4 {
            return unsupported("MatMul of rank > 4 is not supported");
        }
        // Broadcast batch dimensions explicitly: lift to the same rank, then TILE.
        let lift = |d: &[u32]| -> Vec<u32> {
            let mut v = vec![1; rank - d.len()];
            v.extend_from_slice(d);
            v
        };
        let (la, lb) = (lift(&ad), lift(&bd));
        let mut batch = Vec::new();
        for i in 0..rank - 2 {
            let (p, q) = (la[i], lb[i]);
            if p != q && p != 1 && q != 1 {
                return invalid(format!(
                    "MatMul batch dimensions {p} and {q} do not broadcast"
                ));
            }
            batch.push(p.max(q));
        }
        let tile_to = |this: &mut Self, op: u32, dims: &[u32], lifted: &[u32]| -> NResult<u32> {
            let mut v = this.reshape_to(n, op, lifted)?;
            let _ = dims;
            let multiples: Vec<i32> = (0..rank)
                .map(|i| {
                    if i < rank - 2 {
                        (batch[i] / lifted[i]) as i32
                    } else {
                        1
                    }
                })
                .collect();
            if multiples.iter().any(|&m| m != 1) {
                let m = this.i32_vector(&multiples);
                v = this.emit(n, OperationType::Tile, vec![v, m])?;
            }
            Ok(v)
        };
        let x = tile_to(self, x, &ad, &la)?;
        let y = tile_to(self, y, &bd, &lb)?;
        let f = self.bool_const(false);
        let mut out = self.emit(n, OperationType::BatchMatmul, vec![x, y, f, f])?;
        let mut out_dims = self.model.main.operands[out as usize].dimensions.clone();
        if a_vec {
            out_dims.remove(out_dims.len() - 2);
        }
        if b_vec {
            out_dims.pop();
        }
        let scalar = out_dims.is_empty();
        if a_vec || b_vec {
            out = self.reshape_to(n, out, if scalar { &[1] } else { &out_dims })?;
        }
        Ok((out, scalar))
    }
}
