//! Reading a TFLite file: the verified flatbuffer root, then owned, checked descriptions
//! of the main subgraph's tensors and operators.
//!
//! Every index (tensor, buffer, operator code) and every size (shape, buffer length,
//! bytes stored after the flatbuffer) is checked here, once, so the lowering can index
//! freely. Constant bytes stay `Bytes` slices of the file (no copy) unless they need
//! rewriting (sparse tensors are densified here).

use bytes::Bytes;

use super::schema_generated::tflite as fb;
use super::sparse;
use crate::error::CompileError;

/// The schema version nnc reads (the only one TFLite itself accepts).
pub const SCHEMA_VERSION: u32 = 3;

/// Largest tensor nnc densifies from a sparse encoding (256 MiB): sparse weights of real
/// models are far smaller, and a corrupt shape must not become a huge allocation.
const MAX_CONSTANT_BYTES: u64 = 1 << 28;

/// Affine quantization parameters: `real = scale * (q - zero_point)`, per tensor (one
/// scale) or per slice along `dim` (one scale per index of that dimension).
#[derive(Clone, Debug, PartialEq)]
pub struct Quant {
    pub scales: Vec<f32>,
    pub zero_points: Vec<i64>,
    pub dim: usize,
}

impl Quant {
    /// True when one scale and zero point cover the whole tensor (per-axis parameters
    /// whose values are all equal count too: they mean the same thing).
    pub fn is_per_tensor(&self) -> bool {
        self.scales.len() == 1
            || (self.scales.windows(2).all(|w| w[0] == w[1])
                && self.zero_points.windows(2).all(|w| w[0] == w[1]))
    }

    pub fn scale(&self) -> f32 {
        self.scales.first().copied().unwrap_or(0.0)
    }

    pub fn zero_point(&self) -> i64 {
        self.zero_points.first().copied().unwrap_or(0)
    }
}

/// One tensor of the main subgraph.
#[derive(Clone, Debug)]
pub struct TensorDesc {
    pub index: usize,
    pub name: String,
    pub ty: fb::TensorType,
    /// The stored shape (TFLite stores concrete dimensions here; `shape_signature` marks
    /// dynamic ones with -1). Empty for scalars.
    pub shape: Vec<u32>,
    /// `shape_signature`, when present.
    pub signature: Option<Vec<i32>>,
    pub quant: Option<Quant>,
    /// The tensor uses the custom quantization union (nnc reads only affine parameters).
    pub custom_quantization: bool,
    /// A constant's dense little-endian bytes (sparse constants already densified).
    pub data: Option<Bytes>,
    pub is_variable: bool,
    pub sparse: bool,
}

impl TensorDesc {
    /// `tensor 5 ('name')`, for messages.
    pub fn label(&self) -> String {
        format!("tensor {} ('{}')", self.index, self.name)
    }

    pub fn element_count(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(u64::from(d)))
    }
}

/// What an operator code names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    Builtin(fb::BuiltinOperator),
    Custom(String),
}

impl OpKind {
    /// The key of the unsupported report: `CONV_2D`, `custom:MyOp`, `BUILTIN_300`.
    pub fn name(&self) -> String {
        match self {
            OpKind::Builtin(op) => builtin_name(*op),
            OpKind::Custom(code) => format!("custom:{code}"),
        }
    }
}

pub fn builtin_name(op: fb::BuiltinOperator) -> String {
    op.variant_name()
        .map(str::to_string)
        .unwrap_or_else(|| format!("BUILTIN_{}", op.0))
}

/// One operator of the main subgraph; tensor indices are checked (`None` is an omitted
/// optional tensor, -1 in the file).
pub struct OperatorDesc<'a> {
    pub index: usize,
    pub kind: OpKind,
    pub version: i32,
    pub inputs: Vec<Option<usize>>,
    pub outputs: Vec<Option<usize>>,
    pub fb: fb::Operator<'a>,
}

impl OperatorDesc<'_> {
    pub fn builtin(&self) -> Option<fb::BuiltinOperator> {
        match self.kind {
            OpKind::Builtin(op) => Some(op),
            OpKind::Custom(_) => None,
        }
    }
}

