//! The `.nnc` container with referenced subgraphs (format 1.1): round trips, weights of
//! referenced subgraphs' operations encrypted and authenticated like main's, tampering,
//! and malformed subgraph sections refused with errors naming the problem.

use nnc_formats::container::{
    Container, ContainerError, FORMAT_MINOR_BASE, FORMAT_MINOR_SUBGRAPHS, SectionKind,
    WriteOptions, reseal, write,
};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::{Lifetime, Model, OperationType};
use nnc_formats::test_support::control_flow::{
    else_constant, if_model, nested_model, then_constant, while_model,
};

fn options(key: Option<&Key>) -> WriteOptions<'_> {
    WriteOptions {
        envelope: Default::default(),
        key,
        mode: Mode::Cbc,
        reproducible: false,
        authenticate_only: false,
        producer: "nnc test".into(),
        arena: None,
        extra_sections: Vec::new(),
    }
}

/// One graph's operations, input and output lists, and operand descriptions.
type GraphShape = (
    Vec<(OperationType, Vec<u32>, Vec<u32>, String)>,
    Vec<u32>,
    Vec<u32>,
    Vec<String>,
);

/// The graphs' structure without constant storage (which the writer re-lays out).
fn structure(m: &Model) -> Vec<GraphShape> {
    m.graphs()
        .map(|g| {
            (
                g.operations
                    .iter()
                    .map(|op| {
                        (
                            op.op_type,
                            op.inputs.clone(),
                            op.outputs.clone(),
                            op.source.clone(),
                        )
                    })
                    .collect(),
                g.inputs.clone(),
                g.outputs.clone(),
                g.operands
                    .iter()
                    .map(|o| {
                        // The writer moves tensor constants into weight fields.
                        let lifetime = if o.lifetime.is_constant() {
                            "constant".to_string()
                        } else {
                            format!("{:?}", o.lifetime)
                        };
                        let refers =
                            o.location.offset * u64::from(o.lifetime == Lifetime::Subgraph);
                        format!("{} {lifetime} {refers}", o.short_description())
                    })
                    .collect(),
            )
        })
        .collect()
}

fn section(c: &Container, kind: SectionKind) -> (usize, usize) {
    let s = c.sections.iter().find(|s| s.kind == kind as u32).unwrap();
    (s.offset as usize, (s.offset + s.length) as usize)
}

#[test]
fn referenced_subgraphs_round_trip() {
    let key = Key::generate(Algorithm::Aes128).unwrap();
    for model in [if_model(), while_model(), nested_model()] {
        let bytes = write(&model, &options(Some(&key))).unwrap();
        let (c, _) = Container::open(&bytes, Some(key.as_bytes())).unwrap();
        // 1.2 with a key (cipher-bound keys), which includes 1.1's subgraphs.
        assert!(c.header.minor >= FORMAT_MINOR_SUBGRAPHS);
        assert_eq!(c.model.referenced.len(), model.referenced.len());
        assert_eq!(structure(&c.model), structure(&model));
        assert_eq!(c.fields.len(), model.total_operation_count());
    }
}

#[test]
fn a_model_without_subgraphs_is_still_format_1_0() {
    let plain = {
        let mut p = Model::default();
        let x = p.main.add_input(nnc_formats::nn::Operand::new(
            nnc_formats::nn::OperandType::TensorFloat32,
            vec![2],
        ));
        let act = p.add_i32(0);
        let y = p.main.add_output(nnc_formats::nn::Operand::new(
            nnc_formats::nn::OperandType::TensorFloat32,
            vec![2],
        ));
        p.add_operation(OperationType::Add, vec![x, x, act], vec![y], "");
        p.input_info = if_model().input_info[1..].to_vec();
        p.input_info[0].dims = vec![2];
        p.output_info = p.input_info.clone();
        p
    };
    let bytes = write(&plain, &options(None)).unwrap();
    let c = Container::parse(&bytes).unwrap();
    assert_eq!(c.header.minor, FORMAT_MINOR_BASE);
    assert!(
        c.sections
            .iter()
            .all(|s| s.kind != SectionKind::Subgraphs as u32)
    );
}

#[test]
fn referenced_subgraphs_weights_are_encrypted_fields() {
    let key = Key::generate(Algorithm::Aes256).unwrap();
    let model = if_model();
    let bytes = write(&model, &options(Some(&key))).unwrap();
    let (c, keys) = Container::open(&bytes, Some(key.as_bytes())).unwrap();
    // Global numbering: main's IF is operation 0, the then branch's ADD operation 1,
    // the else branch's MUL operation 2.
    for (op, expected) in [(1usize, then_constant()), (2, else_constant())] {
        let field = c.decrypt_field(keys.as_ref(), op).unwrap();
        let expected: &[u8] = bytemuck::cast_slice(&expected);
        assert_eq!(&field[..expected.len()], expected);
        // Nothing of the constant appears in plaintext in the file.
        assert!(!bytes.windows(32).any(|w| w == &expected[32..64]));
        let g = &c.model.referenced[op - 1];
        let weight = g.operations[0].inputs[1] as usize;
        assert_eq!(g.operands[weight].lifetime, Lifetime::ConstantReference);
        assert_eq!(g.operands[weight].location.pool_index as usize, op);
    }
}

