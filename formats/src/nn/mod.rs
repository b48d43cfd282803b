//! The NN-operation-set IR: the Android NNAPI operations and operand types as nnc's
//! compiler and runtime share them.
//!
//! - [`types`]: operation and operand types with their codes and HAL versions, lifetimes.
//! - [`model`]: operands, operations, subgraphs, models, constant storage.
//! - [`ops`]: the operation table: per-operation signature checks, output shape inference
//!   and input roles.
//! - [`validate`]: the model rules, reported all at once.
//! - [`dump`]: text, JSON and Graphviz views.

pub mod dump;
pub mod model;
pub mod ops;
pub mod types;
pub mod validate;

pub use model::{
    ChannelQuant, DataLocation, IoInfo, Model, Operand, OperandIndex, Operation, Pool, Subgraph,
};
pub use types::{
    BitwiseFunction, FusedActivation, HalVersion, Lifetime, MathFunction, NNC_EXTENSION,
    OperandType, OperationType, PaddingScheme, ScatterReduction,
};
pub use validate::{ValidationError, validate};