/// The parts of a TFLite model nnc lowers.
pub struct TflModel<'a> {
    pub version: u32,
    pub description: String,
    pub subgraph_count: usize,
    /// The highest operator version among the model's operator codes.
    pub max_op_version: i32,
    pub tensors: Vec<TensorDesc>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    pub operators: Vec<OperatorDesc<'a>>,
}

fn invalid(location: impl Into<String>, message: impl Into<String>) -> CompileError {
    CompileError::invalid(location, message)
}

/// Verifies the flatbuffer and reads the main subgraph. `bytes` is the whole file:
/// buffers stored after the flatbuffer are located by their file offset.
/// Densifying sparse constants counts against the `folded` limit (plus four times the
/// file's size, as for ONNX folding relative to the model's own weights).
pub fn read<'b>(
    bytes: &'b Bytes,
    limits: &nnc_formats::limits::Limits,
) -> Result<TflModel<'b>, CompileError> {
    if bytes.len() < 8 {
        return Err(invalid(
            "file",
            format!(
                "is {} bytes long, too short for a TFLite model",
                bytes.len()
            ),
        ));
    }
    if !fb::model_buffer_has_identifier(bytes) {
        return Err(invalid(
            "file",
            "does not carry the TFLite file identifier 'TFL3' at bytes 4..8 (not a TFLite model)",
        ));
    }
    // Flatbuffer offsets are 32-bit: the tables lie in the first 2 GiB, and a larger
    // file holds its extra bytes in buffers located by 64-bit offsets.
    let flatbuffer = &bytes[..bytes.len().min(i32::MAX as usize)];
    let root = fb::root_as_model(flatbuffer)
        .map_err(|e| invalid("file", format!("is not a valid TFLite flatbuffer: {e}")))?;
    let subgraphs = root
        .subgraphs()
        .ok_or_else(|| invalid("model", "has no subgraphs"))?;
    if subgraphs.is_empty() {
        return Err(invalid("model", "has no subgraphs"));
    }
    let main = subgraphs.get(0);
    let buffers: Vec<fb::Buffer> = root
        .buffers()
        .map(|b| b.iter().collect())
        .unwrap_or_default();
    let codes: Vec<fb::OperatorCode> = root
        .operator_codes()
        .map(|c| c.iter().collect())
        .unwrap_or_default();

    let fb_tensors: Vec<fb::Tensor> = main
        .tensors()
        .map(|t| t.iter().collect())
        .unwrap_or_default();
    let mut tensors = Vec::with_capacity(fb_tensors.len());
    let mut densify_budget = DensifyBudget {
        limit: limits
            .max_folded_bytes
            .saturating_add((bytes.len() as u64).saturating_mul(4)),
        used: 0,
    };
    for (index, t) in fb_tensors.iter().enumerate() {
        tensors.push(read_tensor(index, t, &buffers, bytes, &mut densify_budget)?);
    }
    let count = tensors.len();
    let tensor_list = |list: Option<flatbuffers::Vector<'_, i32>>, what: &str| {
        list.map(|v| v.iter().collect::<Vec<i32>>())
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(k, i)| {
                usize::try_from(i)
                    .ok()
                    .filter(|&i| i < count)
                    .ok_or_else(|| {
                        invalid(
                            "subgraph 0",
                            format!(
                                "{what} {k} names tensor {i}, but the subgraph has {count} tensors"
                            ),
                        )
                    })
            })
            .collect::<Result<Vec<usize>, CompileError>>()
    };
    let inputs = tensor_list(main.inputs(), "input")?;
    let outputs = tensor_list(main.outputs(), "output")?;

    let kinds: Vec<(OpKind, i32)> = codes.iter().map(|c| (op_kind(c), c.version())).collect();
    let mut operators = Vec::new();
    for (index, op) in main.operators().into_iter().flatten().enumerate() {
        let opcode = op.opcode_index() as usize;
        let (kind, version) = kinds.get(opcode).cloned().ok_or_else(|| {
            invalid(
                format!("operator {index}"),
                format!(
                    "uses operator code {opcode}, but the model has {}",
                    kinds.len()
                ),
            )
        })?;
        let location = || format!("operator {index} ({})", kind.name());
        let indices = |list: Option<flatbuffers::Vector<'_, i32>>, what: &str| {
            list.map(|v| v.iter().collect::<Vec<i32>>())
                .unwrap_or_default()
                .into_iter()
                .enumerate()
                .map(|(k, i)| match i {
                    -1 => Ok(None),
                    i if i >= 0 && (i as usize) < count => Ok(Some(i as usize)),
                    i => Err(invalid(
                        location(),
                        format!(
                            "{what} {k} names tensor {i}, but the subgraph has {count} tensors"
                        ),
                    )),
                })
                .collect::<Result<Vec<Option<usize>>, CompileError>>()
        };
        let inputs = indices(op.inputs(), "input")?;
        let outputs = indices(op.outputs(), "output")?;
        operators.push(OperatorDesc {
            index,
            kind,
            version,
            inputs,
            outputs,
            fb: op,
        });
    }
    Ok(TflModel {
        version: root.version(),
        description: root.description().unwrap_or_default().to_string(),
        subgraph_count: subgraphs.len(),
        max_op_version: kinds.iter().map(|k| k.1).max().unwrap_or(0),
        tensors,
        inputs,
        outputs,
        operators,
    })
}

