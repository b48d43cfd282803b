//! Einsum: Einstein summation over static shapes.
//!
//! Each operand first loses its repeated indices (a diagonal: MUL by an identity mask,
//! then REDUCE_SUM over one of the two axes) and the indices nothing else needs
//! (REDUCE_SUM). Operands are then contracted left to right, two at a time, each pair as
//! one BATCH_MATMUL: the indices of both split into batch (kept), contracted (summed),
//! left-only and right-only ones, so that TRANSPOSE and RESHAPE make the operands
//! [batch, M, K] and [batch, K, N]. A final TRANSPOSE puts the indices in output order.
//! Shapes must be known: the plan (which axes merge into M, K, N) depends on them.

use std::collections::{BTreeMap, BTreeSet};

use nnc_formats::nn::OperationType;
use nnc_formats::tensor::DataType;

use super::{Lowerer, NResult, Node, NodeError, TensorValue, Value, invalid, needs_input_shape};

/// The largest dimension whose diagonal is taken with an identity mask (the mask holds
/// its square).
const MAX_DIAGONAL: u32 = 4096;

/// An index of a resolved equation: a letter, or one of the dimensions an ellipsis stands
/// for, numbered from the left of the broadcast ellipsis shape. Ellipsis dimensions sort
/// first, then letters in ASCII order: the implicit output's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Label {
    Ellipsis(usize),
    Letter(u8),
}

/// One item of a term as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Item {
    Letter(u8),
    Ellipsis,
}

/// An equation as written: the input terms and, in the explicit form, the output term.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub inputs: Vec<Vec<Item>>,
    pub output: Option<Vec<Item>>,
}

/// An equation with every ellipsis expanded for the inputs' ranks.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub inputs: Vec<Vec<Label>>,
    pub output: Vec<Label>,
}

fn parse_term(term: &str) -> Result<Vec<Item>, String> {
    let bytes = term.as_bytes();
    let mut items = Vec::new();
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        match c {
            b' ' | b'\t' => i += 1,
            b'.' => {
                if bytes.get(i..i + 3) != Some(b"...".as_slice()) {
                    return Err("a '.' that is not part of an ellipsis '...'".into());
                }
                if items.contains(&Item::Ellipsis) {
                    return Err(format!("term '{}' has more than one ellipsis", term.trim()));
                }
                items.push(Item::Ellipsis);
                i += 3;
            }
            c if c.is_ascii_alphabetic() => {
                items.push(Item::Letter(c));
                i += 1;
            }
            _ => {
                let shown = term[i..].chars().next().unwrap_or('?');
                return Err(format!("unexpected character '{shown}'"));
            }
        }
    }
    Ok(items)
}

/// Parses an equation: comma-separated terms of letters and at most one `...` each,
/// optionally followed by `->` and the output term. Spaces are ignored.
pub(crate) fn parse(equation: &str) -> Result<Parsed, String> {
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (equation, None),
    };
    let inputs = lhs.split(',').map(parse_term).collect::<Result<_, _>>()?;
    let output = rhs.map(parse_term).transpose()?;
    Ok(Parsed { inputs, output })
}

