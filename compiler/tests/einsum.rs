//! ONNX Einsum: small models built here are lowered, run on the simulated NPU and
//! compared with a reference computed by plain loops over every index assignment.

mod common;

use std::collections::BTreeMap;

use nnc_compiler::CompileError;
use nnc_compiler::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TypeProto,
    ValueInfoProto, attribute_proto::AttributeType, type_proto,
};
use nnc_formats::nn::{Model, dump, validate};
use nnc_formats::tensor::{DataType, HostTensor};

/// A float tensor value; a negative dimension is left dynamic.
fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    common::float_value_info(name, Some(dims))
}

/// One Einsum node over inputs of the given shapes.
fn einsum_model(equation: &str, shapes: &[Vec<i64>]) -> ModelProto {
    // The output's shape is left to the lowering.
    let mut output = value_info("y", &[]);
    if let Some(TypeProto {
        value: Some(type_proto::Value::TensorType(t)),
        ..
    }) = output.r#type.as_mut()
    {
        t.shape = None;
    }
    let names: Vec<String> = (0..shapes.len()).map(|i| format!("x{i}")).collect();
    let node = NodeProto {
        op_type: "Einsum".into(),
        name: "einsum".into(),
        input: names.clone(),
        output: vec!["y".into()],
        attribute: vec![AttributeProto {
            name: "equation".into(),
            r#type: Some(AttributeType::String as i32),
            s: Some(equation.as_bytes().to_vec().into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            node: vec![node],
            name: "g".into(),
            input: names
                .iter()
                .zip(shapes)
                .map(|(n, s)| value_info(n, s))
                .collect(),
            output: vec![output],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn lower(m: &ModelProto) -> Result<Model, CompileError> {
    common::lower_onnx(m)
}

fn run(model: &Model, inputs: &[HostTensor]) -> Vec<f32> {
    let outputs = common::run_on_npu(model, inputs);
    assert_eq!(outputs.len(), 1);
    outputs[0].to_f32_vec().expect("float output")
}

/// Deterministic, distinct-ish values.
fn data(count: usize, seed: usize) -> Vec<f32> {
    (0..count)
        .map(|i| (((i * 7 + seed * 13) % 23) as f32 - 11.0) / 8.0)
        .collect()
}

/// Row-major offset of `index` in a tensor of `shape`; size-1 dimensions broadcast.
fn offset(shape: &[usize], index: &[usize]) -> usize {
    shape
        .iter()
        .zip(index)
        .fold(0, |acc, (&d, &i)| acc * d + if d == 1 { 0 } else { i })
}

/// The reference: `terms` and `output` spell every index as a letter (ellipsis
/// dimensions written out), so the sum runs over every assignment of all letters.
fn reference(terms: &[&str], output: &str, shapes: &[Vec<usize>], inputs: &[Vec<f32>]) -> Vec<f32> {
    let mut sizes: BTreeMap<u8, usize> = BTreeMap::new();
    for (term, shape) in terms.iter().zip(shapes) {
        for (c, &d) in term.bytes().zip(shape) {
            let s = sizes.entry(c).or_insert(d);
            *s = (*s).max(d);
        }
    }
    let letters: Vec<u8> = sizes.keys().copied().collect();
    let out_shape: Vec<usize> = output.bytes().map(|c| sizes[&c]).collect();
    let mut out = vec![0f32; out_shape.iter().product()];
    let mut assignment = vec![0usize; letters.len()];
    let value_of = |a: &[usize], c: u8| a[letters.iter().position(|&l| l == c).unwrap()];
    loop {
        let mut product = 1f32;
        for ((term, shape), values) in terms.iter().zip(shapes).zip(inputs) {
            let index: Vec<usize> = term.bytes().map(|c| value_of(&assignment, c)).collect();
            product *= values[offset(shape, &index)];
        }
        let index: Vec<usize> = output.bytes().map(|c| value_of(&assignment, c)).collect();
        out[offset(&out_shape, &index)] += product;
        // Next assignment (odometer).
        let mut k = letters.len();
        loop {
            if k == 0 {
                return out;
            }
            k -= 1;
            assignment[k] += 1;
            if assignment[k] < sizes[&letters[k]] {
                break;
            }
            assignment[k] = 0;
        }
    }
}

/// Lowers and runs `equation`, and compares with the reference of `spelled` (the same
/// contraction with ellipses written as capital letters: "terms->output").
fn check(equation: &str, spelled: &str, shapes: &[Vec<usize>]) -> Model {
    let (lhs, output) = spelled.split_once("->").expect("spelled form is explicit");
    let terms: Vec<&str> = lhs.split(',').collect();
    let inputs: Vec<Vec<f32>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| data(s.iter().product(), i))
        .collect();
    let expected = reference(&terms, output, shapes, &inputs);
    let proto_shapes: Vec<Vec<i64>> = shapes
        .iter()
        .map(|s| s.iter().map(|&d| d as i64).collect())
        .collect();
    let model = lower(&einsum_model(equation, &proto_shapes))
        .unwrap_or_else(|e| panic!("{equation}: lowering failed: {e}"));
    if let Err(e) = validate(&model) {
        panic!("{equation}: invalid: {e}\n{}", dump::to_text(&model));
    }
    let tensors: Vec<HostTensor> = inputs
        .iter()
        .zip(shapes)
        .map(|(v, s)| HostTensor {
            dtype: DataType::F32,
            shape: s.clone(),
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        })
        .collect();
    let got = run(&model, &tensors);
    assert_eq!(got.len(), expected.len(), "{equation}: output size");
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(
            (g - e).abs() <= 1e-5 * e.abs().max(1.0),
            "{equation}: element {i}: got {g}, expected {e}"
        );
    }
    model
}

fn count(model: &Model, op: &str) -> usize {
    model
        .operation_histogram()
        .get(op)
        .copied()
        .unwrap_or_default()
}

#[test]
fn batched_matrix_product() {
    let m = check(
        "bij,bjk->bik",
        "bij,bjk->bik",
        &[vec![3, 2, 4], vec![3, 4, 5]],
    );
    assert_eq!(count(&m, "BATCH_MATMUL"), 1);
}

#[test]
fn attention_scores() {
    let m = check(
        "bhid,bhjd->bhij",
        "bhid,bhjd->bhij",
        &[vec![2, 3, 4, 5], vec![2, 3, 6, 5]],
    );
    assert_eq!(count(&m, "BATCH_MATMUL"), 1);
}

#[test]
fn transpose_sum_and_scalar_results() {
    let m = check("ij->ji", "ij->ji", &[vec![3, 4]]);
    assert_eq!(count(&m, "BATCH_MATMUL"), 0);
    check("ij->i", "ij->i", &[vec![3, 4]]);
    check("ij->", "ij->", &[vec![3, 4]]);
    check("ij", "ij->ij", &[vec![3, 4]]);
    check("ji", "ji->ij", &[vec![3, 4]]);
}

#[test]
fn inner_and_outer_products() {
    check("i,i->", "i,i->", &[vec![5], vec![5]]);
    check("i,i", "i,i->", &[vec![5], vec![5]]);
    check("i,j->ij", "i,j->ij", &[vec![3], vec![4]]);
    check("ij,kl->ljki", "ij,kl->ljki", &[vec![2, 3], vec![4, 2]]);
}

#[test]
fn ellipsis_batches_broadcast() {
    check(
        "...ij,...jk->...ik",
        "XYij,Yjk->XYik",
        &[vec![2, 3, 4, 5], vec![3, 5, 2]],
    );
    // A size-1 ellipsis dimension broadcasts against the other operand's.
    check(
        "...ij,...jk->...ik",
        "XYij,Yjk->XYik",
        &[vec![2, 1, 4, 5], vec![3, 5, 2]],
    );
    check(
        "...ij,...jk",
        "Xij,Xjk->Xik",
        &[vec![3, 2, 4], vec![3, 4, 5]],
    );
}

#[test]
fn diagonals_and_traces() {
    check("ii->i", "ii->i", &[vec![4, 4]]);
    check("ii", "ii->", &[vec![4, 4]]);
    check("...ii ->...i", "Xii->Xi", &[vec![3, 5, 5]]);
    check("bii->bi", "bii->bi", &[vec![2, 3, 3]]);
    check("iij,jk->ik", "iij,jk->ik", &[vec![3, 3, 2], vec![2, 4]]);
}

#[test]
fn summed_indices_and_three_operands() {
    check("ijk,jl->il", "ijk,jl->il", &[vec![2, 3, 4], vec![3, 5]]);
    check(
        "ij,jk,kl->il",
        "ij,jk,kl->il",
        &[vec![2, 3], vec![3, 4], vec![4, 5]],
    );
    check(
        "ab,bc,ca->",
        "ab,bc,ca->",
        &[vec![2, 3], vec![3, 4], vec![4, 2]],
    );
    check(
        "bn,anm,bm->ba",
        "bn,anm,bm->ba",
        &[vec![2, 3], vec![4, 3, 5], vec![2, 5]],
    );
}

#[test]
fn malformed_equations_and_dynamic_shapes_are_refused() {
    for equation in ["ij,jk->ik", "i.j", "ij->k", "ij->ii", "i1", "ijk"] {
        let err = lower(&einsum_model(equation, &[vec![2, 3]]))
            .expect_err(&format!("'{equation}' must be refused"));
        let text = err.to_string();
        assert!(text.contains("Einsum"), "{equation}: {text}");
    }
    let err = lower(&einsum_model("ij,jk->ik", &[vec![2, 3], vec![4, 5]]))
        .expect_err("mismatched sizes must be refused");
    assert!(err.to_string().contains("'j'"), "{err}");
    let err = lower(&einsum_model("ij,jk->ik", &[vec![-1, 3], vec![3, 5]]))
        .expect_err("a dynamic dimension must be refused");
    let text = err.to_string();
    assert!(
        text.contains("Einsum") && text.contains("--input-shape"),
        "{text}"
    );
}