/// The effective operator of an operator code: files written before codes outgrew a
/// byte carry only `deprecated_builtin_code` (and `builtin_code` reads as 0); newer
/// files carry the code in `builtin_code` and, past 127, a placeholder in the byte. The
/// larger of the two is the code in both cases.
fn op_kind(code: &fb::OperatorCode) -> OpKind {
    let op = fb::BuiltinOperator(
        code.builtin_code()
            .0
            .max(i32::from(code.deprecated_builtin_code())),
    );
    if op == fb::BuiltinOperator::CUSTOM {
        OpKind::Custom(code.custom_code().unwrap_or("<unnamed>").to_string())
    } else {
        OpKind::Builtin(op)
    }
}

/// Bytes per element of a TFLite type; `None` for types without a fixed size.
pub fn element_size(ty: fb::TensorType) -> Option<usize> {
    use fb::TensorType as T;
    Some(match ty {
        T::FLOAT32 | T::INT32 | T::UINT32 => 4,
        T::FLOAT16 | T::INT16 | T::UINT16 | T::BFLOAT16 => 2,
        T::UINT8 | T::INT8 | T::BOOL => 1,
        T::INT64 | T::UINT64 | T::FLOAT64 | T::COMPLEX64 => 8,
        T::COMPLEX128 => 16,
        _ => return None,
    })
}

pub fn type_name(ty: fb::TensorType) -> String {
    ty.variant_name()
        .map(str::to_ascii_lowercase)
        .unwrap_or_else(|| format!("type {}", ty.0))
}

/// What densifying sparse constants may still allocate.
struct DensifyBudget {
    limit: u64,
    used: u64,
}

fn read_tensor(
    index: usize,
    t: &fb::Tensor,
    buffers: &[fb::Buffer],
    file: &Bytes,
    budget: &mut DensifyBudget,
) -> Result<TensorDesc, CompileError> {
    let name = t.name().unwrap_or_default().to_string();
    let location = || format!("tensor {index} ('{name}')");
    let shape = t
        .shape()
        .map(|s| s.iter().collect::<Vec<i32>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| {
            u32::try_from(d).map_err(|_| invalid(location(), format!("has negative dimension {d}")))
        })
        .collect::<Result<Vec<u32>, CompileError>>()?;
    let elements = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(u64::from(d)))
        .ok_or_else(|| invalid(location(), "has a shape whose element count overflows"))?;
    let quantization = t.quantization();
    let custom_quantization =
        quantization.is_some_and(|q| q.details_type() != fb::QuantizationDetails::NONE);
    let quant = match quantization {
        Some(q) => read_quant(&q, &shape).map_err(|m| invalid(location(), m))?,
        None => None,
    };
    let buffer_index = t.buffer() as usize;
    let buffer = buffers.get(buffer_index).ok_or_else(|| {
        invalid(
            location(),
            format!(
                "refers to buffer {buffer_index}, but the model has {}",
                buffers.len()
            ),
        )
    })?;
    let raw = buffer_bytes(buffer, file)
        .map_err(|m| invalid(format!("buffer {buffer_index} of {}", location()), m))?;
    let sparsity = t.sparsity();
    let ty = t.type_();
    let data = match raw {
        None => None,
        Some(raw) => {
            let elem = element_size(ty);
            if let Some(sp) = sparsity {
                let elem = elem.ok_or_else(|| {
                    invalid(location(), format!("is a sparse {} tensor", type_name(ty)))
                })?;
                check_dense_size(elements, elem).map_err(|m| invalid(location(), m))?;
                let dense_bytes = elements.saturating_mul(elem as u64);
                let used = budget.used.saturating_add(dense_bytes);
                if used > budget.limit {
                    return Err(CompileError::limit(
                        location(),
                        nnc_formats::limits::LimitError {
                            kind: nnc_formats::limits::LimitKind::Folded,
                            what: "densifying the model's sparse constants".into(),
                            requested: Some(used),
                            limit: budget.limit,
                        },
                    ));
                }
                budget.used = used;
                let dense = sparse::densify(&shape, elem, &raw, &sp)
                    .map_err(|m| invalid(location(), format!("sparse encoding: {m}")))?;
                Some(Bytes::from(dense))
            } else {
                if let Some(elem) = elem {
                    let expected = elements.checked_mul(elem as u64);
                    if expected != Some(raw.len() as u64) {
                        return Err(invalid(
                            location(),
                            format!(
                                "holds {} bytes, but {} {:?} needs {}",
                                raw.len(),
                                type_name(ty),
                                shape,
                                expected.map_or("more than 2^64".to_string(), |e| e.to_string())
                            ),
                        ));
                    }
                }
                Some(raw)
            }
        }
    };
    Ok(TensorDesc {
        index,
        ty,
        shape,
        signature: t.shape_signature().map(|s| s.iter().collect()),
        quant,
        custom_quantization,
        data,
        is_variable: t.is_variable(),
        sparse: sparsity.is_some(),
        name,
    })
}

