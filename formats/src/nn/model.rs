//! Operands, operations, subgraphs and models: the NN IR itself.
//!
//! The shape follows NNAPI HAL 1.3: a model is a main subgraph plus referenced subgraphs
//! (IF/WHILE bodies), small constants inline in `operand_values` (CONSTANT_COPY) and
//! large ones in memory pools (CONSTANT_REFERENCE). Dimensions use NNAPI's convention:
//! `0` is an unknown dimension, and a tensor with no dimensions has unknown rank.

use serde::Serialize;

use super::types::{Lifetime, OperandType, OperationType};
use crate::tensor::DataType;

/// Constants of at most this many bytes are stored inline (CONSTANT_COPY).
pub const MAX_INLINE_CONSTANT_BYTES: usize = 128;

/// Index of an operand within its subgraph.
pub type OperandIndex = u32;

/// Where a constant's bytes live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct DataLocation {
    /// Pool index (CONSTANT_REFERENCE) or subgraph index (SUBGRAPH); unused for CONSTANT_COPY.
    pub pool_index: u32,
    pub offset: u64,
    pub length: u64,
}

/// Per-channel quantization parameters (TENSOR_QUANT8_SYMM_PER_CHANNEL).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChannelQuant {
    pub scales: Vec<f32>,
    pub channel_dim: u32,
}

/// One operand: a typed value with a lifetime.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Operand {
    #[serde(rename = "type")]
    pub operand_type: OperandType,
    /// Dimensions; `0` is unknown. Empty for scalars (and for tensors of unknown rank).
    pub dimensions: Vec<u32>,
    pub scale: f32,
    pub zero_point: i32,
    pub lifetime: Lifetime,
    pub location: DataLocation,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel_quant: Option<ChannelQuant>,
    /// The source tensor name, for messages and dumps; empty when there is none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
}

impl Operand {
    /// A temporary of the given type and dimensions.
    pub fn new(operand_type: OperandType, dimensions: Vec<u32>) -> Operand {
        Operand {
            operand_type,
            dimensions,
            scale: 0.0,
            zero_point: 0,
            lifetime: Lifetime::TemporaryVariable,
            location: DataLocation::default(),
            channel_quant: None,
            name: String::new(),
        }
    }

    pub fn with_quant(mut self, scale: f32, zero_point: i32) -> Operand {
        self.scale = scale;
        self.zero_point = zero_point;
        self
    }

    pub fn with_name(mut self, name: impl Into<String>) -> Operand {
        self.name = name.into();
        self
    }

    /// True when every dimension is known (scalars are always fully specified).
    pub fn is_fully_specified(&self) -> bool {
        self.operand_type.is_scalar()
            || (!self.dimensions.is_empty() && self.dimensions.iter().all(|&d| d != 0))
    }

    /// Number of elements, when all dimensions are known; `None` also on overflow.
    pub fn element_count(&self) -> Option<u64> {
        if self.operand_type.is_scalar() {
            return Some(1);
        }
        if !self.is_fully_specified() {
            return None;
        }
        self.dimensions
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(u64::from(d)))
    }

    /// Bytes the value occupies, when known.
    pub fn byte_size(&self) -> Option<u64> {
        let size = self.operand_type.element_size()?;
        self.element_count()?.checked_mul(size as u64)
    }

    /// Short type-and-shape description, e.g. `TF32 1x224x224x3`.
    pub fn short_description(&self) -> String {
        if self.operand_type.is_scalar() {
            self.operand_type.short_name().to_string()
        } else {
            format!(
                "{} {}",
                self.operand_type.short_name(),
                dims_to_string(&self.dimensions)
            )
        }
    }
}

