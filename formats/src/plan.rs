//! The execution plan: how a compiled model's operations are split into steps, each run
//! by one device, and why each operation went where it did.
//!
//! It travels in the `.nnc` file's execution-plan section as canonical JSON (authenticated
//! like every other metadata byte), so that `nnc inspect --partition` can explain a
//! compiled model's placement without the compiler, and the runtime can run each step on
//! its device. The operations of a step are contiguous in the model's operation order.

use serde::{Deserialize, Serialize};

/// What the partitioner optimizes for (NNAPI's execution preference).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preference {
    FastSingleAnswer,
    SustainedSpeed,
    LowPower,
}

impl Preference {
    pub fn name(self) -> &'static str {
        match self {
            Preference::FastSingleAnswer => "fast-single-answer",
            Preference::SustainedSpeed => "sustained-speed",
            Preference::LowPower => "low-power",
        }
    }
}

/// How operations may be placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionMode {
    /// Everything on the CPU.
    CpuOnly,
    /// Best device per operation; what no device supports runs on the CPU.
    Fallback,
    /// Best device per operation; an operation no listed device supports is an error.
    Strict,
}

impl PartitionMode {
    pub fn name(self) -> &'static str {
        match self {
            PartitionMode::CpuOnly => "cpu-only",
            PartitionMode::Fallback => "fallback",
            PartitionMode::Strict => "strict",
        }
    }
}

/// A device the plan uses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanDevice {
    pub name: String,
    /// `cpu`, `gpu`, `dsp`, `npu` or `accelerator`.
    pub kind: String,
    pub version: String,
    /// Model-cache files the device needs per step (its profile declares 0..=32).
    #[serde(default = "one")]
    pub model_cache_files: u32,
    /// Data-cache files the device needs per step (0..=32).
    #[serde(default = "one")]
    pub data_cache_files: u32,
}

fn one() -> u32 {
    1
}

/// A run of consecutive operations on one device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanStep {
    /// Index into [`ExecutionPlan::devices`].
    pub device: u32,
    /// Operation indices, contiguous and increasing.
    pub operations: Vec<u32>,
    /// Operands this step reads that an earlier step produced (cross-step temporaries) or
    /// that are model inputs.
    pub inputs: Vec<u32>,
    /// Operands this step produces that a later step reads or that are model outputs.
    pub outputs: Vec<u32>,
    /// Constant operands this step reads (each step gets its own copy of a shared one).
    pub constants: Vec<u32>,
}

/// Why a device did not get an operation: the rule that declined it and the value that
/// broke it (the same definition decides and explains).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decline {
    pub device: String,
    pub rule: String,
    pub detail: String,
}

/// Where one operation runs and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    pub operation: u32,
    pub op_type: String,
    /// The source node the operation came from.
    pub source: String,
    /// Index into [`ExecutionPlan::devices`].
    pub device: u32,
    /// Why this device: e.g. "best exec_time 0.4 for TENSOR_QUANT8_ASYMM_SIGNED",
    /// "fallback: no device supports it", "transfer cost guard".
    pub reason: String,
    /// Every device that could not take the operation, with its rule.
    pub declined: Vec<Decline>,
    /// The operation's weights are encrypted but it runs on the CPU, so they are
    /// decrypted in host memory.
    pub host_decrypted: bool,
}

/// The whole plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutionPlan {
    pub version: u32,
    pub mode: PartitionMode,
    pub preference: Preference,
    pub devices: Vec<PlanDevice>,
    pub steps: Vec<PlanStep>,
    pub placements: Vec<Placement>,
}

/// Why a plan section could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("execution plan: not valid JSON of the plan schema: {0}")]
    Json(String),
    #[error("execution plan: version {0} is not supported (this nnc reads version 1)")]
    Version(u32),
    #[error("execution plan: {0}")]
    Invalid(String),
}

impl ExecutionPlan {
    pub const VERSION: u32 = 1;

