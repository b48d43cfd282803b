//! RNN, GRU and LSTM: one NN sequence operation per direction where it computes exactly
//! what ONNX asks, otherwise unrolled over the (compile-time) sequence length.
//!
//! **Sequence operations.** An LSTM lowers to UNIDIRECTIONAL_SEQUENCE_LSTM and an RNN to
//! UNIDIRECTIONAL_SEQUENCE_RNN, one per direction, when every direction qualifies:
//!
//! - functions: LSTM's f is Sigmoid (the NN gates are logistic) and g and h are one and
//!   the same function the NN activation operand names (Tanh, Relu or Sigmoid; the
//!   defaults qualify). RNN's f is Relu: NNAPI's RNN activation is a fused activation
//!   (NONE, RELU, RELU1, RELU6), which has no Tanh, so a default (Tanh) RNN unrolls.
//! - no `clip`: ONNX (and ONNX Runtime) clip the gates' inputs before their functions,
//!   NNAPI's cell clip bounds the cell state after the update; they differ whenever a
//!   gate input exceeds the bound, so a clipped node unrolls.
//! - no `input_forget`: ONNX couples `f = 1 - i`, NNAPI's CIFG `i = 1 - f`.
//! - W, R, B and P are constants (they are re-laid out per gate at compile time), and
//!   `sequence_lens` is absent or a constant equal to the full length for every entry.
//!
//! Mapping: ONNX's gate blocks (i, o, f, c) become the separate input, forget, cell and
//! output weight operands; each gate's bias is `Wb + Rb` summed at compile time (ONNX
//! Runtime adds the two in the step's sum: a different rounding order, well within
//! float32 tolerance); peepholes (i, o, f) become cell_to_input, cell_to_forget and
//! cell_to_output (both apply the output peephole to the new cell state); initial
//! states are sliced per direction (zeros when absent). Layout 0 runs time-major,
//! layout 1 batch-major. A reverse direction REVERSEs X along time before its operation
//! and its Y after; bidirectional is two operations and concatenations; Y_h and Y_c
//! are the operations' final-state outputs. Projection, cell and projection clips and
//! layer normalization are never used (ONNX has none of them).
//!
//! **Unrolled** (everything else, and GRU always, since the NN set has no GRU): each
//! time step is written out with FULLY_CONNECTED (input and recurrent projections,
//! weights constant or computed at run time), ADD, MUL, LOGISTIC and TANH, following
//! ONNX's equations term by term:
//!
//! - RNN: `H = f(X W^T + Wb + H R^T + Rb)`
//! - GRU (gates z, r, h): `z = f(X Wz^T + Wbz + H Rz^T + Rbz)`, likewise r;
//!   `h~ = g(X Wh^T + Wbh + (r ⊙ H) Rh^T + Rbh)` (linear_before_reset = 0) or
//!   `g(X Wh^T + Wbh + r ⊙ (H Rh^T + Rbh))` (= 1); `H = (1 - z) ⊙ h~ + z ⊙ H`
//! - LSTM (gates i, o, f, c): `i = f(X Wi^T + Wbi + H Ri^T + Rbi + Pi ⊙ C)`, likewise the
//!   forget gate (or `1 - i` with input_forget); `c~ = g(...)`, `C = f ⊙ C + i ⊙ c~`,
//!   `o = f(... + Po ⊙ C)`, `H = o ⊙ h(C)`
//!
//! with f, g, h the defaults (sigmoid, tanh, tanh; tanh for RNN) or any of the functions
//! ONNX lists (Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh,
//! HardSigmoid, Elu, Softsign, Softplus) per direction, their alpha and beta consumed in
//! order by the functions that take them (defaults as ONNX Runtime has them); `clip`
//! bounds the gates' inputs (LSTM's cell state reaches h unclipped, as in ONNX Runtime). Both
//! layouts, initial states, peepholes, and sequence_lens in every direction: an entry
//! past its length keeps its state and outputs zeros, which in a reverse direction (run
//! from the last step down) means that each entry starts at its own last step.