/// Formats dimensions as `1x3x224x224`, with `?` for unknown ones and `[]` for no dims.
pub fn dims_to_string(dims: &[u32]) -> String {
    if dims.is_empty() {
        return "[]".to_string();
    }
    dims.iter()
        .map(|&d| {
            if d == 0 {
                "?".to_string()
            } else {
                d.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("x")
}

/// Declared dimensions are compatible with inferred ones when ranks agree (or either is
/// unknown) and every pair of known dimensions is equal.
pub fn dims_compatible(declared: &[u32], inferred: &[u32]) -> bool {
    if declared.is_empty() || inferred.is_empty() {
        return true;
    }
    declared.len() == inferred.len()
        && declared
            .iter()
            .zip(inferred)
            .all(|(&a, &b)| a == 0 || b == 0 || a == b)
}

/// One operation: a type applied to input operands, writing output operands.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Operation {
    #[serde(rename = "type")]
    pub op_type: OperationType,
    pub inputs: Vec<OperandIndex>,
    pub outputs: Vec<OperandIndex>,
    /// Name of the source-model node this operation was lowered from; empty if none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub source: String,
}

/// A graph of operations over operands.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Subgraph {
    pub operands: Vec<Operand>,
    pub operations: Vec<Operation>,
    pub inputs: Vec<OperandIndex>,
    pub outputs: Vec<OperandIndex>,
}

impl Subgraph {
    /// Adds an operand and returns its index.
    pub fn add_operand(&mut self, operand: Operand) -> OperandIndex {
        self.operands.push(operand);
        (self.operands.len() - 1) as OperandIndex
    }

    /// Adds an input operand (lifetime SUBGRAPH_INPUT, appended to the input list).
    pub fn add_input(&mut self, mut operand: Operand) -> OperandIndex {
        operand.lifetime = Lifetime::SubgraphInput;
        let i = self.add_operand(operand);
        self.inputs.push(i);
        i
    }

    /// Adds an output operand (lifetime SUBGRAPH_OUTPUT, appended to the output list);
    /// an operation must write it.
    pub fn add_output(&mut self, mut operand: Operand) -> OperandIndex {
        operand.lifetime = Lifetime::SubgraphOutput;
        let i = self.add_operand(operand);
        self.outputs.push(i);
        i
    }

    /// Appends an operation and returns its index.
    pub fn add_operation(
        &mut self,
        op_type: OperationType,
        inputs: Vec<OperandIndex>,
        outputs: Vec<OperandIndex>,
        source: impl Into<String>,
    ) -> usize {
        self.operations.push(Operation {
            op_type,
            inputs,
            outputs,
            source: source.into(),
        });
        self.operations.len() - 1
    }
}

/// The bytes of a memory pool, or only its size when the bytes are not at hand (a
/// compiled model inspected without its key).
#[derive(Clone, Debug, PartialEq)]
pub enum Pool {
    Bytes(Vec<u8>),
    Opaque { size: u64 },
}

impl Pool {
    pub fn size(&self) -> u64 {
        match self {
            Pool::Bytes(b) => b.len() as u64,
            Pool::Opaque { size } => *size,
        }
    }

    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Pool::Bytes(b) => Some(b),
            Pool::Opaque { .. } => None,
        }
    }
}

impl Serialize for Pool {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Pool", 2)?;
        st.serialize_field("size", &self.size())?;
        st.serialize_field("available", &matches!(self, Pool::Bytes(_)))?;
        st.end()
    }
}

/// What the source model declared for a model input or output: the name users address
/// it by, and the element type and dimensions they feed or receive. The NN operand may
/// differ (int64 indices compute as TENSOR_INT32; a rank-0 value as a one-element tensor);
/// the runtime converts at the boundary.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IoInfo {
    pub name: String,
    pub dtype: DataType,
    /// Source-level dimensions; `0` is a dimension known only at run time.
    pub dims: Vec<u32>,
}

/// A model in the NN operation set.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Model {
    pub main: Subgraph,
    /// Subgraphs referenced by SUBGRAPH operands (IF/WHILE).
    pub referenced: Vec<Subgraph>,
    /// Inline constant bytes (CONSTANT_COPY).
    #[serde(skip)]
    pub operand_values: Vec<u8>,
    pub pools: Vec<Pool>,
    pub relax_computation_float32_to_float16: bool,
    /// One entry per main-subgraph input, in order.
    pub input_info: Vec<IoInfo>,
    /// One entry per main-subgraph output, in order.
    pub output_info: Vec<IoInfo>,
}

impl Model {
    pub fn operand(&self, index: OperandIndex) -> Option<&Operand> {
        self.main.operands.get(index as usize)
    }

