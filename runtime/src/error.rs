//! The runtime's error type.
//!
//! Errors about one operation name it by [`OpRef`]: index in the main subgraph, type and
//! the source-model node it was lowered from. Kernels do not know their operation's index,
//! so they report [`RuntimeError::Kernel`] with a bare message and the executor attaches the
//! location with [`RuntimeError::locate`].

use nnc_formats::nn::{OperationType, ValidationError};

/// Which operation an error is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpRef {
    /// Index in the main subgraph's operation list, when known.
    pub index: Option<usize>,
    pub op_type: OperationType,
    /// The source-model node (`nn::Operation::source`); empty when there is none.
    pub node: String,
}

impl OpRef {
    pub fn new(index: Option<usize>, op: &nnc_formats::nn::Operation) -> OpRef {
        OpRef {
            index,
            op_type: op.op_type,
            node: op.source.clone(),
        }
    }
}

impl std::fmt::Display for OpRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.index {
            Some(i) => write!(f, "operation {i} ({}", self.op_type)?,
            None => write!(f, "operation ({}", self.op_type)?,
        }
        if !self.node.is_empty() {
            write!(f, " from node '{}'", self.node)?;
        }
        write!(f, ")")
    }
}

/// Everything that can go wrong while preparing or executing a model.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The model breaks the NN model rules.
    #[error(transparent)]
    InvalidModel(#[from] ValidationError),

    /// The runtime has no kernel for this use of an operation (operation type, operand
    /// types or parameters).
    #[error("{operation}: not supported: {reason}")]
    Unsupported { operation: OpRef, reason: String },

    /// Several operations have no kernel: every one of them, listed at once.
    #[error("{} operation(s) cannot run: {}", .0.len(), .0.iter().map(|(op, why)| format!("{op}: {why}")).collect::<Vec<_>>().join("; "))]
    UnsupportedOperations(Vec<(OpRef, String)>),

    /// A file could not be read.
    #[error("cannot read {path}: {message}")]
    Io { path: String, message: String },

    /// The compilation cache could not be used as asked (e.g. its directory).
    #[error("compilation cache: {0}")]
    Cache(String),

    /// The file's execution plan does not fit its model.
    #[error("the model's execution plan is invalid: {0}")]
    InvalidPlan(String),

    /// The model file could not be loaded: malformed, tampered, or the wrong key.
    #[error("cannot load the model: {0}")]
    Load(#[from] nnc_formats::container::ContainerError),

    /// An operation's parameters or data are invalid (found at build or run time).
    #[error("{operation}: {message}")]
    Operation { operation: OpRef, message: String },

    /// A kernel's error before the executor attached the operation to it.
    #[error("kernel error: {0}")]
    Kernel(String),

    /// A model input does not match what the model declares.
    #[error("input {input}: {message}")]
    Input { input: usize, message: String },

    /// A model output could not be delivered.
    #[error("output {output}: {message}")]
    Output { output: usize, message: String },

    /// The caller's buffer for an output is too small; nothing was written to any output.
    #[error("output {output}: buffer of {provided} bytes is too small, {needed} bytes are needed")]
    OutputTooSmall {
        output: usize,
        needed: usize,
        provided: usize,
    },

    /// The wrong number of inputs or outputs was passed.
    #[error("expected {expected} {what}, got {actual}")]
    Count {
        what: &'static str,
        expected: usize,
        actual: usize,
    },

    /// A weight provider could not deliver an operation's prepared weights.
    #[error("{operation}: weights unavailable: {message}")]
    Weights { operation: OpRef, message: String },

    /// The model asks for more memory than a resource limit allows.
    #[error(transparent)]
    Limit(#[from] nnc_formats::limits::LimitError),

    /// A buffer could not be allocated.
    #[error("cannot allocate {bytes} bytes")]
    OutOfMemory { bytes: usize },

    /// A thread pool could not be created.
    #[error("cannot create a thread pool: {0}")]
    ThreadPool(String),

    /// An internal invariant does not hold: a bug in nnc.
    #[error("internal error: {0}")]
    Internal(String),

    /// The loop timeout asked for an execution is above the maximum.
    #[error(
        "a loop timeout of {} ms is above the maximum of {} ms",
        requested.as_millis(),
        max.as_millis()
    )]
    LoopTimeoutTooLong {
        requested: std::time::Duration,
        max: std::time::Duration,
    },

    /// A WHILE loop was still running when the execution's loop timeout expired (NNAPI's
    /// MISSED_DEADLINE); the execution produced no outputs.
    #[error(
        "{operation}: missed the deadline: loops ran longer than the loop timeout of {} ms",
        timeout.as_millis()
    )]
    LoopTimeout {
        operation: OpRef,
        timeout: std::time::Duration,
    },

    /// A preparation or execution did not finish by the deadline its caller gave; it
    /// produced nothing, and the prepared model stays usable.
    #[error("the {stage} missed its deadline ({kind}): {detail}")]
    MissedDeadline {
        kind: DeadlineKind,
        stage: DeadlineStage,
        detail: String,
    },

    /// The execution queue is full (see `Scheduler::MAX_QUEUED`).
    #[error("the execution queue is full ({queued} executions waiting); try again later")]
    QueueFull { queued: usize },

    /// A memory object cannot be used as asked (released, resized, out of range, ...).
    #[error("memory {memory}: {message}")]
    Memory { memory: u64, message: String },

    /// A memory descriptor is invalid.
    #[error("invalid memory descriptor: {0}")]
    MemoryDesc(String),

    /// An execution's binding of an input or output is invalid (wrong index, a memory
    /// used in a role it was not declared for, overlapping regions, ...).
    #[error("{kind} {index}: {message}")]
    Binding {
        kind: crate::execution::IoKind,
        index: usize,
        message: String,
    },

    /// An execution object is used in a way its state does not allow (computed again
    /// while running, inputs missing, a burst of another model).
    #[error("execution: {0}")]
    ExecutionState(String),

    /// An error inside a referenced subgraph that an IF or WHILE runs.
    #[error("{operation}: in subgraph {subgraph}: {source}")]
    InSubgraph {
        operation: OpRef,
        subgraph: usize,
        #[source]
        source: Box<RuntimeError>,
    },
}