use nnc_formats::nn::ops::{LstmActivation, LstmTerms, SequenceLstm, SequenceRnn};
use nnc_formats::nn::{FusedActivation, OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::{Lowerer, NResult, Node, TensorValue, Value, invalid, unsupported};

/// The activation functions ONNX's recurrent operators accept.
const RECURRENT_FUNCTIONS: &[&str] = &[
    "Relu",
    "Tanh",
    "Sigmoid",
    "Affine",
    "LeakyRelu",
    "ThresholdedRelu",
    "ScaledTanh",
    "HardSigmoid",
    "Elu",
    "Softsign",
    "Softplus",
];

/// One activation function of a recurrent operator, with its parameters.
#[derive(Clone, Debug)]
struct RecurrentFn {
    name: String,
    params: super::activation::ActivationParams,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Lowerer<'_> {
    /// Row block `d` of a [D, rows, cols] tensor as a [rows, cols] operand.
    fn direction_block(
        &mut self,
        n: &Node,
        t: u32,
        d: usize,
        rows: u32,
        cols: u32,
    ) -> NResult<u32> {
        let b = self.i32_vector(&[d as i32, 0, 0]);
        let s = self.i32_vector(&[1, rows as i32, cols as i32]);
        let block = self.emit(n, OperationType::Slice, vec![t, b, s])?;
        self.reshape_to(n, block, &[rows, cols])
    }

    /// Columns `[from, from + len)` of a [rows, cols] operand.
    fn columns(&mut self, n: &Node, t: u32, rows: u32, from: u32, len: u32) -> NResult<u32> {
        let b = self.i32_vector(&[0, from as i32]);
        let s = self.i32_vector(&[rows as i32, len as i32]);
        self.emit(n, OperationType::Slice, vec![t, b, s])
    }

    /// Elements `[from, from + len)` of a 1-D operand.
    fn range_of(&mut self, n: &Node, t: u32, from: u32, len: u32) -> NResult<u32> {
        let b = self.i32_vector(&[from as i32]);
        let s = self.i32_vector(&[len as i32]);
        self.emit(n, OperationType::Slice, vec![t, b, s])
    }

    /// The `activations` attribute, with `activation_alpha` and `activation_beta`
    /// consumed in order by the functions that take them (as ONNX Runtime reads them);
    /// `None` when the attribute is absent.
    fn recurrent_functions(&self, n: &Node) -> NResult<Option<Vec<RecurrentFn>>> {
        let Some(names) = n
            .proto
            .attribute
            .iter()
            .find(|a| a.name == "activations")
            .map(|a| {
                a.strings
                    .iter()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .collect::<Vec<_>>()
            })
        else {
            return Ok(None);
        };
        if names.is_empty() {
            return invalid(format!("{} has an empty activations list", n.op()));
        }
        let alphas = n.attrs.floats("activation_alpha")?.unwrap_or_default();
        let betas = n.attrs.floats("activation_beta")?.unwrap_or_default();
        let (mut alpha, mut beta) = (alphas.into_iter(), betas.into_iter());
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let Some(&canonical) = RECURRENT_FUNCTIONS
                .iter()
                .find(|f| f.eq_ignore_ascii_case(&name))
            else {
                return unsupported(format!("{} with activation '{name}'", n.op()));
            };
            // Which parameters each function takes, and its defaults: ONNX Runtime's,
            // which are the activation operators' own for LeakyRelu, HardSigmoid and Elu
            // and zero for the rest (ThresholdedRelu's operator default would be 1).
            let (takes_alpha, takes_beta, default_alpha, default_beta) = match canonical {
                "Affine" | "ScaledTanh" => (true, true, 0.0, 0.0),
                "HardSigmoid" => (true, true, 0.2, 0.5),
                "LeakyRelu" => (true, false, 0.01, 0.0),
                "ThresholdedRelu" => (true, false, 0.0, 0.0),
                "Elu" => (true, false, 1.0, 0.0),
                _ => (false, false, 0.0, 0.0),
            };
            let params = super::activation::ActivationParams {
                alpha: takes_alpha.then(|| alpha.next().unwrap_or(default_alpha)),
                beta: takes_beta.then(|| beta.next().unwrap_or(default_beta)),
                gamma: None,
            };
            out.push(RecurrentFn {
                name: canonical.to_string(),
                params,
            });
        }
        Ok(Some(out))
    }

    /// Input `i` as a float operand, if present.
    fn float_input(&mut self, n: &Node, i: usize) -> NResult<Option<u32>> {
        if self.input(n, i)?.is_none() {
            return Ok(None);
        }
        let t = self.tensor(n, i)?;
        self.require_float(n, t)?;
        Ok(Some(t.operand))
    }

    pub(super) fn recurrent(&mut self, n: &Node) -> NResult<()> {
        let rc = self.recurrent_node(n)?;
        // One sequence operation per direction where it computes exactly what ONNX asks.
        if rc.clip.is_none()
            && !rc.input_forget
            && rc.seq_lens.is_none()
            && rc.cell != Cell::Gru
            && self.sequence_ops(
                n,
                rc.cell,
                &rc.functions,
                &rc.dirs,
                SequenceShape {
                    layout: rc.layout,
                    s: rc.s,
                    b: rc.b,
                    i_size: rc.i_size,
                    h: rc.h,
                    x: rc.x,
                },
            )?
        {
            return Ok(());
        }
        self.unrolled(n, &rc)
    }

    /// Reads a recurrent node's attributes and checks its inputs' shapes against them.
    fn recurrent_node(&mut self, n: &Node) -> NResult<RecurrentNode> {
        let cell = match n.op() {
            "RNN" => Cell::Rnn,
            "GRU" => Cell::Gru,
            _ => Cell::Lstm,
        };
        let gates: u32 = match cell {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        };
        let functions = self.recurrent_functions(n)?;
        let clip = match n.attrs.float("clip")? {
            Some(c) if c > 0.0 && c.is_finite() => Some(c),
            Some(c) => return invalid(format!("clip must be a positive number, got {c}")),
            None => None,
        };
        let input_forget = cell == Cell::Lstm && n.attrs.int_or("input_forget", 0)? != 0;
        let lbr = cell == Cell::Gru && n.attrs.int_or("linear_before_reset", 0)? != 0;
        let layout = n.attrs.int_or("layout", 0)?;
        let direction = n.attrs.string_or("direction", "forward")?;
        let dirs: Vec<bool> = match direction.as_str() {
            "forward" => vec![false],
            "reverse" => vec![true],
            "bidirectional" => vec![false, true],
            other => return invalid(format!("unknown direction '{other}'")),
        };
        let nd = dirs.len() as u32;
        let functions = direction_functions(cell, functions, dirs.len())?;
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let xd = self.known_dims(x)?;
        if xd.len() != 3 {
            return invalid(format!("{} input must be 3-D", n.op()));
        }
        let (s, b, i_size) = if layout == 0 {
            (xd[0], xd[1], xd[2])
        } else {
            (xd[1], xd[0], xd[2])
        };
        // W, R and B stay unmaterialized until the unrolled lowering needs them, so that
        // a sequence lowering (which re-lays them out per gate) leaves no unread weights.
        let value_dims = |this: &Self, i: usize| -> NResult<Option<Vec<u32>>> {
            let (dtype, dims) = match this.input(n, i)? {
                None => return Ok(None),
                Some(Value::Const(c)) => {
                    let dims = c
                        .shape
                        .iter()
                        .map(|&d| u32::try_from(d))
                        .collect::<Result<Vec<u32>, _>>()
                        .map_err(|_| {
                            super::NodeError::Invalid(format!("{} weights too large", n.op()))
                        })?;
                    (c.dtype, dims)
                }
                Some(Value::Tensor(t)) => (t.dtype, this.known_dims(t)?),
            };
            if !super::is_float(dtype) {
                return unsupported(format!("{} on {dtype} tensors is not supported", n.op()));
            }
            Ok(Some(dims))
        };
        let (Some(wd), Some(rd)) = (value_dims(self, 1)?, value_dims(self, 2)?) else {
            return invalid(format!("{} needs W and R", n.op()));
        };
        let h = match n.attrs.int("hidden_size")? {
            Some(v) if v >= 1 && v <= i64::from(i32::MAX) => v as u32,
            Some(v) => return invalid(format!("hidden_size {v}")),
            None => wd.get(1).copied().unwrap_or(0) / gates,
        };
        let gh = gates * h;
        if wd != [nd, gh, i_size] || rd != [nd, gh, h] {
            return invalid("W or R do not match hidden_size, direction and the input");
        }
        if value_dims(self, 3)?.is_some_and(|d| d != [nd, 2 * gh]) {
            return invalid("B must have shape [num_directions, 2 * gates * hidden_size]");
        }
        // sequence_lens: ignored when a constant equal to the full length everywhere.
        let seq_lens = match self.input(n, 4)? {
            None => None,
            Some(Value::Const(c)) => {
                let v = super::super::constant::to_i64s(&c);
                if v.iter().all(|&l| l == i64::from(s)) {
                    None
                } else {
                    Some(self.tensor(n, 4)?)
                }
            }
            Some(Value::Tensor(t)) => Some(t),
        };
        Ok(RecurrentNode {
            cell,
            functions,
            clip,
            input_forget,
            lbr,
            layout,
            dirs,
            x: x.operand,
            s,
            b,
            i_size,
            h,
            gh,
            seq_lens,
        })
    }

    /// Activation `f` of a recurrent cell, its input first bounded to `[-clip, clip]`
    /// when `clip` is given.
    fn recurrent_activation(
        &mut self,
        n: &Node,
        f: &RecurrentFn,
        clip: Option<f32>,
        x: u32,
    ) -> NResult<u32> {
        let x = match clip {
            Some(c) => {
                let lo = self.scalar_tensor(OperandType::TensorFloat32, -f64::from(c));
                let hi = self.scalar_tensor(OperandType::TensorFloat32, f64::from(c));
                let x = self.emit(n, OperationType::Maximum, vec![x, lo])?;
                self.emit(n, OperationType::Minimum, vec![x, hi])?
            }
            None => x,
        };
        let tv = TensorValue {
            operand: x,
            dtype: DataType::F32,
            scalar: false,
        };
        Ok(self.activation_fn(n, &f.name, tv, f.params)?.operand)
    }

    /// The unrolled lowering: every time step of every direction written out.
    fn unrolled(&mut self, n: &Node, rc: &RecurrentNode) -> NResult<()> {
        let (s, b, h) = (rc.s, rc.b, rc.h);
        let w = self.tensor(n, 1)?;
        let r = self.tensor(n, 2)?;
        let bias = self.float_input(n, 3)?;
        // Reverse directions need nothing special: stepping from the last time step down
        // with the state held wherever t >= length, entry b starts at its own last step.
        let seq_lens = match rc.seq_lens {
            Some(t) => {
                if self.operand_type(t) != OperandType::TensorInt32 || self.dims(t) != [b] {
                    return invalid("sequence_lens must be an int tensor of shape [batch]");
                }
                Some(self.reshape_to(n, t.operand, &[b, 1])?)
            }
            None => None,
        };
        let init_h = self.float_input(n, 5)?;
        let init_c = if rc.cell == Cell::Lstm {
            self.float_input(n, 6)?
        } else {
            None
        };
        let peep = if rc.cell == Cell::Lstm {
            self.float_input(n, 7)?
        } else {
            None
        };
        // X as [S, B, I], then as S*B rows for one input projection per direction.
        let xs = if rc.layout == 0 {
            rc.x
        } else {
            self.transpose_op(n, rc.x, &[1, 0, 2])?
        };
        let rows = self.reshape_to(n, xs, &[s * b, rc.i_size])?;
        let inputs = UnrolledInputs {
            rows,
            w: w.operand,
            r: r.operand,
            bias,
            init_h,
            init_c,
            peep,
        };
        let mut ys: Vec<Vec<u32>> = vec![Vec::new(); s as usize]; // [t][d] -> [B, H]
        let mut last_h = Vec::new();
        let mut last_c = Vec::new();
        for d in 0..rc.dirs.len() {
            let dir = self.unrolled_direction(n, rc, &inputs, d)?;
            let (hs, cs) = self.unrolled_steps(n, rc, d, seq_lens, dir, &mut ys)?;
            last_h.push(hs);
            if let Some(c) = cs {
                last_c.push(c);
            }
        }
        // Y: [S, D, B, H] (layout 0) or [B, S, D, H] (layout 1).
        if self.output_used(n, 0) {
            let mut per_t = Vec::with_capacity(s as usize);
            for row in &ys {
                let mut parts = Vec::with_capacity(row.len());
                for &y in row {
                    parts.push(self.reshape_to(n, y, &[1, 1, b, h])?);
                }
                per_t.push(self.concat_ops(n, parts, 1)?);
            }
            let mut y = self.concat_ops(n, per_t, 0)?;
            if rc.layout != 0 {
                y = self.transpose_op(n, y, &[2, 0, 1, 3])?;
            }
            self.set_tensor(n, 0, y, DataType::F32, false);
        }
        for (k, states) in [(1, last_h), (2, last_c)] {
            if !self.output_used(n, k) || states.is_empty() {
                continue;
            }
            let mut parts = Vec::with_capacity(states.len());
            for st in states {
                parts.push(self.reshape_to(n, st, &[1, b, h])?);
            }
            let mut y = self.concat_ops(n, parts, 0)?;
            if rc.layout != 0 {
                y = self.transpose_op(n, y, &[1, 0, 2])?;
            }
            self.set_tensor(n, k, y, DataType::F32, false);
        }
        Ok(())
    }

    /// Direction `d`'s weights as operands, its input projection for every step and its
    /// initial state.
    fn unrolled_direction(
        &mut self,
        n: &Node,
        rc: &RecurrentNode,
        inputs: &UnrolledInputs,
        d: usize,
    ) -> NResult<UnrolledDirection> {
        let (s, b, i_size, h, gh) = (rc.s, rc.b, rc.i_size, rc.h, rc.gh);
        let nd = rc.dirs.len();
        let d32 = d as u32;
        let wd_op = if nd == 1 {
            self.reshape_to(n, inputs.w, &[gh, i_size])?
        } else {
            self.direction_block(n, inputs.w, d, gh, i_size)?
        };
        let rd_op = if nd == 1 {
            self.reshape_to(n, inputs.r, &[gh, h])?
        } else {
            self.direction_block(n, inputs.r, d, gh, h)?
        };
        let (wb, rb) = match inputs.bias {
            Some(bo) => {
                let row = if nd == 1 {
                    self.reshape_to(n, bo, &[2 * gh])?
                } else {
                    let bv = self.i32_vector(&[d as i32, 0]);
                    let sv = self.i32_vector(&[1, 2 * gh as i32]);
                    let sl = self.emit(n, OperationType::Slice, vec![bo, bv, sv])?;
                    self.reshape_to(n, sl, &[2 * gh])?
                };
                (
                    self.range_of(n, row, 0, gh)?,
                    self.range_of(n, row, gh, gh)?,
                )
            }
            None => {
                let z = vec![0.0; gh as usize];
                (
                    self.model.add_f32_tensor(vec![gh], &z),
                    self.model.add_f32_tensor(vec![gh], &z),
                )
            }
        };
        let act = self.i32_const(0);
        let xw = self.emit(
            n,
            OperationType::FullyConnected,
            vec![inputs.rows, wd_op, wb, act],
        )?;
        let xw = self.reshape_to(n, xw, &[s, b, gh])?;
        let hs = self.direction_state(n, inputs.init_h, d32, rc.layout, b, h)?;
        let cs = if rc.cell == Cell::Lstm {
            Some(self.direction_state(n, inputs.init_c, d32, rc.layout, b, h)?)
        } else {
            None
        };
        let peeps = match inputs.peep {
            Some(p) => {
                let row = if nd == 1 {
                    self.reshape_to(n, p, &[3 * h])?
                } else {
                    let bv = self.i32_vector(&[d as i32, 0]);
                    let sv = self.i32_vector(&[1, 3 * h as i32]);
                    let sl = self.emit(n, OperationType::Slice, vec![p, bv, sv])?;
                    self.reshape_to(n, sl, &[3 * h])?
                };
                Some([
                    self.range_of(n, row, 0, h)?,
                    self.range_of(n, row, h, h)?,
                    self.range_of(n, row, 2 * h, h)?,
                ])
            }
            None => None,
        };
        // GRU with linear_before_reset = 0 needs Rh and Rbh on their own.
        let rh = if rc.cell == Cell::Gru && !rc.lbr {
            let rh = self.direction_rows(n, rd_op, 2 * h, h, h)?;
            let rbh = self.range_of(n, rb, 2 * h, h)?;
            Some((rh, rbh))
        } else {
            None
        };
        Ok(UnrolledDirection {
            rd: rd_op,
            rb,
            xw,
            peeps,
            rh,
            h: hs,
            c: cs,
        })
    }

    /// The time steps of direction `d` (from the last down when it is reversed), each one's
    /// output pushed to `ys[t]`; returns the final hidden and cell states.
    fn unrolled_steps(
        &mut self,
        n: &Node,
        rc: &RecurrentNode,
        d: usize,
        seq_lens: Option<u32>,
        mut dir: UnrolledDirection,
        ys: &mut [Vec<u32>],
    ) -> NResult<(u32, Option<u32>)> {
        let (s, b, gh) = (rc.s, rc.b, rc.gh);
        let fns = &rc.functions[d];
        let steps: Vec<u32> = if rc.dirs[d] {
            (0..s).rev().collect()
        } else {
            (0..s).collect()
        };
        for t in steps {
            let bv = self.i32_vector(&[t as i32, 0, 0]);
            let sv = self.i32_vector(&[1, b as i32, gh as i32]);
            let xt = self.emit(n, OperationType::Slice, vec![dir.xw, bv, sv])?;
            let xt = self.reshape_to(n, xt, &[b, gh])?;
            let act = self.i32_const(0);
            let hr = self.emit(
                n,
                OperationType::FullyConnected,
                vec![dir.h, dir.rd, dir.rb, act],
            )?;
            let (new_h, new_c) = match rc.cell {
                Cell::Rnn => {
                    let sum = self.arith(n, OperationType::Add, xt, hr)?;
                    (self.recurrent_activation(n, &fns[0], rc.clip, sum)?, None)
                }
                Cell::Gru => (self.gru_step(n, rc, fns, &dir, xt, hr)?, None),
                Cell::Lstm => {
                    let (h, c) = self.lstm_step(n, rc, fns, &dir, xt, hr)?;
                    (h, Some(c))
                }
            };
            let (y_t, h_next, c_next) = match seq_lens {
                Some(lens) => {
                    // Entries past their length keep the state and output zeros.
                    let tc = self.scalar_tensor(OperandType::TensorInt32, f64::from(t));
                    let live = self.emit(n, OperationType::Greater, vec![lens, tc])?;
                    let h_next = self.emit(n, OperationType::Select, vec![live, new_h, dir.h])?;
                    let zero = self.scalar_tensor(OperandType::TensorFloat32, 0.0);
                    let y_t = self.emit(n, OperationType::Select, vec![live, new_h, zero])?;
                    let c_next = match (new_c, dir.c) {
                        (Some(c), Some(old)) => {
                            Some(self.emit(n, OperationType::Select, vec![live, c, old])?)
                        }
                        _ => None,
                    };
                    (y_t, h_next, c_next)
                }
                None => (new_h, new_h, new_c),
            };
            ys[t as usize].push(y_t);
            dir.h = h_next;
            dir.c = c_next;
        }
        Ok((dir.h, dir.c))
    }

    /// One GRU step: the new hidden state from `xt` (X W^T + Wb) and `hr` (H R^T + Rb).
    fn gru_step(
        &mut self,
        n: &Node,
        rc: &RecurrentNode,
        fns: &[RecurrentFn],
        dir: &UnrolledDirection,
        xt: u32,
        hr: u32,
    ) -> NResult<u32> {
        let (b, h, hs) = (rc.b, rc.h, dir.h);
        let xz = self.columns(n, xt, b, 0, h)?;
        let xr = self.columns(n, xt, b, h, h)?;
        let xh = self.columns(n, xt, b, 2 * h, h)?;
        let hz = self.columns(n, hr, b, 0, h)?;
        let hrr = self.columns(n, hr, b, h, h)?;
        let sz = self.arith(n, OperationType::Add, xz, hz)?;
        let z = self.recurrent_activation(n, &fns[0], rc.clip, sz)?;
        let sr = self.arith(n, OperationType::Add, xr, hrr)?;
        let rg = self.recurrent_activation(n, &fns[0], rc.clip, sr)?;
        let inner = if rc.lbr {
            let hh = self.columns(n, hr, b, 2 * h, h)?;
            self.arith(n, OperationType::Mul, rg, hh)?
        } else {
            let rhs = self.arith(n, OperationType::Mul, rg, hs)?;
            let Some((rh, rbh)) = dir.rh else {
                return invalid("unreachable");
            };
            let act = self.i32_const(0);
            self.emit(n, OperationType::FullyConnected, vec![rhs, rh, rbh, act])?
        };
        let pre = self.arith(n, OperationType::Add, xh, inner)?;
        let cand = self.recurrent_activation(n, &fns[1], rc.clip, pre)?;
        let one = self.scalar_tensor(OperandType::TensorFloat32, 1.0);
        let keep = self.arith(n, OperationType::Sub, one, z)?;
        let a = self.arith(n, OperationType::Mul, keep, cand)?;
        let bz = self.arith(n, OperationType::Mul, z, hs)?;
        self.arith(n, OperationType::Add, a, bz)
    }

    /// One LSTM step: the new hidden and cell states from `xt` (X W^T + Wb) and `hr`
    /// (H R^T + Rb).
    fn lstm_step(
        &mut self,
        n: &Node,
        rc: &RecurrentNode,
        fns: &[RecurrentFn],
        dir: &UnrolledDirection,
        xt: u32,
        hr: u32,
    ) -> NResult<(u32, u32)> {
        let (b, h, clip) = (rc.b, rc.h, rc.clip);
        let Some(c_prev) = dir.c else {
            return invalid("unreachable");
        };
        let g = self.arith(n, OperationType::Add, xt, hr)?;
        let gi = self.columns(n, g, b, 0, h)?;
        let go = self.columns(n, g, b, h, h)?;
        let gf = self.columns(n, g, b, 2 * h, h)?;
        let gc = self.columns(n, g, b, 3 * h, h)?;
        let with_peep = |this: &mut Self, v: u32, k: usize, c: u32| -> NResult<u32> {
            match dir.peeps {
                Some(p) => {
                    let pc = this.arith(n, OperationType::Mul, p[k], c)?;
                    this.arith(n, OperationType::Add, v, pc)
                }
                None => Ok(v),
            }
        };
        let gi = with_peep(self, gi, 0, c_prev)?;
        let ig = self.recurrent_activation(n, &fns[0], clip, gi)?;
        let fg = if rc.input_forget {
            // Coupled gates: forget what is let in.
            let one = self.scalar_tensor(OperandType::TensorFloat32, 1.0);
            self.arith(n, OperationType::Sub, one, ig)?
        } else {
            let gf = with_peep(self, gf, 2, c_prev)?;
            self.recurrent_activation(n, &fns[0], clip, gf)?
        };
        let cand = self.recurrent_activation(n, &fns[1], clip, gc)?;
        let fc = self.arith(n, OperationType::Mul, fg, c_prev)?;
        let ic = self.arith(n, OperationType::Mul, ig, cand)?;
        let c_new = self.arith(n, OperationType::Add, fc, ic)?;
        let go = with_peep(self, go, 1, c_new)?;
        let og = self.recurrent_activation(n, &fns[0], clip, go)?;
        // The cell state reaches h unclipped (as ONNX Runtime computes).
        let tc = self.recurrent_activation(n, &fns[2], None, c_new)?;
        Ok((self.arith(n, OperationType::Mul, og, tc)?, c_new))
    }

    /// Direction `d`'s initial state as a [B, H] operand: a slice of `init` ([D, B, H] in
    /// layout 0, [B, D, H] in layout 1), or zeros when ONNX omits it.
    fn direction_state(
        &mut self,
        n: &Node,
        init: Option<u32>,
        d: u32,
        layout: i64,
        b: u32,
        h: u32,
    ) -> NResult<u32> {
        match init {
            Some(t) => {
                let (begin, size) = if layout == 0 {
                    ([d as i32, 0, 0], [1, b as i32, h as i32])
                } else {
                    ([0, d as i32, 0], [b as i32, 1, h as i32])
                };
                let bv = self.i32_vector(&begin);
                let sv = self.i32_vector(&size);
                let sl = self.emit(n, OperationType::Slice, vec![t, bv, sv])?;
                self.reshape_to(n, sl, &[b, h])
            }
            None => Ok(self
                .model
                .add_f32_tensor(vec![b, h], &vec![0.0; (b * h) as usize])),
        }
    }

    /// Lowers an RNN or LSTM to one UNIDIRECTIONAL_SEQUENCE_RNN/_LSTM per direction when
    /// they compute exactly what ONNX asks (see the module documentation); returns
    /// `false`, having emitted nothing, when they do not. The caller has already ruled
    /// out clip, input_forget and partial sequence lengths.
    fn sequence_ops(
        &mut self,
        n: &Node,
        cell: Cell,
        functions: &[Vec<RecurrentFn>],
        dirs: &[bool],
        shape: SequenceShape,
    ) -> NResult<bool> {
        let SequenceShape {
            layout, s, b, h, ..
        } = shape;
        let mut codes = Vec::with_capacity(functions.len());
        for fns in functions {
            match sequence_activation(cell, fns) {
                Some(code) => codes.push(code),
                None => return Ok(false),
            }
        }
        // Weights must be constants: the NN operations take them per gate, re-laid out
        // at compile time.
        let constant = |this: &Self, i: usize| -> NResult<Option<Option<Vec<f32>>>> {
            Ok(match this.input(n, i)? {
                None => Some(None),
                Some(Value::Const(c)) => Some(Some(super::super::constant::to_f32s(&c))),
                Some(Value::Tensor(_)) => None,
            })
        };
        let (Some(Some(w)), Some(Some(r)), Some(bias)) =
            (constant(self, 1)?, constant(self, 2)?, constant(self, 3)?)
        else {
            return Ok(false);
        };
        let peep = if cell == Cell::Lstm {
            match constant(self, 7)? {
                Some(p) => p,
                None => return Ok(false),
            }
        } else {
            None
        };
        let gates: usize = if cell == Cell::Lstm { 4 } else { 1 };
        let (hu, iu) = (h as usize, shape.i_size as usize);
        let gh = gates * hu;
        let nd = dirs.len();
        if w.len() != nd * gh * iu
            || r.len() != nd * gh * hu
            || bias.as_ref().is_some_and(|v| v.len() != nd * 2 * gh)
            || peep.as_ref().is_some_and(|v| v.len() != nd * 3 * hu)
        {
            return invalid("W, R, B or P do not match hidden_size, direction and the input");
        }
        let init_h = self.float_input(n, 5)?;
        let init_c = if cell == Cell::Lstm {
            self.float_input(n, 6)?
        } else {
            None
        };
        let inputs = SequenceInputs {
            w,
            r,
            bias,
            peep,
            init_h,
            init_c,
            dirs,
            codes,
        };
        let (mut ys, mut hs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
        for d in 0..nd {
            let (y, h_last, c_last) = self.sequence_direction(n, cell, shape, &inputs, d)?;
            ys.push(y);
            hs.push(h_last);
            cs.extend(c_last);
        }
        // Y: [S, D, B, H] (layout 0) or [B, S, D, H] (layout 1).
        if self.output_used(n, 0) {
            let mut parts = Vec::with_capacity(ys.len());
            for y in ys {
                let dims = if layout == 0 {
                    [s, 1, b, h]
                } else {
                    [b, s, 1, h]
                };
                parts.push(self.reshape_to(n, y, &dims)?);
            }
            let y = self.concat_ops(n, parts, if layout == 0 { 1 } else { 2 })?;
            self.set_tensor(n, 0, y, DataType::F32, false);
        }
        // Y_h, Y_c: [D, B, H] (layout 0) or [B, D, H] (layout 1).
        for (k, states) in [(1, hs), (2, cs)] {
            if !self.output_used(n, k) || states.is_empty() {
                continue;
            }
            let mut parts = Vec::with_capacity(states.len());
            for st in states {
                let dims = if layout == 0 { [1, b, h] } else { [b, 1, h] };
                parts.push(self.reshape_to(n, st, &dims)?);
            }
            let y = self.concat_ops(n, parts, if layout == 0 { 0 } else { 1 })?;
            self.set_tensor(n, k, y, DataType::F32, false);
        }
        Ok(true)
    }

    /// Direction `d`'s sequence operation: its Y (in time order), final hidden state and
    /// (LSTM) final cell state.
    fn sequence_direction(
        &mut self,
        n: &Node,
        cell: Cell,
        shape: SequenceShape,
        inputs: &SequenceInputs,
        d: usize,
    ) -> NResult<(u32, u32, Option<u32>)> {
        let SequenceShape {
            layout,
            b,
            i_size,
            h,
            x,
            ..
        } = shape;
        let (w, r, peep) = (&inputs.w, &inputs.r, &inputs.peep);
        let gates: usize = if cell == Cell::Lstm { 4 } else { 1 };
        let (hu, iu) = (h as usize, i_size as usize);
        let gh = gates * hu;
        let time_axis: i32 = if layout == 0 { 0 } else { 1 };
        let time_major = layout == 0;
        let reverse = inputs.dirs[d];
        let d32 = d as u32;
        let xin = if reverse {
            let axis = self.i32_vector(&[time_axis]);
            self.emit(n, OperationType::Reverse, vec![x, axis])?
        } else {
            x
        };
        // Gate block `g` (ONNX order) of direction d of a [D, gates * H, cols] array.
        let block = |v: &[f32], g: usize, cols: usize| -> Vec<f32> {
            let start = (d * gh + g * hu) * cols;
            v[start..start + hu * cols].to_vec()
        };
        // The NN bias of ONNX gate g: Wb + Rb. Summing them before the step changes
        // the order in which the bias terms are rounded (ONNX Runtime adds both to
        // the gate's sum); the difference is within float32 tolerance.
        let gate_bias = |g: usize| -> Vec<f32> {
            match &inputs.bias {
                Some(bv) => {
                    let base = d * 2 * gh + g * hu;
                    (0..hu).map(|u| bv[base + u] + bv[base + gh + u]).collect()
                }
                None => vec![0.0; hu],
            }
        };
        let h0 = self.direction_state(n, inputs.init_h, d32, layout, b, h)?;
        let outs = match cell {
            Cell::Lstm => {
                let c0 = self.direction_state(n, inputs.init_c, d32, layout, b, h)?;
                let mut operands = vec![xin];
                // NN gate order (input, forget, cell, output) from ONNX's (i, o, f, c).
                const NN_FROM_ONNX: [usize; 4] = [0, 2, 3, 1];
                for g in NN_FROM_ONNX {
                    operands.push(self.model.add_f32_tensor(vec![h, i_size], &block(w, g, iu)));
                }
                for g in NN_FROM_ONNX {
                    operands.push(self.model.add_f32_tensor(vec![h, h], &block(r, g, hu)));
                }
                // Peepholes: ONNX P is (i, o, f); NN takes input, forget, output.
                for k in [0, 2, 1] {
                    operands.push(match peep {
                        Some(pv) => {
                            let start = d * 3 * hu + k * hu;
                            self.model.add_f32_tensor(vec![h], &pv[start..start + hu])
                        }
                        None => self.model.add_no_value(OperandType::TensorFloat32),
                    });
                }
                for g in NN_FROM_ONNX {
                    operands.push(self.model.add_f32_tensor(vec![h], &gate_bias(g)));
                }
                operands.push(self.model.add_no_value(OperandType::TensorFloat32));
                operands.push(self.model.add_no_value(OperandType::TensorFloat32));
                operands.push(h0);
                operands.push(c0);
                let CellActivation::Lstm(activation) = inputs.codes[d] else {
                    return invalid("an RNN activation on an LSTM");
                };
                let params = SequenceLstm {
                    activation,
                    cell_clip: 0.0,
                    projection_clip: 0.0,
                    time_major,
                    terms: LstmTerms {
                        cifg: false,
                        peephole: peep.is_some(),
                        projection: false,
                        projection_bias: false,
                        layer_norm: false,
                    },
                };
                operands.extend(params.encode(&mut self.model));
                self.emit_raw(
                    OperationType::UnidirectionalSequenceLstm,
                    operands,
                    vec![None; 3],
                    &n.label,
                )?
            }
            Cell::Rnn | Cell::Gru => {
                let CellActivation::Rnn(activation) = inputs.codes[d] else {
                    return invalid("an LSTM activation on an RNN");
                };
                let mut operands = vec![
                    xin,
                    self.model.add_f32_tensor(vec![h, i_size], &block(w, 0, iu)),
                    self.model.add_f32_tensor(vec![h, h], &block(r, 0, hu)),
                    self.model.add_f32_tensor(vec![h], &gate_bias(0)),
                    h0,
                ];
                let params = SequenceRnn {
                    activation,
                    time_major,
                };
                operands.extend(params.encode(&mut self.model));
                self.emit_raw(
                    OperationType::UnidirectionalSequenceRnn,
                    operands,
                    vec![None; 2],
                    &n.label,
                )?
            }
        };
        let (Some(&y), Some(&h_last)) = (outs.first(), outs.get(1)) else {
            return invalid("a sequence operation without its outputs");
        };
        let y = if reverse && self.output_used(n, 0) {
            let axis = self.i32_vector(&[time_axis]);
            self.emit(n, OperationType::Reverse, vec![y, axis])?
        } else {
            y
        };
        Ok((y, h_last, outs.get(2).copied()))
    }

    /// Rows `[from, from + len)` of a [rows, cols] operand.
    fn direction_rows(&mut self, n: &Node, t: u32, from: u32, len: u32, cols: u32) -> NResult<u32> {
        let b = self.i32_vector(&[from as i32, 0]);
        let s = self.i32_vector(&[len as i32, cols as i32]);
        self.emit(n, OperationType::Slice, vec![t, b, s])
    }

    /// CONCATENATION of `parts` along `axis` (one part is returned as is).
    fn concat_ops(&mut self, n: &Node, parts: Vec<u32>, axis: i32) -> NResult<u32> {
        if parts.len() == 1 {
            return Ok(parts[0]);
        }
        let mut inputs = parts;
        inputs.push(self.i32_const(axis));
        self.emit(n, OperationType::Concatenation, inputs)
    }
}

/// A recurrent node as read and checked: its attributes, per-direction functions and
/// dimensions.
struct RecurrentNode {
    cell: Cell,
    /// One set of functions per direction.
    functions: Vec<Vec<RecurrentFn>>,
    clip: Option<f32>,
    input_forget: bool,
    /// GRU's linear_before_reset.
    lbr: bool,
    layout: i64,
    /// Per direction: whether it runs in reverse.
    dirs: Vec<bool>,
    /// X as given (layout 0: [S, B, I], layout 1: [B, S, I]).
    x: u32,
    s: u32,
    b: u32,
    i_size: u32,
    h: u32,
    /// gates * hidden_size.
    gh: u32,
    /// sequence_lens, unless absent or a constant equal to the full length.
    seq_lens: Option<TensorValue>,
}

/// The operands an unrolled lowering shares between its directions.
struct UnrolledInputs {
    /// X as S*B rows of [I].
    rows: u32,
    w: u32,
    r: u32,
    bias: Option<u32>,
    init_h: Option<u32>,
    init_c: Option<u32>,
    peep: Option<u32>,
}

/// One direction of an unrolled lowering: its weights and its running state.
struct UnrolledDirection {
    /// R as [gates * H, H] and Rb.
    rd: u32,
    rb: u32,
    /// X W^T + Wb for every step, [S, B, gates * H].
    xw: u32,
    /// LSTM's peepholes (i, o, f).
    peeps: Option<[u32; 3]>,
    /// GRU's Rh and Rbh (linear_before_reset = 0).
    rh: Option<(u32, u32)>,
    /// The hidden and (LSTM) cell states.
    h: u32,
    c: Option<u32>,
}

/// The activation functions of every direction: one list per direction, or one list for
/// all, or the defaults when the node gives none.
fn direction_functions(
    cell: Cell,
    functions: Option<Vec<RecurrentFn>>,
    dirs: usize,
) -> NResult<Vec<Vec<RecurrentFn>>> {
    let defaults: &[&str] = match cell {
        Cell::Rnn => &["Tanh"],
        Cell::Gru => &["Sigmoid", "Tanh"],
        Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
    };
    Ok(match functions {
        Some(list) if list.len() == defaults.len() * dirs => list
            .chunks(defaults.len())
            .map(<[RecurrentFn]>::to_vec)
            .collect(),
        Some(list) if list.len() == defaults.len() => vec![list; dirs],
        Some(list) => {
            return invalid(format!(
                "{} activations for {} direction(s) of {} functions each",
                list.len(),
                dirs,
                defaults.len()
            ));
        }
        None => vec![
            defaults
                .iter()
                .map(|d| RecurrentFn {
                    name: (*d).to_string(),
                    params: Default::default(),
                })
                .collect();
            dirs
        ],
    })
}

/// The dimensions a sequence lowering needs, and the input X as given (layout 0:
/// [S, B, I], layout 1: [B, S, I]).
#[derive(Clone, Copy)]
struct SequenceShape {
    layout: i64,
    s: u32,
    b: u32,
    i_size: u32,
    h: u32,
    x: u32,
}

/// The constant weights and the initial states of a sequence lowering, shared by its
/// directions.
struct SequenceInputs<'a> {
    w: Vec<f32>,
    r: Vec<f32>,
    bias: Option<Vec<f32>>,
    peep: Option<Vec<f32>>,
    init_h: Option<u32>,
    init_c: Option<u32>,
    /// Per direction: whether it runs in reverse, and its NN activation.
    dirs: &'a [bool],
    codes: Vec<CellActivation>,
}