/// Expands the ellipses for inputs of ranks `ranks` (NumPy's rule: ellipsis dimensions
/// align from the right and broadcast) and fixes the output: explicit, or the implicit
/// one (ellipsis dimensions, then the letters that occur exactly once, sorted).
pub(crate) fn resolve(parsed: &Parsed, ranks: &[usize]) -> Result<Resolved, String> {
    if parsed.inputs.len() != ranks.len() {
        return Err(format!(
            "the equation has {} input terms for {} inputs",
            parsed.inputs.len(),
            ranks.len()
        ));
    }
    let mut ellipsis_dims = Vec::with_capacity(ranks.len());
    for (i, (term, &rank)) in parsed.inputs.iter().zip(ranks).enumerate() {
        let letters = term.iter().filter(|t| matches!(t, Item::Letter(_))).count();
        let dims = if term.contains(&Item::Ellipsis) {
            rank.checked_sub(letters).ok_or_else(|| {
                format!("term {i} names {letters} dimensions, but input {i} has rank {rank}")
            })?
        } else if letters != rank {
            return Err(format!(
                "term {i} names {letters} dimensions, but input {i} has rank {rank}"
            ));
        } else {
            0
        };
        ellipsis_dims.push(dims);
    }
    let widest = ellipsis_dims.iter().copied().max().unwrap_or(0);
    let expand = |term: &[Item], dims: usize| -> Vec<Label> {
        let mut labels = Vec::new();
        for item in term {
            match *item {
                Item::Letter(c) => labels.push(Label::Letter(c)),
                Item::Ellipsis => labels.extend((widest - dims..widest).map(Label::Ellipsis)),
            }
        }
        labels
    };
    let inputs: Vec<Vec<Label>> = parsed
        .inputs
        .iter()
        .zip(&ellipsis_dims)
        .map(|(term, &dims)| expand(term, dims))
        .collect();
    let mut counts: BTreeMap<Label, usize> = BTreeMap::new();
    for label in inputs.iter().flatten() {
        *counts.entry(*label).or_default() += 1;
    }
    let output = match &parsed.output {
        Some(term) => {
            let output = expand(term, widest);
            let mut seen = BTreeSet::new();
            for label in &output {
                if let Label::Letter(c) = label {
                    let c = char::from(*c);
                    if !counts.contains_key(label) {
                        return Err(format!("output index '{c}' is in no input term"));
                    }
                    if !seen.insert(*label) {
                        return Err(format!("output index '{c}' is repeated"));
                    }
                }
            }
            output
        }
        None => counts
            .iter()
            .filter(|(l, k)| matches!(l, Label::Ellipsis(_)) || **k == 1)
            .map(|(l, _)| *l)
            .collect(),
    };
    Ok(Resolved { inputs, output })
}

/// The size of every index: letters must agree; ellipsis dimensions broadcast (1 or n).
fn label_sizes(eq: &Resolved, dims: &[Vec<u32>]) -> Result<BTreeMap<Label, u32>, String> {
    let mut sizes: BTreeMap<Label, u32> = BTreeMap::new();
    for (labels, dims) in eq.inputs.iter().zip(dims) {
        for (label, &d) in labels.iter().zip(dims) {
            let size = sizes.entry(*label).or_insert(d);
            if *size == d {
                continue;
            }
            match label {
                Label::Ellipsis(_) if *size == 1 || d == 1 => *size = (*size).max(d),
                Label::Ellipsis(_) => {
                    return Err(format!(
                        "ellipsis dimensions {size} and {d} do not broadcast"
                    ));
                }
                Label::Letter(c) => {
                    return Err(format!(
                        "index '{}' has sizes {size} and {d}",
                        char::from(*c)
                    ));
                }
            }
        }
    }
    Ok(sizes)
}

/// An intermediate result: its operand and the index of each of its axes.
#[derive(Clone, Debug)]
struct Term {
    operand: u32,
    labels: Vec<Label>,
    dims: Vec<u32>,
}

impl Term {
    /// The NN dimensions (a rank-0 value is `[1]`).
    fn nn_dims(&self) -> Vec<u32> {
        if self.dims.is_empty() {
            vec![1]
        } else {
            self.dims.clone()
        }
    }

    fn size_of(&self, labels: &[Label]) -> NResult<u32> {
        let mut product = 1u64;
        for label in labels {
            if let Some(p) = self.labels.iter().position(|l| l == label) {
                product = product.saturating_mul(u64::from(self.dims[p]));
            }
        }
        u32::try_from(product).map_err(|_| {
            NodeError::Unsupported(format!(
                "Einsum merges dimensions into {product} elements, over the NN set's 32-bit sizes"
            ))
        })
    }
}

