//! The partitioner's cost model (documented in `docs/DEVICES.md`).
//!
//! One cost unit is one multiply-accumulate, or one element produced, on the CPU.
//! - An operation's work is estimated from its shapes: MACs for convolutions, fully
//!   connected layers and matrix products, window size times outputs for pools, and the
//!   larger of input and output elements for everything else. Unknown dimensions count
//!   as 1.
//! - On a device it costs work x the device's ratio for the operation's type
//!   (`exec_time`, or `power_usage` for the low-power preference).
//! - An operand that one device writes and another reads costs bytes x the writer's
//!   `transfer.cost_per_byte` (once) plus bytes x each other reader's. Model inputs start
//!   and model outputs end in host memory, which costs nothing itself.
//! - Every step costs its device's `transfer.cost_per_step`.

use nnc_formats::device::DeviceProfile;
use nnc_formats::nn::ops::{Role, Work, input_role, schema};
use nnc_formats::nn::{Model, Operand, Operation};

use super::steps::{Graph, Step};

/// Work of one operation in cost units (at least 1).
pub(crate) fn work(op: &Operation, model: &Model) -> f64 {
    let operand = |k: usize| op.inputs.get(k).and_then(|&i| model.operand(i));
    let dim = |o: Option<&Operand>, d: usize| {
        o.and_then(|o| o.dimensions.get(d))
            .map_or(1.0, |&v| f64::from(v.max(1)))
    };
    let elements =
        |o: &Operand| -> f64 { o.dimensions.iter().map(|&d| f64::from(d.max(1))).product() };
    let output = op
        .outputs
        .first()
        .and_then(|&i| model.operand(i))
        .map_or(1.0, elements);
    let role = |name: Role| {
        (0..op.inputs.len()).find(|&k| input_role(op.op_type, k, op.inputs.len()) == name)
    };
    let scalar = |name: Role| -> f64 {
        role(name)
            .and_then(|k| model.constant_bytes(op.inputs[k]))
            .filter(|b| b.len() == 4)
            .map_or(1.0, |b| {
                f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]).max(1))
            })
    };
    let estimate = match schema(op.op_type).work_kind() {
        // Filters are OHWI ([out, h, w, in / groups]).
        Some(Work::Convolution | Work::GroupedConvolution) => {
            let f = operand(1);
            output * dim(f, 1) * dim(f, 2) * dim(f, 3)
        }
        // [1, h, w, channels]: one window per output element.
        Some(Work::DepthwiseConvolution) => {
            let f = operand(1);
            output * dim(f, 1) * dim(f, 2)
        }
        Some(Work::TransposedConvolution) => {
            let f = operand(1);
            operand(0).map_or(1.0, elements) * dim(f, 0) * dim(f, 1) * dim(f, 2)
        }
        Some(Work::FullyConnected) => output * dim(operand(1), 1),
        Some(Work::BatchMatmul) => {
            let lhs = operand(0);
            let rank = lhs.map_or(0, |o| o.dimensions.len());
            output * dim(lhs, rank.saturating_sub(1))
        }
        Some(Work::Pool) => output * scalar(Role::FilterW) * scalar(Role::FilterH),
        // Elementwise, movement, reductions and the rest: the larger of the elements read
        // and written.
        None => {
            let inputs: f64 = op
                .inputs
                .iter()
                .filter_map(|&i| model.operand(i))
                .filter(|o| o.operand_type.is_tensor() && !o.lifetime.is_constant())
                .map(elements)
                .sum();
            let outputs: f64 = op
                .outputs
                .iter()
                .filter_map(|&i| model.operand(i))
                .map(elements)
                .sum();
            inputs.max(outputs)
        }
    };
    estimate.max(1.0)
}

/// A plan's cost, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Cost {
    pub compute: f64,
    pub transfer: f64,
    pub launch: f64,
}

impl Cost {
    pub fn total(&self) -> f64 {
        self.compute + self.transfer + self.launch
    }
}