fn check_dense_size(elements: u64, elem: usize) -> Result<(), String> {
    match elements.checked_mul(elem as u64) {
        Some(n) if n <= MAX_CONSTANT_BYTES => Ok(()),
        _ => Err(format!(
            "densifies to more than {MAX_CONSTANT_BYTES} bytes ({elements} elements)"
        )),
    }
}

/// A buffer's bytes: inline in the flatbuffer, or stored after it at a file offset
/// (models over 2 GB; an offset of 0 or 1 means "no data"). `None` for no data.
fn buffer_bytes(buffer: &fb::Buffer, file: &Bytes) -> Result<Option<Bytes>, String> {
    if let Some(data) = buffer.data()
        && !data.is_empty()
    {
        return Ok(Some(file.slice_ref(data.bytes())));
    }
    let (offset, size) = (buffer.offset(), buffer.size());
    if offset <= 1 || size == 0 {
        return Ok(None);
    }
    let end = offset
        .checked_add(size)
        .ok_or_else(|| format!("offset {offset} + size {size} overflows"))?;
    if end > file.len() as u64 {
        return Err(format!(
            "lies at bytes {offset}..{end}, past the end of the {}-byte file",
            file.len()
        ));
    }
    Ok(Some(file.slice(offset as usize..end as usize)))
}

fn read_quant(q: &fb::QuantizationParameters, shape: &[u32]) -> Result<Option<Quant>, String> {
    let scales: Vec<f32> = q.scale().map(|s| s.iter().collect()).unwrap_or_default();
    if scales.is_empty() {
        return Ok(None);
    }
    let mut zero_points: Vec<i64> = q
        .zero_point()
        .map(|z| z.iter().collect())
        .unwrap_or_default();
    if zero_points.is_empty() {
        zero_points = vec![0; scales.len()];
    }
    if zero_points.len() != scales.len() {
        return Err(format!(
            "has {} quantization scales but {} zero points",
            scales.len(),
            zero_points.len()
        ));
    }
    let dim = usize::try_from(q.quantized_dimension()).map_err(|_| {
        format!(
            "has negative quantized_dimension {}",
            q.quantized_dimension()
        )
    })?;
    if scales.len() > 1 {
        match shape.get(dim) {
            None => {
                return Err(format!(
                    "is quantized along dimension {dim}, but has rank {}",
                    shape.len()
                ));
            }
            Some(&d) if d as usize != scales.len() => {
                return Err(format!(
                    "has {} per-channel scales for {d} channels along dimension {dim}",
                    scales.len()
                ));
            }
            _ => {}
        }
    }
    Ok(Some(Quant {
        scales,
        zero_points,
        dim,
    }))
}