impl Lowerer<'_> {
    pub(super) fn einsum(&mut self, n: &Node) -> NResult<()> {
        let equation = n
            .attrs
            .string("equation")?
            .ok_or_else(|| NodeError::Invalid("Einsum needs an 'equation' attribute".into()))?;
        let bad = |m: String| NodeError::Invalid(format!("Einsum equation '{equation}': {m}"));
        let parsed = parse(&equation).map_err(bad)?;
        let count = n.proto.input.len();
        if count == 0 {
            return invalid("Einsum needs at least one input");
        }
        let mut values = Vec::with_capacity(count);
        for i in 0..count {
            let tv = self.tensor(n, i)?;
            self.require_float(n, tv)?;
            let dims = self.dims(tv);
            if dims.contains(&0) {
                return needs_input_shape(format!(
                    "Einsum needs static input shapes to plan its contraction, and input {i} \
                     has dynamic dimensions; fix them with --input-shape"
                ));
            }
            values.push((tv, dims));
        }
        let ranks: Vec<usize> = values.iter().map(|(_, d)| d.len()).collect();
        let eq = resolve(&parsed, &ranks).map_err(bad)?;
        let all_dims: Vec<Vec<u32>> = values.iter().map(|(_, d)| d.clone()).collect();
        label_sizes(&eq, &all_dims).map_err(bad)?;
        let term = |i: usize| Term {
            operand: values[i].0.operand,
            labels: eq.inputs[i].clone(),
            dims: values[i].1.clone(),
        };
        // What the operands from `i` on and the output still need.
        let needed_from = |i: usize| -> BTreeSet<Label> {
            eq.inputs[i.min(count)..]
                .iter()
                .flatten()
                .chain(&eq.output)
                .copied()
                .collect()
        };
        let mut keep = needed_from(1);
        let mut acc = self.einsum_prepare(n, term(0), &keep)?;
        for i in 1..count {
            keep = needed_from(i + 1);
            let mut others = keep.clone();
            others.extend(&acc.labels);
            let next = self.einsum_prepare(n, term(i), &others)?;
            acc = self.einsum_contract(n, acc, next, &keep)?;
        }
        let first = values[0].0;
        self.einsum_finish(n, acc, &eq.output, first)
    }

    /// Transposes the result into output order and binds it.
    fn einsum_finish(
        &mut self,
        n: &Node,
        acc: Term,
        output: &[Label],
        first: TensorValue,
    ) -> NResult<()> {
        let acc_set: BTreeSet<Label> = acc.labels.iter().copied().collect();
        let out_set: BTreeSet<Label> = output.iter().copied().collect();
        if acc_set != out_set || acc.labels.len() != output.len() {
            return invalid("Einsum lowering lost track of its indices");
        }
        let result = self.einsum_permute(n, acc, output)?;
        let scalar = output.is_empty();
        if result.operand == first.operand {
            // Nothing was computed (`ij->ij`): an identity.
            let tv = TensorValue { scalar, ..first };
            return self.identity_value(n, Value::Tensor(tv));
        }
        self.set_tensor(n, 0, result.operand, DataType::F32, scalar);
        Ok(())
    }

    /// Takes the diagonals of repeated indices, then sums out the indices not in `keep`.
    fn einsum_prepare(&mut self, n: &Node, mut t: Term, keep: &BTreeSet<Label>) -> NResult<Term> {
        while let Some((p, q)) = repeated(&t.labels) {
            t = self.einsum_diagonal(n, t, p, q)?;
        }
        let axes: Vec<i32> = (0..t.labels.len())
            .filter(|&a| !keep.contains(&t.labels[a]))
            .map(|a| a as i32)
            .collect();
        if axes.is_empty() {
            return Ok(t);
        }
        let a = self.i32_vector(&axes);
        let operand = self.reduce_op(n, OperationType::ReduceSum, t.operand, a, false)?;
        let (labels, dims) = t
            .labels
            .iter()
            .zip(&t.dims)
            .filter(|(l, _)| keep.contains(l))
            .map(|(l, d)| (*l, *d))
            .unzip();
        Ok(Term {
            operand,
            labels,
            dims,
        })
    }

    /// The diagonal over axes `p < q` (same index): MUL by an identity mask, then
    /// REDUCE_SUM over `q`.
    fn einsum_diagonal(&mut self, n: &Node, t: Term, p: usize, q: usize) -> NResult<Term> {
        let d = t.dims[p];
        if d != t.dims[q] {
            return invalid(format!(
                "Einsum: a repeated index has sizes {d} and {}",
                t.dims[q]
            ));
        }
        if d > MAX_DIAGONAL {
            return Err(NodeError::Unsupported(format!(
                "Einsum diagonal over a dimension of {d} is not supported (its identity mask \
                 would hold {d}x{d} values; nnc builds masks up to {MAX_DIAGONAL})"
            )));
        }
        let mut mask_dims = vec![1u32; t.dims.len()];
        mask_dims[p] = d;
        mask_dims[q] = d;
        let side = d as usize;
        let mut mask = vec![0f32; side * side];
        for i in 0..side {
            mask[i * side + i] = 1.0;
        }
        let m = self.model.add_f32_tensor(mask_dims, &mask);
        let x = self.arith(n, OperationType::Mul, t.operand, m)?;
        let a = self.i32_vector(&[q as i32]);
        let operand = self.reduce_op(n, OperationType::ReduceSum, x, a, false)?;
        let (mut labels, mut dims) = (t.labels, t.dims);
        labels.remove(q);
        dims.remove(q);
        Ok(Term {
            operand,
            labels,
            dims,
        })
    }

    /// TRANSPOSE into the order `labels` (a permutation of the term's).
    fn einsum_permute(&mut self, n: &Node, t: Term, labels: &[Label]) -> NResult<Term> {
        let perm: Vec<usize> = labels
            .iter()
            .filter_map(|l| t.labels.iter().position(|m| m == l))
            .collect();
        if perm.len() != t.labels.len() {
            return invalid("Einsum lowering lost track of its indices");
        }
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(t);
        }
        let p: Vec<i32> = perm.iter().map(|&p| p as i32).collect();
        let operand = self.transpose_op(n, t.operand, &p)?;
        Ok(Term {
            operand,
            labels: labels.to_vec(),
            dims: perm.iter().map(|&p| t.dims[p]).collect(),
        })
    }

    /// TILEs `t` along the shared indices where it has size 1 and `other` more (ellipsis
    /// broadcasting).
    fn einsum_broadcast(&mut self, n: &Node, t: Term, other: &Term) -> NResult<Term> {
        let mut multiples = vec![1i32; t.dims.len()];
        let mut dims = t.dims.clone();
        for (a, label) in t.labels.iter().enumerate() {
            if let Some(b) = other.labels.iter().position(|l| l == label)
                && t.dims[a] == 1
                && other.dims[b] > 1
            {
                multiples[a] = i32::try_from(other.dims[b]).unwrap_or(i32::MAX);
                dims[a] = other.dims[b];
            }
        }
        if multiples.iter().all(|&m| m == 1) {
            return Ok(t);
        }
        let m = self.i32_vector(&multiples);
        let operand = self.emit(n, OperationType::Tile, vec![t.operand, m])?;
        Ok(Term { operand, dims, ..t })
    }

    /// Contracts two prepared terms as one BATCH_MATMUL, keeping the indices in `keep`.
    fn einsum_contract(
        &mut self,
        n: &Node,
        a: Term,
        b: Term,
        keep: &BTreeSet<Label>,
    ) -> NResult<Term> {
        let in_b = |l: &&Label| b.labels.contains(l);
        let batch: Vec<Label> = a
            .labels
            .iter()
            .filter(in_b)
            .filter(|l| keep.contains(l))
            .copied()
            .collect();
        let summed: Vec<Label> = a
            .labels
            .iter()
            .filter(in_b)
            .filter(|l| !keep.contains(l))
            .copied()
            .collect();
        let left: Vec<Label> = a
            .labels
            .iter()
            .filter(|l| !b.labels.contains(l))
            .copied()
            .collect();
        let right: Vec<Label> = b
            .labels
            .iter()
            .filter(|l| !a.labels.contains(l))
            .copied()
            .collect();
        let a2 = self.einsum_broadcast(n, a, &b)?;
        let b2 = self.einsum_broadcast(n, b, &a2)?;
        let (a, b) = (a2, b2);
        let bs = a.size_of(&batch)?;
        let (m, k, cols) = (a.size_of(&left)?, a.size_of(&summed)?, b.size_of(&right)?);
        let a_order: Vec<Label> = [&batch[..], &left, &summed].concat();
        let b_order: Vec<Label> = [&batch[..], &summed, &right].concat();
        let mut result_labels: Vec<Label> = [&batch[..], &left].concat();
        result_labels.extend(&right);
        let mut result_dims = Vec::with_capacity(result_labels.len());
        for label in &result_labels {
            let source = if right.contains(label) { &b } else { &a };
            let p = source.labels.iter().position(|l| l == label).unwrap_or(0);
            result_dims.push(source.dims[p]);
        }
        let a = self.einsum_permute(n, a, &a_order)?;
        let b = self.einsum_permute(n, b, &b_order)?;
        let x = self.reshape_to(n, a.operand, &[bs, m, k])?;
        let y = self.reshape_to(n, b.operand, &[bs, k, cols])?;
        let no = self.bool_const(false);
        let product = self.emit(n, OperationType::BatchMatmul, vec![x, y, no, no])?;
        let result = Term {
            operand: product,
            labels: result_labels,
            dims: result_dims,
        };
        let shape = result.nn_dims();
        let operand = self.reshape_to(n, product, &shape)?;
        Ok(Term { operand, ..result })
    }
}