#[test]
fn a_flipped_bit_in_a_referenced_subgraph_is_refused() {
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let bytes = write(&if_model(), &options(Some(&key))).unwrap();
    let c = Container::parse(&bytes).unwrap();
    let (start, end) = section(&c, SectionKind::Subgraphs);
    let field = c.fields[2].unwrap();
    for at in [start, (start + end) / 2, end - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 1;
        let err = Container::open(&bad, Some(key.as_bytes())).unwrap_err();
        assert!(err.is_integrity(), "byte {at}: {err}");
    }
    // A referenced subgraph's weight field.
    let mut bad = bytes.clone();
    bad[field.offset as usize + 3] ^= 0x10;
    let err = Container::open(&bad, Some(key.as_bytes())).unwrap_err();
    assert!(err.is_integrity(), "{err}");
}

/// Rewrites `bytes` at `at` and reseals the file so that it authenticates: what the
/// parser then says about it.
fn resealed_error(bytes: &[u8], at: usize, new: &[u8]) -> ContainerError {
    let mut bad = bytes.to_vec();
    bad[at..at + new.len()].copy_from_slice(new);
    reseal(&mut bad, None).unwrap();
    Container::open(&bad, None).unwrap_err()
}

#[test]
fn malformed_subgraph_sections_are_refused_with_their_reason() {
    let bytes = write(&if_model(), &options(None)).unwrap();
    let c = Container::parse(&bytes).unwrap();
    let (start, _) = section(&c, SectionKind::Subgraphs);
    // A count no section could hold: refused before anything is allocated.
    let err = resealed_error(&bytes, start, &u32::MAX.to_le_bytes());
    assert!(err.to_string().contains("subgraph_count"), "{err}");
    // Zero subgraphs in a subgraphs section.
    let err = resealed_error(&bytes, start, &0u32.to_le_bytes());
    assert!(err.to_string().contains("subgraph_count"), "{err}");
    // One subgraph fewer than the IF refers to: the rest is trailing data.
    let err = resealed_error(&bytes, start, &1u32.to_le_bytes());
    assert!(!err.to_string().is_empty());
    // The first subgraph's operand count beyond its data.
    let err = resealed_error(&bytes, start + 4, &u32::MAX.to_le_bytes());
    assert!(err.to_string().contains("subgraph.operand_count"), "{err}");
    // A format 1.0 header with a subgraphs section.
    let err = resealed_error(&bytes, 10, &0u16.to_le_bytes());
    assert!(err.to_string().contains("needs format 1.1"), "{err}");
}

#[test]
fn subgraph_references_are_validated_after_reading() {
    // An IF naming a subgraph that does not exist, written by a careless writer: the
    // reader's validation names the operand and the missing subgraph.
    let mut m = if_model();
    let then_operand = m.main.operations[0].inputs[1] as usize;
    m.main.operands[then_operand].location.offset = 7;
    let bytes = write(&m, &options(None)).unwrap();
    let err = Container::open(&bytes, None).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("operand 2: refers to subgraph 7 which does not exist"),
        "{text}"
    );
    // A subgraph referring to itself (the body, graph 2, naming graph 2).
    let mut m = while_model();
    let body_in = m.referenced[1].add_operand(nnc_formats::nn::Operand {
        lifetime: Lifetime::Subgraph,
        location: nnc_formats::nn::DataLocation {
            pool_index: 0,
            offset: 2,
            length: 0,
        },
        ..nnc_formats::nn::Operand::new(nnc_formats::nn::OperandType::Subgraph, vec![])
    });
    let _ = body_in;
    let bytes = write(&m, &options(None)).unwrap();
    let err = Container::open(&bytes, None).unwrap_err();
    assert!(err.to_string().contains("may not refer to itself"), "{err}");
}

#[test]
fn every_byte_of_the_subgraphs_section_altered_and_resealed_is_handled() {
    let bytes = write(&nested_model(), &options(None)).unwrap();
    let c = Container::parse(&bytes).unwrap();
    let (start, end) = section(&c, SectionKind::Subgraphs);
    let mut refused = 0;
    for at in start..end {
        for value in [0u8, 0xff, bytes[at].wrapping_add(1)] {
            if value == bytes[at] {
                continue;
            }
            let mut bad = bytes.clone();
            bad[at] = value;
            if reseal(&mut bad, None).is_err() {
                continue;
            }
            // Never a panic: a model (valid after all) or an error.
            if let Err(e) = Container::open(&bad, None) {
                assert!(!e.to_string().is_empty());
                refused += 1;
            }
        }
    }
    assert!(
        refused > (end - start),
        "{refused} of {} bytes",
        end - start
    );
}
