//! Where kernels get their prepared weights: the [`WeightProvider`] seam.
//!
//! A program asks the provider for an operation's [`PreparedWeights`] right before it runs
//! that operation, and drops the `Arc` right after; a bounded cache (the simulated NPU's
//! parameter cache) can therefore evict at any time without pulling weights out from
//! under a running execution. [`HostWeights`] is the simple provider: it prepares every
//! operation's weights from an in-memory model and keeps them.

use std::sync::{Arc, Mutex};

use nnc_formats::nn::{Lifetime, Model};
use zeroize::Zeroizing;

use crate::error::{OpRef, Result, RuntimeError};
use crate::kernels::{Kernel, PreparedWeights};

/// Supplies each operation's prepared weights.
pub trait WeightProvider: Send + Sync {
    /// The prepared weights of operation `operation` (its global number: main's
    /// operations first, then each referenced subgraph's, see
    /// `Model::operation_base`),
    /// made with `kernel.prepare_weights` from the plaintext of the operation's
    /// CONSTANT_REFERENCE inputs.
    fn weights(&self, operation: usize, kernel: &dyn Kernel) -> Result<Arc<PreparedWeights>>;

    /// Called once per operation when a program is prepared; the default prepares the
    /// weights now (so errors surface at preparation). A bounded cache may override it
    /// to do nothing.
    fn preload(&self, operation: usize, kernel: &dyn Kernel) -> Result<()> {
        self.weights(operation, kernel).map(|_| ())
    }
}

enum Slot {
    /// Plaintext weight bytes by input position, not yet prepared.
    Raw(Vec<Option<Zeroizing<Vec<u8>>>>),
    Prepared(Arc<PreparedWeights>),
}

/// Weights prepared from an in-memory model's pools, once, and kept for the provider's
/// lifetime. Raw bytes are dropped (zeroized) as soon as an operation's weights are
/// prepared.
pub struct HostWeights {
    slots: Vec<Mutex<Slot>>,
    ops: Vec<OpRef>,
}

impl HostWeights {
    /// Copies every operation's CONSTANT_REFERENCE bytes out of `model`'s pools.
    /// Every graph's operations are numbered globally (main's first, then each
    /// referenced subgraph's).
    pub fn new(model: &Model) -> Result<HostWeights> {
        let total = model.total_operation_count();
        let mut slots = Vec::with_capacity(total);
        let mut ops = Vec::with_capacity(total);
        let all = model
            .graphs()
            .flat_map(|g| g.operations.iter().map(move |op| (g, op)));
        for (index, (graph, op)) in all.enumerate() {
            let opref = OpRef::new(Some(index), op);
            let mut raw = Vec::with_capacity(op.inputs.len());
            for (position, &operand) in op.inputs.iter().enumerate() {
                let o = graph.operands.get(operand as usize);
                let is_weight = o.is_some_and(|o| o.lifetime == Lifetime::ConstantReference);
                let (true, Some(o)) = (is_weight, o) else {
                    raw.push(None);
                    continue;
                };
                let bytes = nnc_formats::nn::model::constant_bytes(o, &model.operand_values, &model.pools).ok_or_else(|| RuntimeError::Weights {
                    operation: opref.clone(),
                    message: format!("the bytes of input {position} (operand {operand}) are not in the model's pools"),
                })?;
                raw.push(Some(Zeroizing::new(bytes.to_vec())));
            }
            slots.push(Mutex::new(Slot::Raw(raw)));
            ops.push(opref);
        }
        Ok(HostWeights { slots, ops })
    }

    /// Bytes of prepared weights held.
    pub fn prepared_bytes(&self) -> usize {
        self.slots
            .iter()
            .filter_map(|s| match &*s.lock().ok()? {
                Slot::Prepared(w) => Some(w.byte_size()),
                Slot::Raw(_) => None,
            })
            .sum()
    }
}

impl WeightProvider for HostWeights {
    fn weights(&self, operation: usize, kernel: &dyn Kernel) -> Result<Arc<PreparedWeights>> {
        let slot = self.slots.get(operation).ok_or_else(|| {
            RuntimeError::Internal(format!("no weights for operation {operation}"))
        })?;
        let mut slot = slot
            .lock()
            .map_err(|_| RuntimeError::Internal("weight slot lock poisoned".into()))?;
        match &*slot {
            Slot::Prepared(w) => Ok(Arc::clone(w)),
            Slot::Raw(raw) => {
                let views: Vec<Option<&[u8]>> = raw
                    .iter()
                    .map(|b| b.as_ref().map(|b| b.as_slice()))
                    .collect();
                let prepared =
                    kernel
                        .prepare_weights(&views)
                        .map_err(|e| match self.ops.get(operation) {
                            Some(op) => RuntimeError::Weights {
                                operation: op.clone(),
                                message: e.to_string(),
                            },
                            None => e,
                        })?;
                let prepared = Arc::new(prepared);
                *slot = Slot::Prepared(Arc::clone(&prepared));
                Ok(prepared)
            }
        }
    }
}