    /// Canonical bytes for the file section.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes and checks a plan against a model of `operation_count` operations and
    /// `operand_count` operands: every operation in exactly one step, steps contiguous
    /// and in order, indices in range.
    pub fn from_bytes(
        bytes: &[u8],
        operation_count: usize,
        operand_count: usize,
    ) -> Result<ExecutionPlan, PlanError> {
        let plan: ExecutionPlan =
            serde_json::from_slice(bytes).map_err(|e| PlanError::Json(e.to_string()))?;
        if plan.version != Self::VERSION {
            return Err(PlanError::Version(plan.version));
        }
        plan.check(operation_count, operand_count)?;
        Ok(plan)
    }

    /// Structural checks (see [`ExecutionPlan::from_bytes`]).
    pub fn check(&self, operation_count: usize, operand_count: usize) -> Result<(), PlanError> {
        let invalid = |m: String| Err(PlanError::Invalid(m));
        let mut next = 0u32;
        for (s, step) in self.steps.iter().enumerate() {
            if step.device as usize >= self.devices.len() {
                return invalid(format!(
                    "step {s} names device {} of {}",
                    step.device,
                    self.devices.len()
                ));
            }
            let d = &self.devices[step.device as usize];
            if d.model_cache_files > 32 || d.data_cache_files > 32 {
                return invalid(format!(
                    "device {} declares more than 32 cache files",
                    d.name
                ));
            }
            if step.operations.is_empty() {
                return invalid(format!("step {s} has no operations"));
            }
            for &op in &step.operations {
                if op != next {
                    return invalid(format!(
                        "step {s}: operation {op} is out of order (expected {next})"
                    ));
                }
                next += 1;
            }
            for &o in step
                .inputs
                .iter()
                .chain(&step.outputs)
                .chain(&step.constants)
            {
                if o as usize >= operand_count {
                    return invalid(format!("step {s} names operand {o} of {operand_count}"));
                }
            }
        }
        if next as usize != operation_count {
            return invalid(format!(
                "the steps cover {next} of {operation_count} operations"
            ));
        }
        if self.placements.len() != operation_count {
            return invalid(format!(
                "{} placements for {operation_count} operations",
                self.placements.len()
            ));
        }
        for (i, p) in self.placements.iter().enumerate() {
            if p.operation as usize != i || p.device as usize >= self.devices.len() {
                return invalid(format!("placement {i} is malformed"));
            }
        }
        Ok(())
    }

    /// The step each operation belongs to.
    pub fn step_of_operations(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for (s, step) in self.steps.iter().enumerate() {
            out.extend(std::iter::repeat_n(s, step.operations.len()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> ExecutionPlan {
        let device = |name: &str, kind: &str| PlanDevice {
            name: name.into(),
            kind: kind.into(),
            version: "1".into(),
            model_cache_files: 1,
            data_cache_files: 2,
        };
        let placement = |op: u32, device: u32| Placement {
            operation: op,
            op_type: "ADD".into(),
            source: String::new(),
            device,
            reason: "test".into(),
            declined: Vec::new(),
            host_decrypted: false,
        };
        ExecutionPlan {
            version: 1,
            mode: PartitionMode::Fallback,
            preference: Preference::FastSingleAnswer,
            devices: vec![device("cpu", "cpu"), device("npu", "npu")],
            steps: vec![
                PlanStep {
                    device: 1,
                    operations: vec![0, 1],
                    inputs: vec![0],
                    outputs: vec![3],
                    constants: vec![],
                },
                PlanStep {
                    device: 0,
                    operations: vec![2],
                    inputs: vec![3],
                    outputs: vec![4],
                    constants: vec![],
                },
            ],
            placements: vec![placement(0, 1), placement(1, 1), placement(2, 0)],
        }
    }

    #[test]
    fn round_trips_and_checks() {
        let p = plan();
        let back = ExecutionPlan::from_bytes(&p.to_bytes(), 3, 5).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.step_of_operations(), vec![0, 0, 1]);
        assert!(ExecutionPlan::from_bytes(&p.to_bytes(), 4, 5).is_err());
        assert!(ExecutionPlan::from_bytes(&p.to_bytes(), 3, 2).is_err());
        assert!(ExecutionPlan::from_bytes(b"{", 3, 5).is_err());
        let mut bad = p.clone();
        bad.steps[1].operations = vec![1];
        assert!(bad.check(3, 5).is_err());
    }
}