/// A direction's NN activation: the LSTM's cell function or the RNN's fused clamp.
#[derive(Clone, Copy)]
enum CellActivation {
    Lstm(LstmActivation),
    Rnn(FusedActivation),
}

/// The NN activation that makes the sequence operation compute a direction's ONNX
/// functions exactly, or `None` when none does.
///
/// LSTM: the gates' f must be Sigmoid (the NN operation's gates are the logistic
/// function), and g and h one function the NN activation operand names: Tanh (4), Relu
/// (1) or Sigmoid (6). RNN: NNAPI's operand is a fused activation (NONE, RELU, RELU1,
/// RELU6), so only Relu (1) has a code; ONNX's default Tanh does not.
fn sequence_activation(cell: Cell, fns: &[RecurrentFn]) -> Option<CellActivation> {
    let lstm = |f: &RecurrentFn| match f.name.as_str() {
        "Tanh" => Some(LstmActivation::Tanh),
        "Relu" => Some(LstmActivation::Relu),
        "Sigmoid" => Some(LstmActivation::Sigmoid),
        _ => None,
    };
    match (cell, fns) {
        (Cell::Lstm, [f, g, h]) if f.name == "Sigmoid" && g.name == h.name => {
            lstm(g).map(CellActivation::Lstm)
        }
        (Cell::Rnn, [f]) if f.name == "Relu" => Some(CellActivation::Rnn(FusedActivation::Relu)),
        _ => None,
    }
}