    /// Graph `t` by the numbering SUBGRAPH operands use: 0 is `main`, `t >= 1` is
    /// `referenced[t - 1]`.
    pub fn graph(&self, t: usize) -> Option<&Subgraph> {
        match t {
            0 => Some(&self.main),
            t => self.referenced.get(t - 1),
        }
    }

    /// [`Model::graph`], mutably.
    pub fn graph_mut(&mut self, t: usize) -> Option<&mut Subgraph> {
        match t {
            0 => Some(&mut self.main),
            t => self.referenced.get_mut(t - 1),
        }
    }

    /// Every graph, `main` first, in the numbering of [`Model::graph`].
    pub fn graphs(&self) -> impl Iterator<Item = &Subgraph> {
        std::iter::once(&self.main).chain(&self.referenced)
    }

    /// Adds a referenced subgraph (an IF branch, a WHILE condition or body) and returns
    /// its graph number, the value a SUBGRAPH operand holds ([`Model::add_subgraph_operand`]).
    pub fn add_subgraph(&mut self, subgraph: Subgraph) -> u32 {
        self.referenced.push(subgraph);
        self.referenced.len() as u32
    }

    /// A SUBGRAPH operand referring to graph `t` (from [`Model::add_subgraph`]), added to
    /// graph `in_graph` (0 = main); returns its index there, or `None` when `in_graph`
    /// does not exist.
    pub fn add_subgraph_operand(&mut self, in_graph: usize, t: u32) -> Option<OperandIndex> {
        let operand = Operand {
            lifetime: Lifetime::Subgraph,
            location: DataLocation {
                pool_index: 0,
                offset: u64::from(t),
                length: 0,
            },
            ..Operand::new(OperandType::Subgraph, vec![])
        };
        Some(self.graph_mut(in_graph)?.add_operand(operand))
    }

    /// [`Model::add_constant`] into graph `t` (0 = main): constants of every graph share
    /// the model's inline values and pools. `None` when graph `t` does not exist.
    pub fn add_constant_in(
        &mut self,
        t: usize,
        operand: Operand,
        bytes: &[u8],
    ) -> Option<OperandIndex> {
        self.graph(t)?;
        // Store through main, then move the operand to graph t.
        let i = self.add_constant(operand, bytes);
        if t == 0 {
            return Some(i);
        }
        let operand = self.main.operands.pop()?;
        Some(self.graph_mut(t)?.add_operand(operand))
    }

    /// Total operations over every graph (the global operation numbering: main's
    /// operations first, then each referenced subgraph's, in graph order).
    pub fn total_operation_count(&self) -> usize {
        self.graphs().map(|g| g.operations.len()).sum()
    }

    /// The global number of graph `t`'s first operation (see
    /// [`Model::total_operation_count`]).
    pub fn operation_base(&self, t: usize) -> usize {
        self.graphs().take(t).map(|g| g.operations.len()).sum()
    }