/// The first repeated index: its first two axes.
fn repeated(labels: &[Label]) -> Option<(usize, usize)> {
    labels.iter().enumerate().find_map(|(p, l)| {
        labels[p + 1..]
            .iter()
            .position(|m| m == l)
            .map(|q| (p, p + 1 + q))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letters(s: &str) -> Vec<Label> {
        s.bytes().map(Label::Letter).collect()
    }

    fn resolved(equation: &str, ranks: &[usize]) -> Result<Resolved, String> {
        resolve(&parse(equation)?, ranks)
    }

    #[test]
    fn explicit_equations_keep_their_output_order() {
        let r = resolved("bij, bjk -> bik", &[3, 3]).unwrap();
        assert_eq!(r.inputs, vec![letters("bij"), letters("bjk")]);
        assert_eq!(r.output, letters("bik"));
        let r = resolved("ij->", &[2]).unwrap();
        assert!(r.output.is_empty());
        let r = resolved("->", &[0]).unwrap();
        assert_eq!(r.inputs, vec![Vec::<Label>::new()]);
    }

    #[test]
    fn implicit_output_is_the_single_indices_sorted() {
        assert_eq!(resolved("i,i", &[1, 1]).unwrap().output, Vec::new());
        assert_eq!(resolved("ji", &[2]).unwrap().output, letters("ij"));
        assert_eq!(resolved("ij,jk", &[2, 2]).unwrap().output, letters("ik"));
        assert_eq!(resolved("ii", &[2]).unwrap().output, Vec::new());
        // ASCII order: capitals first.
        assert_eq!(resolved("bA", &[2]).unwrap().output, letters("Ab"));
    }

    #[test]
    fn ellipses_align_from_the_right() {
        let r = resolved("...ij,...jk->...ik", &[4, 3]).unwrap();
        use Label::{Ellipsis as E, Letter as L};
        assert_eq!(r.inputs[0], vec![E(0), E(1), L(b'i'), L(b'j')]);
        assert_eq!(r.inputs[1], vec![E(1), L(b'j'), L(b'k')]);
        assert_eq!(r.output, vec![E(0), E(1), L(b'i'), L(b'k')]);
        // Implicit: the ellipsis dimensions come first.
        let r = resolved("i...,i", &[3, 1]).unwrap();
        assert_eq!(r.output, vec![E(0), E(1)]);
        let r = resolved("...ii ->...i", &[3]).unwrap();
        assert_eq!(r.inputs[0], vec![E(0), L(b'i'), L(b'i')]);
        assert_eq!(r.output, vec![E(0), L(b'i')]);
        // An ellipsis of no dimensions.
        let r = resolved("...i->i", &[1]).unwrap();
        assert_eq!(r.inputs[0], letters("i"));
    }

    #[test]
    fn malformed_equations_are_errors() {
        for (equation, ranks) in [
            ("ij", &[3][..]),
            ("ij,jk", &[2][..]),
            ("i.j", &[2][..]),
            ("..i", &[1][..]),
            ("......", &[1][..]),
            ("i1", &[2][..]),
            ("ij->k", &[2][..]),
            ("ij->ii", &[2][..]),
            ("ij->i->j", &[2][..]),
            ("ij-", &[2][..]),
            ("ij>i", &[2][..]),
            ("ij->i,j", &[2][..]),
            ("ijk...", &[2][..]),
            ("ié", &[2][..]),
            ("", &[1][..]),
        ] {
            assert!(
                resolved(equation, ranks).is_err(),
                "'{equation}' with ranks {ranks:?} must be refused"
            );
        }
    }

    #[test]
    fn sizes_must_agree_or_broadcast() {
        let r = resolved("ij,jk", &[2, 2]).unwrap();
        assert!(label_sizes(&r, &[vec![2, 3], vec![4, 5]]).is_err());
        let s = label_sizes(&r, &[vec![2, 3], vec![3, 5]]).unwrap();
        assert_eq!(s[&Label::Letter(b'k')], 5);
        let r = resolved("...i,...i", &[2, 2]).unwrap();
        let s = label_sizes(&r, &[vec![1, 3], vec![4, 3]]).unwrap();
        assert_eq!(s[&Label::Ellipsis(0)], 4);
        assert!(label_sizes(&r, &[vec![2, 3], vec![4, 3]]).is_err());
    }

    #[test]
    fn repeated_finds_the_first_pair() {
        assert_eq!(repeated(&letters("bii")), Some((1, 2)));
        assert_eq!(repeated(&letters("ijki")), Some((0, 3)));
        assert_eq!(repeated(&letters("ijk")), None);
    }
}