/// What the cost model needs about operations and devices.
pub(crate) struct CostModel<'a> {
    pub graph: &'a Graph,
    pub devices: &'a [DeviceProfile],
    /// Per operation.
    pub work: Vec<f64>,
    /// Per operation, per device: the device's ratio for the operation's type.
    pub ratio: Vec<Vec<f64>>,
}

impl CostModel<'_> {
    /// The cost of running each operation `i` on device `assign[i]` as `steps`.
    pub fn cost(&self, assign: &[usize], steps: &[Step]) -> Cost {
        let compute = assign
            .iter()
            .enumerate()
            .map(|(i, &d)| self.work[i] * self.ratio[i][d])
            .sum();
        let per_byte = |d: Option<usize>| d.map_or(0.0, |d| self.devices[d].transfer.cost_per_byte);
        let mut transfer = 0.0;
        let mut readers: Vec<Option<usize>> = Vec::new();
        for flow in &self.graph.flows {
            // Where the value is written (None: host memory) and where it is read.
            let home = flow.producer.map(|p| assign[p]);
            readers.clear();
            for &c in &flow.consumers {
                let at = Some(assign[c]);
                if at != home && !readers.contains(&at) {
                    readers.push(at);
                }
            }
            if flow.is_model_output && home.is_some() && !readers.contains(&None) {
                readers.push(None);
            }
            if readers.is_empty() {
                continue;
            }
            transfer += flow.bytes * per_byte(home);
            for &r in &readers {
                transfer += flow.bytes * per_byte(r);
            }
        }
        let launch = steps
            .iter()
            .map(|s| self.devices[s.device].transfer.cost_per_step)
            .sum();
        Cost {
            compute,
            transfer,
            launch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnc_formats::nn::{OperandType, OperationType};

    fn operand(m: &mut Model, dims: &[u32]) -> u32 {
        m.add_operand(Operand::new(OperandType::TensorFloat32, dims.to_vec()))
    }

    #[test]
    fn work_counts_macs_windows_and_elements() {
        let mut m = Model::default();
        let x = operand(&mut m, &[1, 8, 8, 16]);
        let filter = operand(&mut m, &[32, 3, 3, 16]);
        let y = operand(&mut m, &[1, 8, 8, 32]);
        let conv = Operation {
            op_type: OperationType::Conv2d,
            inputs: vec![x, filter],
            outputs: vec![y],
            source: String::new(),
        };
        assert_eq!(work(&conv, &m), 64.0 * 32.0 * 9.0 * 16.0);
        let dw_filter = operand(&mut m, &[1, 3, 3, 16]);
        let z = operand(&mut m, &[1, 8, 8, 16]);
        let dw = Operation {
            op_type: OperationType::DepthwiseConv2d,
            inputs: vec![x, dw_filter],
            outputs: vec![z],
            source: String::new(),
        };
        assert_eq!(work(&dw, &m), 64.0 * 16.0 * 9.0);
        let v = operand(&mut m, &[1, 1280]);
        let w = operand(&mut m, &[1000, 1280]);
        let o = operand(&mut m, &[1, 1000]);
        let fc = Operation {
            op_type: OperationType::FullyConnected,
            inputs: vec![v, w],
            outputs: vec![o],
            source: String::new(),
        };
        assert_eq!(work(&fc, &m), 1000.0 * 1280.0);
        // Unknown dimensions count as 1; elementwise work is the larger side.
        let a = operand(&mut m, &[0, 10]);
        let b = operand(&mut m, &[4, 10]);
        let add = Operation {
            op_type: OperationType::Tanh,
            inputs: vec![a],
            outputs: vec![b],
            source: String::new(),
        };
        assert_eq!(work(&add, &m), 40.0);
        // Malformed operands never panic.
        let broken = Operation {
            op_type: OperationType::Conv2d,
            inputs: vec![99],
            outputs: vec![],
            source: String::new(),
        };
        assert_eq!(work(&broken, &m), 1.0);
    }
}