    /// The referenced subgraphs an operation of graph `t` runs, directly or through
    /// nested control flow (graph numbers, each once, ascending). The work is
    /// proportional to the graphs reached, not to all graphs of the model.
    pub fn graphs_reached(&self, t: usize, op: usize) -> Vec<usize> {
        let mut reached: Vec<usize> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut queue: Vec<usize> = match self.graph(t) {
            Some(g) => g
                .operations
                .get(op)
                .map(|op| subgraph_inputs(g, op).collect())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        while let Some(next) = queue.pop() {
            if next == 0 || next > self.referenced.len() || !seen.insert(next) {
                continue;
            }
            reached.push(next);
            if let Some(g) = self.graph(next) {
                for op in &g.operations {
                    queue.extend(subgraph_inputs(g, op));
                }
            }
        }
        reached.sort_unstable();
        reached
    }

    /// The referenced subgraphs operation `op` of graph `t` names directly (each once,
    /// ascending; `main` and numbers out of range left out, as [`Model::graphs_reached`]
    /// leaves them out). Empty when the operation does not exist.
    pub fn operation_subgraphs(&self, t: usize, op: usize) -> Vec<usize> {
        let Some(g) = self.graph(t) else {
            return Vec::new();
        };
        let Some(op) = g.operations.get(op) else {
            return Vec::new();
        };
        referenced_once(subgraph_inputs(g, op), self.referenced.len())
    }

    /// For every graph by number (0 = main), the referenced subgraphs its operations name
    /// directly, as [`Model::operation_subgraphs`] lists them. [`Model::graphs_reached`]
    /// of an operation is everything reachable in this graph from its own subgraphs: a
    /// caller asking that of many operations walks these edges instead of every
    /// operation of every graph again.
    pub fn subgraph_children(&self) -> Vec<Vec<usize>> {
        let count = self.referenced.len();
        self.graphs()
            .map(|g| {
                let named = g.operations.iter().flat_map(|op| subgraph_inputs(g, op));
                referenced_once(named, count)
            })
            .collect()
    }

    /// For every operation by global number (see [`Model::total_operation_count`]), the
    /// operation of `main` that runs it: itself for main's operations; for a referenced
    /// subgraph's, the first IF or WHILE of `main` that reaches its graph; `None` for a
    /// subgraph nothing in `main` reaches.
    pub fn main_operation_of(&self) -> Vec<Option<usize>> {
        // One walk for all of main's IFs and WHILEs: a graph already claimed by an
        // earlier one has all it reaches claimed too, so each graph is expanded once.
        let mut root: Vec<Option<usize>> = vec![None; self.referenced.len() + 1];
        let mut queue: Vec<usize> = Vec::new();
        for (i, op) in self.main.operations.iter().enumerate() {
            if !op.op_type.is_control_flow() {
                continue;
            }
            queue.extend(subgraph_inputs(&self.main, op));
            while let Some(t) = queue.pop() {
                match root.get_mut(t) {
                    Some(slot @ None) if t != 0 => *slot = Some(i),
                    _ => continue,
                }
                if let Some(g) = self.graph(t) {
                    for op in &g.operations {
                        queue.extend(subgraph_inputs(g, op));
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(self.total_operation_count());
        out.extend((0..self.main.operations.len()).map(Some));
        for (k, g) in self.referenced.iter().enumerate() {
            out.extend(std::iter::repeat_n(root[k + 1], g.operations.len()));
        }
        out
    }

    /// Adds an operand to the main subgraph and returns its index.
    pub fn add_operand(&mut self, operand: Operand) -> OperandIndex {
        self.main.operands.push(operand);
        (self.main.operands.len() - 1) as OperandIndex
    }

    /// Adds a constant operand holding `bytes`: inline when small (CONSTANT_COPY), in a
    /// pool of its own otherwise (CONSTANT_REFERENCE). The caller guarantees that `bytes`
    /// matches the type and dimensions; the validator checks it.
    pub fn add_constant(&mut self, operand: Operand, bytes: &[u8]) -> OperandIndex {
        if bytes.len() <= MAX_INLINE_CONSTANT_BYTES {
            self.add_inline_constant(operand, bytes)
        } else {
            self.add_pooled_constant(operand, bytes.to_vec())
        }
    }

    /// [`Model::add_constant`] taking the bytes by value: a large constant becomes its
    /// pool without being copied.
    pub fn add_constant_owned(&mut self, operand: Operand, bytes: Vec<u8>) -> OperandIndex {
        if bytes.len() <= MAX_INLINE_CONSTANT_BYTES {
            self.add_inline_constant(operand, &bytes)
        } else {
            self.add_pooled_constant(operand, bytes)
        }
    }

    fn add_inline_constant(&mut self, mut operand: Operand, bytes: &[u8]) -> OperandIndex {
        // Keep inline values 4-byte aligned so they can be read as words.
        while !self.operand_values.len().is_multiple_of(4) {
            self.operand_values.push(0);
        }
        operand.lifetime = Lifetime::ConstantCopy;
        operand.location = DataLocation {
            pool_index: 0,
            offset: self.operand_values.len() as u64,
            length: bytes.len() as u64,
        };
        self.operand_values.extend_from_slice(bytes);
        self.add_operand(operand)
    }

    /// One pool per large constant: adding never moves the bytes already stored (one
    /// growing pool was reallocated and copied again and again as a model was built),
    /// and a constant the passes make dead is freed with its pool
    /// ([`Model::release_unreferenced_constants`]).
    fn add_pooled_constant(&mut self, mut operand: Operand, bytes: Vec<u8>) -> OperandIndex {
        operand.lifetime = Lifetime::ConstantReference;
        operand.location = DataLocation {
            pool_index: self.pools.len() as u32,
            offset: 0,
            length: bytes.len() as u64,
        };
        self.pools.push(Pool::Bytes(bytes));
        self.add_operand(operand)
    }

    /// Releases the pooled bytes no operand of any graph refers to: a pool nobody reads
    /// is dropped (the rest renumbered), a pool read only in part is re-packed with just
    /// the bytes read, and a pool read whole (the usual case: one constant per pool) is
    /// left where it is, uncopied. A model holding opaque pools (read from a compiled file
    /// without its key) is left as it is.
    pub fn release_unreferenced_constants(&mut self) {
        if self.pools.iter().any(|p| matches!(p, Pool::Opaque { .. })) {
            return;
        }
        // Per pool, the byte ranges read, merged into disjoint intervals.
        let mut read: Vec<Vec<(u64, u64)>> = vec![Vec::new(); self.pools.len()];
        for o in self.graphs().flat_map(|g| &g.operands) {
            if o.lifetime == Lifetime::ConstantReference
                && let Some(r) = read.get_mut(o.location.pool_index as usize)
            {
                let start = o.location.offset;
                r.push((start, start.saturating_add(o.location.length)));
            }
        }
        for r in &mut read {
            r.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(r.len());
            for &(start, end) in r.iter() {
                match merged.last_mut() {
                    Some(last) if start <= last.1 => last.1 = last.1.max(end),
                    _ => merged.push((start, end)),
                }
            }
            *r = merged;
        }
        // Re-pack what is read in part: (old interval start, new start) per interval.
        let mut moved: Vec<Vec<(u64, u64)>> = vec![Vec::new(); self.pools.len()];
        for (p, pool) in self.pools.iter_mut().enumerate() {
            let Pool::Bytes(bytes) = pool else { continue };
            let used: u64 = read[p].iter().map(|(s, e)| e - s).sum();
            // Alignment padding between constants is not worth a copy.
            let slack = 64 * read[p].len() as u64;
            if read[p].is_empty() || (bytes.len() as u64).saturating_sub(used) <= slack {
                continue;
            }
            let mut packed = Vec::with_capacity(used as usize + slack as usize);
            for &(start, end) in &read[p] {
                packed.resize(packed.len().next_multiple_of(64), 0);
                moved[p].push((start, packed.len() as u64));
                if let Some(b) = bytes.get(start as usize..end as usize) {
                    packed.extend_from_slice(b);
                }
            }
            *bytes = packed;
        }
        let mut renumbered = vec![u32::MAX; self.pools.len()];
        let mut next = 0u32;
        for (i, r) in read.iter().enumerate() {
            if !r.is_empty() {
                renumbered[i] = next;
                next += 1;
            }
        }
        let mut i = 0;
        self.pools.retain(|_| {
            i += 1;
            !read[i - 1].is_empty()
        });
        let graphs = std::iter::once(&mut self.main).chain(self.referenced.iter_mut());
        for o in graphs.flat_map(|g| g.operands.iter_mut()) {
            if o.lifetime != Lifetime::ConstantReference {
                continue;
            }
            let p = o.location.pool_index as usize;
            if let Some(&(start, to)) = moved.get(p).and_then(|m| {
                m.iter()
                    .rev()
                    .find(|(start, _)| *start <= o.location.offset)
            }) {
                o.location.offset = to + (o.location.offset - start);
            }
            if let Some(&n) = renumbered.get(p) {
                o.location.pool_index = n;
            }
        }
    }

    /// Adds a scalar INT32 constant.
    pub fn add_i32(&mut self, value: i32) -> OperandIndex {
        self.add_constant(
            Operand::new(OperandType::Int32, vec![]),
            &value.to_le_bytes(),
        )
    }

    /// Adds a scalar FLOAT32 constant.
    pub fn add_f32(&mut self, value: f32) -> OperandIndex {
        self.add_constant(
            Operand::new(OperandType::Float32, vec![]),
            &value.to_le_bytes(),
        )
    }

    /// Adds a scalar BOOL constant.
    pub fn add_bool(&mut self, value: bool) -> OperandIndex {
        self.add_constant(Operand::new(OperandType::Bool, vec![]), &[u8::from(value)])
    }

    /// Adds a 1-D TENSOR_INT32 constant.
    pub fn add_i32_vector(&mut self, values: &[i32]) -> OperandIndex {
        let operand = Operand::new(OperandType::TensorInt32, vec![values.len() as u32]);
        self.add_constant(operand, bytemuck::cast_slice(values))
    }

    /// Adds a TENSOR_FLOAT32 constant.
    pub fn add_f32_tensor(&mut self, dims: Vec<u32>, values: &[f32]) -> OperandIndex {
        self.add_constant(
            Operand::new(OperandType::TensorFloat32, dims),
            bytemuck::cast_slice(values),
        )
    }

    /// Adds an operand with no value (an omitted optional input).
    pub fn add_no_value(&mut self, operand_type: OperandType) -> OperandIndex {
        let mut operand = Operand::new(operand_type, vec![]);
        operand.lifetime = Lifetime::NoValue;
        self.add_operand(operand)
    }

    /// Appends an operation to the main subgraph and returns its index.
    pub fn add_operation(
        &mut self,
        op_type: OperationType,
        inputs: Vec<OperandIndex>,
        outputs: Vec<OperandIndex>,
        source: impl Into<String>,
    ) -> usize {
        self.main.operations.push(Operation {
            op_type,
            inputs,
            outputs,
            source: source.into(),
        });
        self.main.operations.len() - 1
    }

    /// The bytes of a constant operand of the main subgraph, when they are at hand and
    /// the location is in range.
    pub fn constant_bytes(&self, index: OperandIndex) -> Option<&[u8]> {
        let operand = self.operand(index)?;
        constant_bytes(operand, &self.operand_values, &self.pools)
    }

    /// Total bytes of constant data, inline and pooled, referenced by the operands of
    /// every graph (main and referenced subgraphs).
    pub fn constant_byte_count(&self) -> u64 {
        self.graphs()
            .flat_map(|g| &g.operands)
            .filter(|o| o.lifetime.is_constant())
            .map(|o| o.location.length)
            .sum()
    }

    /// Number of constant tensor elements (the model's parameter count), over every graph.
    pub fn parameter_count(&self) -> u64 {
        self.graphs()
            .flat_map(|g| &g.operands)
            .filter(|o| o.lifetime.is_constant() && o.operand_type.is_tensor())
            .filter_map(|o| o.element_count())
            .sum()
    }

    /// For every operand of the main subgraph, the operations that read it.
    pub fn consumers(&self) -> Vec<Vec<usize>> {
        let mut consumers = vec![Vec::new(); self.main.operands.len()];
        for (i, op) in self.main.operations.iter().enumerate() {
            for &input in &op.inputs {
                if let Some(list) = consumers.get_mut(input as usize)
                    && list.last() != Some(&i)
                {
                    list.push(i);
                }
            }
        }
        consumers
    }

    /// For every operand of the main subgraph, the operation that writes it, if any.
    pub fn producers(&self) -> Vec<Option<usize>> {
        let mut producers = vec![None; self.main.operands.len()];
        for (i, op) in self.main.operations.iter().enumerate() {
            for &output in &op.outputs {
                if let Some(slot) = producers.get_mut(output as usize) {
                    *slot = Some(i);
                }
            }
        }
        producers
    }

    /// Histogram of operation types in the main subgraph, sorted by name.
    pub fn operation_histogram(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let mut histogram = std::collections::BTreeMap::new();
        for op in &self.main.operations {
            *histogram.entry(op.op_type.name()).or_insert(0) += 1;
        }
        histogram
    }
}

/// The graphs the SUBGRAPH operands among `op`'s inputs name.
fn subgraph_inputs<'a>(g: &'a Subgraph, op: &'a Operation) -> impl Iterator<Item = usize> + 'a {
    op.inputs
        .iter()
        .filter_map(|&i| g.operands.get(i as usize))
        .filter(|o| o.lifetime == Lifetime::Subgraph)
        .filter_map(|o| usize::try_from(o.location.offset).ok())
}

/// The referenced subgraphs (1..=`count`) among `graphs`, each once, ascending.
fn referenced_once(graphs: impl Iterator<Item = usize>, count: usize) -> Vec<usize> {
    let mut out: Vec<usize> = graphs.filter(|&s| s != 0 && s <= count).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The bytes of a constant operand, resolved against inline values and pools.
pub fn constant_bytes<'a>(
    operand: &Operand,
    operand_values: &'a [u8],
    pools: &'a [Pool],
) -> Option<&'a [u8]> {
    let loc = operand.location;
    let range = |len: usize| -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(loc.offset).ok()?;
        let end = start.checked_add(usize::try_from(loc.length).ok()?)?;
        (end <= len).then_some(start..end)
    };
    match operand.lifetime {
        Lifetime::ConstantCopy => operand_values.get(range(operand_values.len())?),
        Lifetime::ConstantReference => {
            let pool = pools.get(loc.pool_index as usize)?.bytes()?;
            pool.get(range(pool.len())?)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releasing_constants_drops_repacks_or_keeps_each_pool() {
        let mut model = Model::default();
        let whole = model.add_f32_tensor(vec![40], &[1.0; 40]);
        let dead = model.add_f32_tensor(vec![50], &[2.0; 50]);
        let part = model.add_f32_tensor(vec![60], &[3.0; 60]);
        // Pool 2 also holds 1000 bytes nobody reads, in front of the constant.
        let Some(Pool::Bytes(bytes)) = model.pools.get_mut(2) else {
            panic!("a pooled constant");
        };
        bytes.splice(0..0, [9u8; 1024]);
        model.main.operands[part as usize].location.offset = 1024;
        let whole_data = model.pools[0].bytes().map(<[u8]>::as_ptr);
        // Nothing reads `dead` any more.
        model.main.operands[dead as usize].lifetime = Lifetime::TemporaryVariable;

        model.release_unreferenced_constants();
        assert_eq!(model.pools.len(), 2, "the unread pool is gone");
        assert_eq!(
            model.pools[0].bytes().map(<[u8]>::as_ptr),
            whole_data,
            "a pool read whole is not copied"
        );
        let part_operand = &model.main.operands[part as usize];
        assert_eq!(part_operand.location.pool_index, 1, "renumbered");
        assert_eq!(part_operand.location.offset, 0, "re-packed");
        assert_eq!(model.pools[1].size(), 240);
        let read = |i: OperandIndex| {
            constant_bytes(&model.main.operands[i as usize], &[], &model.pools).map(<[u8]>::to_vec)
        };
        assert_eq!(
            read(part),
            Some(bytemuck::cast_slice(&[3.0f32; 60]).to_vec())
        );
        assert_eq!(
            read(whole),
            Some(bytemuck::cast_slice(&[1.0f32; 40]).to_vec())
        );
    }

    #[test]
    fn small_constants_are_inline_and_large_ones_pooled() {
        let mut model = Model::default();
        let small = model.add_f32_tensor(vec![32], &[1.0; 32]);
        let large = model.add_f32_tensor(vec![33], &[2.0; 33]);
        assert_eq!(
            model.main.operands[small as usize].lifetime,
            Lifetime::ConstantCopy
        );
        assert_eq!(
            model.main.operands[large as usize].lifetime,
            Lifetime::ConstantReference
        );
        assert_eq!(model.constant_bytes(small).map(<[u8]>::len), Some(128));
        assert_eq!(model.constant_bytes(large).map(<[u8]>::len), Some(132));
        assert_eq!(
            &model.constant_bytes(large).unwrap()[..4],
            &2.0f32.to_le_bytes()
        );
        assert_eq!(model.parameter_count(), 65);
    }

    #[test]
    fn out_of_range_locations_resolve_to_none() {
        let mut model = Model::default();
        let c = model.add_i32(7);
        model.main.operands[c as usize].location.offset = u64::MAX - 1;
        assert_eq!(model.constant_bytes(c), None);
    }

    #[test]
    fn dims_format() {
        assert_eq!(dims_to_string(&[1, 0, 3]), "1x?x3");
        assert_eq!(dims_to_string(&[]), "[]");
    }
}