impl RuntimeError {
    /// A kernel-level error message (located later by the executor).
    pub fn kernel(message: impl Into<String>) -> RuntimeError {
        RuntimeError::Kernel(message.into())
    }

    /// Attaches an operation to errors that are about one: a bare kernel message becomes
    /// [`RuntimeError::Operation`], and an unknown operation index is filled in.
    pub fn locate(self, index: usize, op: &nnc_formats::nn::Operation) -> RuntimeError {
        self.locate_opt(Some(index), op)
    }

    /// [`RuntimeError::locate`] when the index may be unknown (a single operation
    /// evaluated on its own).
    pub fn locate_opt(self, index: Option<usize>, op: &nnc_formats::nn::Operation) -> RuntimeError {
        let fill = |operation: &mut OpRef| {
            if operation.index.is_none() {
                operation.index = index;
            }
        };
        match self {
            RuntimeError::Kernel(message) => RuntimeError::Operation {
                operation: OpRef::new(index, op),
                message,
            },
            RuntimeError::Unsupported {
                mut operation,
                reason,
            } => {
                fill(&mut operation);
                RuntimeError::Unsupported { operation, reason }
            }
            RuntimeError::Operation {
                mut operation,
                message,
            } => {
                fill(&mut operation);
                RuntimeError::Operation { operation, message }
            }
            RuntimeError::Weights {
                mut operation,
                message,
            } => {
                fill(&mut operation);
                RuntimeError::Weights { operation, message }
            }
            other => other,
        }
    }
}

/// The NN API's two kinds of missed deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeadlineKind {
    /// Missed because of conditions that may pass (a busy queue, a loaded machine): the
    /// same request may meet the same deadline later.
    Transient,
    /// Missed because the deadline is shorter than this model has ever needed: retrying
    /// cannot help.
    Persistent,
}

impl std::fmt::Display for DeadlineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeadlineKind::Transient => "transient",
            DeadlineKind::Persistent => "persistent",
        })
    }
}

/// What a deadline was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeadlineStage {
    Preparation,
    Execution,
}

impl std::fmt::Display for DeadlineStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeadlineStage::Preparation => "preparation",
            DeadlineStage::Execution => "execution",
        })
    }
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
